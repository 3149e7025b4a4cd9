# Two entry points that work on a fresh machine with only Python, pip and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_BASE := $(VENV)/.installed-base
STAMP_TEST := $(VENV)/.installed-test

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_BASE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(STAMP_TEST): pyproject.toml $(STAMP_BASE)
	$(BIN)/python -m pip install --quiet -e '.[test,dev,docs,server]'
	touch $@

demo: $(STAMP_BASE)
	$(BIN)/python examples/demo.py

test: $(STAMP_TEST)
	$(BIN)/python -m pytest -q langgraph_checkpoint_verified tests docs README.md

lint: $(STAMP_TEST)
	$(BIN)/ruff check langgraph_checkpoint_verified tests benchmarks examples
	$(BIN)/ruff format --check langgraph_checkpoint_verified tests benchmarks examples
	$(BIN)/mypy langgraph_checkpoint_verified

# matplotlib (the `bench` extra) draws the plots; the run takes ~7-10 minutes
bench: $(STAMP_TEST)
	$(BIN)/python -m pip install --quiet -e '.[test,dev,bench]'
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) build dist *.egg-info
