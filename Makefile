# spotreel developer entry points. Everything runs from the project's virtualenv in .venv.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
SPOTREEL := $(BIN)/spotreel
PYTEST_ARGS ?=
DEMO_ARGS ?=

.PHONY: setup up down status fresh demo test test-unit test-integration lint bench clean

# schemas/ too: decode_example.py is the code outside consumers copy.
LINT_PATHS := libs services worker tests bench schemas

# Idempotent: a stamp file records the pyproject.toml that was installed.
$(VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "setup: $(PYTHON) not found (spotreel needs Python 3.11)"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,worker]'
	@touch $@

setup: $(VENV)/.installed

up: setup
	$(SPOTREEL) infra up

fresh: setup
	$(SPOTREEL) infra up --fresh

down: setup
	$(SPOTREEL) infra down

status: setup
	$(SPOTREEL) infra status

# The main job: bring the whole stack up, then one real worker renders a prompt into ./demo.mp4 through the
# public API (progress, sha256 check, decode, summary). Options: make demo DEMO_ARGS='--frames 16 --seed 7'.
demo: up
	$(SPOTREEL) demo $(DEMO_ARGS)

# The suite starts and kills many short-lived JVMs on 2 cores (the shared stack, chaos clusters, restarts): it
# runs them with C1 only, sparing each start the C2 compiler's CPU (docs/SETTINGS.md, jvm_fast_start). A
# server started by `up` or `demo` compiles with C2. An explicit SPOTREEL_JVM_FAST_START wins.
test test-unit test-integration: export SPOTREEL_JVM_FAST_START ?= 1

# The whole suite: unit (pure, hypothesis), integration against the real servers, e2e and chaos.
# ruff and mypy go first so that a lint or type slip fails in seconds, before any server starts (mypy: strict
# on domain, codec and dispatch, pyproject.toml's [tool.mypy]). tools/lint-imports runs import-linter over
# services/ and worker/ too (a bare lint-imports cannot see them; the script says why).
test: setup
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/mypy
	$(SPOTREEL) infra up
	LINT_IMPORTS=$(BIN)/lint-imports tools/lint-imports
	$(BIN)/pytest --durations=25 --cov=spotreel.domain --cov-report=term-missing:skip-covered --cov-fail-under=95 $(PYTEST_ARGS)

test-unit: setup
	$(BIN)/pytest -m unit --cov=spotreel.domain --cov-report=term-missing:skip-covered --cov-fail-under=95 $(PYTEST_ARGS)

test-integration: up
	$(BIN)/pytest -m "integration or e2e or chaos" $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/mypy
	LINT_IMPORTS=$(BIN)/lint-imports tools/lint-imports
	$(BIN)/spotreel schemas check
	$(BIN)/python -m spotreel.settings_catalogue --check

bench: setup
	$(BIN)/python bench/codec_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .coverage
