# sqlchorus: `make demo` answers a sample question; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_QUESTION ?= How many customers do we have?

.PHONY: install demo test test-quick clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/sqlchorus ask "$(DEMO_QUESTION)"

test: $(STAMP)
	$(PY) -m pytest

test-quick: $(STAMP)
	$(PY) -m pytest -m "not slow"

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
