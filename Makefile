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

.PHONY: install demo test lint bench clean

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

# The suite in two phases: the modules that assert no timing relation in parallel (one pytest-xdist worker per
# CPU, at most 8), then the measuring modules alone, so no timing shares the CPUs with another test. Both phases
# always run; the target fails if either failed. `$(BIN)/python -m pytest` alone runs everything serially.
# OMP_WAIT_POLICY=PASSIVE: two workers' OpenMP pools (XGBoost, LightGBM, torch) spinning for the same two cores
# made the parallel phase take 556 s instead of 433 s on a 2-vCPU VM; passive waiting changes no result.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 8 ] && n=8; echo $$n)

# make test lints first (ruff, [tool.ruff] in pyproject.toml: under a second) and runs both phases even when
# the lint fails, so one unsorted import never hides the tests' results.
test: install
	@$(BIN)/ruff check --quiet .; l=$$?; \
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m pytest -q -m parallel_safe -n $(TEST_WORKERS) --dist loadfile; a=$$?; \
	$(BIN)/python -m pytest -q -m "not parallel_safe"; b=$$?; \
	echo "make test: lint exit $$l, parallel phase exit $$a, serial phase exit $$b"; \
	[ $$l -eq 0 ] && [ $$a -eq 0 ] && [ $$b -eq 0 ]

lint: install
	$(BIN)/ruff check .

bench: install
	$(BIN)/python benchmarks/rate_model_accuracy.py
	$(BIN)/python benchmarks/profiling_overhead.py

clean:
	rm -rf perfpredict-out mlruns mlruns.db .pytest_cache
