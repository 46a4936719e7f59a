# spotreel developer entry points. Everything runs from the project's virtualenv in .venv.
# Python 3.11: python3.11 where it is on the PATH, else python3 (the setup checks its version).
PYTHON ?= $(shell command -v python3.11 >/dev/null 2>&1 && echo python3.11 || echo python3)
VENV   := .venv
BIN    := $(VENV)/bin
SPOTREEL := $(BIN)/spotreel
PYTEST_ARGS ?=
# The server pass's first part runs its files on this many pytest-xdist workers (0: in this process).
TEST_WORKERS ?= 2
UNIT_COVERAGE := --cov=spotreel.domain --cov-report=term-missing:skip-covered --cov-fail-under=95
DEMO_ARGS ?=

.PHONY: setup up down status fresh demo test test-unit test-integration lint bench clean

# schemas/ too: decode_example.py is the code outside consumers copy.
LINT_PATHS := libs services worker tests bench schemas

# Idempotent: a stamp file records the pyproject.toml that was installed.
$(VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "setup: $(PYTHON) not found (spotreel needs Python 3.11)"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
	  || { echo "setup: $(PYTHON) is not Python 3.11 (spotreel needs Python 3.11; make PYTHON=...)"; exit 1; }
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
# The Go toolchain's own tarball installs to /usr/local/go (amazon-ec2-metadata-mock is built with `go install`).
test test-unit test-integration: export PATH := $(PATH):/usr/local/go/bin

# The server pass in two parts. Its tests mostly wait on servers and timers, so the first part runs on
# TEST_WORKERS pytest-xdist workers, a file to a worker (--dist loadfile keeps a file's module fixtures on one
# worker); every test there has its own topics, keyspace, buckets, tenants and ports. The second part runs the
# tests marked `serial` alone: they stop the shared stack or measure its services, start a multi-JVM stack of
# their own, or are bound by their own CPU (docs/decisions/0030-parallel-server-pass.md). Both parts run whatever the first one's outcome.
SERVER_PARALLEL := -m "(integration or e2e or chaos) and not serial" $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)
SERVER_SERIAL := -m serial
SERVER_PASS = status=0; \
	$(BIN)/pytest $(SERVER_PARALLEL) $(1) || status=$$?; \
	$(BIN)/pytest $(SERVER_SERIAL) $(1) || status=$$?; \
	exit $$status
# The openai Node package the Node SDK test runs (tests/node/package-lock.json pins it), from the npm registry.
NODE_DEPS = cd tests/node && npm ci --no-audit --no-fund --loglevel=error

# The whole suite, cheapest first: the system tools it needs (tools/system-packages finds them, or installs the
# missing ones from apt), ruff and mypy (strict on domain, codec and dispatch, pyproject.toml's [tool.mypy]) and
# the import contracts (tools/lint-imports runs import-linter over services/ and worker/ too; the script says
# why), so that a slip fails in seconds; then the unit pass with coverage of the domain, before any server
# starts; then the servers and the pass that needs them (integration, e2e, chaos), without coverage.
# PYTEST_ARGS go to every pass, so give options there (-x, -k ...); test paths go to test-unit or
# test-integration (a pass that selects no test fails, tests/harness/suite_checks.py).
test: setup
	tools/system-packages
	$(NODE_DEPS)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/mypy
	LINT_IMPORTS=$(BIN)/lint-imports tools/lint-imports
	$(BIN)/pytest -m unit $(UNIT_COVERAGE) --durations=25 $(PYTEST_ARGS)
	$(SPOTREEL) infra up
	@$(call SERVER_PASS,--durations=25 $(PYTEST_ARGS))

test-unit: setup
	tools/system-packages
	$(BIN)/pytest -m unit $(UNIT_COVERAGE) $(PYTEST_ARGS)

# One pass in this process: the paths a developer names need not hold a `serial` test.
test-integration: up
	tools/system-packages
	$(NODE_DEPS)
	$(BIN)/pytest -m "integration or e2e or chaos" $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/mypy
	LINT_IMPORTS=$(BIN)/lint-imports tools/lint-imports
	$(BIN)/spotreel schemas check
	$(BIN)/python -m spotreel.docs.settings --check

bench: setup
	$(BIN)/python bench/codec_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .coverage
