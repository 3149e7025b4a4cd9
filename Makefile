# Two entry points that work on a fresh machine with only Python, pip and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_BASE := $(VENV)/.installed-base
STAMP_TEST := $(VENV)/.installed-test
TEST_PATHS := langgraph_checkpoint_verified tests docs README.md
# A second environment for the tests: every direct dependency of the package and of
# the test, docs and s3 extras is pinned to the lower bound pyproject.toml declares
# (.ci/lowest_constraints.py writes the pins), so a bound that is not true fails `make test`.
# The server extra is not installed there, and tests/test_server.py runs only in .venv:
# langgraph dev retries a run killed by a restart only with a langgraph-api newer than
# any that installs beside langgraph 1.2.0 (0.7.103, which langgraph-cli 0.4.14 brings,
# and 0.13.8, the newest that fits, both fail it).
LOWEST := .venv-lowest
LOWEST_BIN := $(LOWEST)/bin
LOWEST_EXTRAS := test,docs,s3
LOWEST_SKIPS := --ignore=tests/test_server.py
STAMP_LOWEST := $(LOWEST)/.installed
# The build backend pyproject.toml names, and what it asks for to build an editable
# install, in both environments: tests/test_newcomer_places.py installs the package from
# copies of the checkout with them, without a network.
BUILD_REQUIRES := $(shell sed -n 's/^requires = \[\(.*\)\]$$/\1/p' pyproject.toml) editables
STAMP_BUILD := $(VENV)/.installed-build
STAMP_LOWEST_BUILD := $(LOWEST)/.installed-build

# A checkout where nothing can work is said so before anything starts.
ifneq ($(findstring :,$(CURDIR)),)
$(error $(CURDIR) has a ':' in it, and Python makes no venv under a path with its PATH separator: clone the project somewhere else)
endif

.PHONY: demo test test-lowest lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_BASE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(STAMP_TEST): pyproject.toml $(STAMP_BASE) $(STAMP_BUILD)
	$(BIN)/python -m pip install --quiet -e '.[test,dev,docs,server,s3]'
	touch $@

$(STAMP_BUILD): pyproject.toml Makefile | $(BIN)/python
	$(BIN)/python -m pip install --quiet $(BUILD_REQUIRES)
	touch $@

# made anew whenever the declared bounds change: nothing newer may be left over
$(STAMP_LOWEST): pyproject.toml .ci/lowest_constraints.py
	rm -rf $(LOWEST)
	$(PYTHON) -m venv $(LOWEST)
	$(LOWEST_BIN)/python -m pip install --quiet --upgrade pip
	$(LOWEST_BIN)/python -m pip install --quiet --no-deps -e .
	$(LOWEST_BIN)/python .ci/lowest_constraints.py langgraph-checkpoint-verified \
		$(LOWEST_EXTRAS) > $(LOWEST)/constraints.txt
	$(LOWEST_BIN)/python -m pip install --quiet -c $(LOWEST)/constraints.txt \
		-e '.[$(LOWEST_EXTRAS)]'
	$(LOWEST_BIN)/python -m pip check
	touch $@

$(STAMP_LOWEST_BUILD): $(STAMP_LOWEST) Makefile
	$(LOWEST_BIN)/python -m pip install --quiet $(BUILD_REQUIRES)
	touch $@

demo: $(STAMP_BASE)
	$(BIN)/python examples/demo.py

# everything, with the newest dependencies and then with the lowest declared ones; first
# the package's shape: its layers (import-linter's contracts in pyproject.toml) and no
# module reading another's private names (ruff's SLF001)
test: $(STAMP_TEST) $(STAMP_LOWEST_BUILD)
	$(BIN)/lint-imports
	$(BIN)/ruff check langgraph_checkpoint_verified
	$(BIN)/python -m pytest -q $(TEST_PATHS)
	$(LOWEST_BIN)/python -m pytest -q $(LOWEST_SKIPS) $(TEST_PATHS)

test-lowest: $(STAMP_LOWEST_BUILD)
	$(LOWEST_BIN)/python -m pytest -q $(LOWEST_SKIPS) $(TEST_PATHS)

lint: $(STAMP_TEST)
	$(BIN)/ruff check langgraph_checkpoint_verified tests benchmarks examples
	$(BIN)/ruff format --check langgraph_checkpoint_verified tests benchmarks examples
	$(BIN)/mypy langgraph_checkpoint_verified

# matplotlib (the `bench` extra) draws the plots; the run takes 5-10 minutes
bench: $(STAMP_TEST)
	$(BIN)/python -m pip install --quiet -e '.[test,dev,bench]'
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) $(LOWEST) build dist *.egg-info
