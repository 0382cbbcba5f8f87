# The two commands a new user needs: `make run` and `make test`.
# Both create .venv with python3 -m venv and install the project into it when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/des run

test: $(STAMP)
	$(BIN)/ruff check des tests analysis
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check des tests analysis

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_run.py

clean:
	rm -rf $(VENV) results .pytest_cache .ruff_cache
