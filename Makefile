# Two set-up commands: `make demo` and `make test`. Each creates .venv by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0
TEACHER ?=
PRECISION ?=
# Test processes (pytest-xdist): one per core by default; each gets its share of the cores (tests/conftest.py).
TEST_WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=20

.PHONY: venv demo test test-slow test-all bench gpu-check cli-reference clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned: an unpinned torch pulls several GB of CUDA wheels.
	$(BIN)/pip install --quiet "torch==$(TORCH_VERSION)"
	$(BIN)/pip install --quiet -e ".[test,demo]"
	touch $@

venv: $(BIN)/.installed

demo: venv
	$(BIN)/python -m mlminilm.demo.run $(if $(TEACHER),--teacher $(TEACHER)) $(if $(PRECISION),--precision $(PRECISION))

# Lint and format first (ruff, configured in pyproject.toml): seconds, and a failure names the file and line.
# The 20 slowest tests are printed at the end of every run (CI's log shows where the time goes); the tests run in
# TEST_WORKERS processes, each taking the next test as it finishes one (`--dist worksteal`).
test: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PYTEST)

# The slow tests alone (real teachers, the README's commands as printed, the installed wheel): what `make test` skips; CI runs both.
test-slow: venv
	$(PYTEST) --runslow -m slow

test-all: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PYTEST) --runslow

# docs/CLI.md from the option declarations (tests/test_cli_reference.py fails when it is stale).
cli-reference: venv
	$(BIN)/python scripts/cli_reference.py

bench: venv
	$(BIN)/python benchmarks/distill_step.py

clean:
	rm -rf $(VENV) build *.egg-info demo-out gpu-check-out

# The one GPU acceptance command (scripts/gpu_check.py): preflight, `pytest -m gpu` (a skip fails), the real CLI at
# real shape, 2 processes with 2+ GPUs; a JSON and a Markdown summary in $(OUT) or gpu-check-out/. Under 8 minutes
# on one H100; without CUDA, bf16, Triton or flash attention it prints one line saying why and exits 2.
gpu-check: venv
	@$(BIN)/python scripts/gpu_check.py
