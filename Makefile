# The two commands a new user needs: `make run` and `make test`.
# Both create .venv with python3 -m venv and install the project into it when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run studies day quick test test-fast lint bench golden clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m compileall -q des analysis  # an editable install is not byte-compiled: do it once
	touch $(STAMP)

# The main job: the default scenario's summary, then the headline study (RTX 4090 +
# Qwen2.5-7B, static vs continuous batching, Poisson and bursty traffic, each scheduler's
# capacity under a default SLO), burstiness on 1 to 8 GPUs, the seed lesson's slot grid, and
# the report with its figures in reports/. `make studies` adds the other studies, `make day`
# the day-long ones; each writes the report again with their sections.
run: $(STAMP)
	$(BIN)/des run --out results/default
	$(BIN)/des sweep scenarios/headline.yaml --out results/headline
	$(BIN)/des sweep scenarios/burstiness.yaml --out results/burstiness --brief
	$(BIN)/des sweep scenarios/detail.yaml --out results/detail --brief
	$(BIN)/des sweep scenarios/lesson-grid.yaml --out results/lesson-grid --brief
	$(BIN)/python -m analysis.report --results results --out reports

# The prefill/decode studies (2 and 4 GPUs, colocated vs disaggregated, unlike GPUs priced),
# prefix caching (system prompts, multi-turn chat), what one 4090 can serve and what
# speculative decoding adds against load; then the report with their sections.
studies: run
	$(BIN)/des sweep scenarios/pd-compare.yaml --out results/pd-compare --brief
	$(BIN)/des sweep scenarios/pd-breakeven.yaml --out results/pd-breakeven --brief
	$(BIN)/des sweep scenarios/pd-split.yaml --out results/pd-split --brief
	$(BIN)/des sweep scenarios/pd-interference.yaml --out results/pd-interference --brief --workers 1
	$(BIN)/des sweep scenarios/pd-hetero.yaml --out results/pd-hetero --brief
	$(BIN)/des sweep scenarios/caching-system-prompt.yaml --out results/caching-system-prompt --brief
	$(BIN)/des sweep scenarios/caching-chat.yaml --out results/caching-chat --brief
	$(BIN)/des sweep scenarios/models-4090.yaml --out results/models-4090 --brief
	$(BIN)/des sweep scenarios/speculative.yaml --out results/speculative --brief
	$(BIN)/python -m analysis.report --results results --out reports

# The day-long studies: a day of diurnal traffic and a burst on RTX 4090s (fixed clusters
# against autoscaling; each run simulates a whole day), then the report with their section.
day: run
	$(BIN)/des sweep scenarios/day-4090.yaml --out results/day-4090 --brief
	$(BIN)/des sweep scenarios/burst-4090.yaml --out results/burst-4090 --brief
	$(BIN)/python -m analysis.report --results results --out reports

# A quick look: the default scenario's summary and the headline study's table (about a minute).
quick: $(STAMP)
	$(BIN)/des run --out results/default
	$(BIN)/des sweep scenarios/headline.yaml --out results/headline

# Lint (ruff rules and formatting, mypy with the pydantic plugin, the import layers of
# .importlinter), then every test. The what-if page's browser tests need Chromium: without
# it they are left out, and said so (CI installs it: .ci/run).
test: lint
	@if $(BIN)/python -c "import sys; from tests.test_ui_browser import chromium; sys.exit(chromium() is None)"; then \
		echo "$(BIN)/python -m pytest -q -n auto"; $(BIN)/python -m pytest -q -n auto; \
	else \
		echo "browser tests left out: Chromium is not installed (apt-get install chromium), so the what-if page is not tested in a browser"; \
		$(BIN)/python -m pytest -q -n auto -m "not browser"; \
	fi

# The inner loop: the tests not marked slow.
test-fast: lint
	$(BIN)/python -m pytest -q -n auto -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check des tests analysis
	$(BIN)/ruff format --check des tests analysis
	$(BIN)/mypy
	$(BIN)/lint-imports

# Regenerate the golden summaries of the shipped scenarios (only on purpose).
golden: $(STAMP)
	$(BIN)/python -m tests.golden

bench: $(STAMP)
	$(BIN)/des bench --json reports/bench.json
	$(BIN)/des bench --cases 1m --engines fast --repeats 1 --json reports/bench-1m.json

clean:
	rm -rf $(VENV) results .pytest_cache .ruff_cache .import_linter_cache
