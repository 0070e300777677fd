# perfpredict — the two commands: `make demo` (set up + profile an example on CPU + log to MLflow)
# and `make test` (set up + run the test suite). Both work on a fresh clone of a fresh machine.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch, pinned and installed first so that the package's `torch>=2.2` range is already
# satisfied (otherwise pip would fetch a multi-GB CUDA build). Override e.g. TORCH_SPEC=torch on a GPU box.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
DEMO_MODEL ?= examples/cnn_classifier.py

.PHONY: install demo test bench clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	@touch $(STAMP)

demo: install
	$(BIN)/perfpredict profile $(DEMO_MODEL) --device cpu
	@echo
	@echo "Open the MLflow UI on this run with:  $(BIN)/mlflow ui --backend-store-uri sqlite:///mlruns.db"

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python benchmarks/rate_model_accuracy.py
	$(BIN)/python benchmarks/profiling_overhead.py

clean:
	rm -rf perfpredict-out mlruns mlruns.db .pytest_cache
