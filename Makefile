# Two commands on a fresh machine: `make demo` and `make test`. Everything else is set up here.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
export DAGSTER_HOME := $(CURDIR)/dagster_home
export BACKFILL_ASSETS_WAREHOUSE ?= $(CURDIR)/data/warehouse.duckdb
export BACKFILL_ASSETS_DBT_PROJECT ?= $(CURDIR)/dbt_project

.PHONY: setup demo test test-fast lint dev bench bench-five-years screenshots browser postgres clean

$(BIN)/.installed: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,postgres]'
	touch $@

setup: $(BIN)/.installed
	mkdir -p data dagster_home

## The main job: the demo backfill on the embedded DuckDB, end to end. `make demo WAREHOUSE=postgres`
## tells the same story on PostgreSQL (a throwaway server unless BACKFILL_ASSETS_WAREHOUSE is a URL).
WAREHOUSE ?= duckdb
demo: setup $(if $(filter postgres,$(WAREHOUSE)),postgres,)
	$(BIN)/backfill-assets-example demo --warehouse $(WAREHOUSE)

## The whole suite: lint, type check, then every test (slow end-to-end ones included).
# Two workers, one per core: the suite is CPU-bound (load average 4-5 while it runs), and three
# workers took as long on a clean clone (pytest 24:15 against 24:02 for two, 2026-12-02). The
# 40 slowest tests are listed at the end, to keep the suite's time in view.
test: setup browser postgres
	$(BIN)/ruff check backfill_assets tests bench
	$(BIN)/lint-imports
	$(BIN)/pyright
	$(BIN)/pytest -q -ra -n 2 --dist loadfile --no-loadscope-reorder --durations=40

## For iteration: the unit and contract tests only (on DuckDB and a throwaway PostgreSQL
## server), without the end-to-end, browser, reliability and slow tests (about 4 minutes on
## 2 cores). CI runs `make test`.
test-fast: setup postgres
	$(BIN)/pytest -q -n 2 --dist loadfile -m "not slow and not browser" \
	    --ignore=tests/e2e --ignore=tests/ui --ignore=tests/reliability

lint: setup
	$(BIN)/ruff check backfill_assets tests bench
	$(BIN)/ruff format --check backfill_assets tests bench || true
	$(BIN)/lint-imports
	$(BIN)/pyright

## The Dagster UI (webserver + daemon) on http://127.0.0.1:3000
dev: setup
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

bench: setup postgres
	$(BIN)/python -m bench

## One plan over five years of daily partitions, end to end, on SQLite and PostgreSQL storage
## (about 15 minutes; bench/measures/five_years.py). Writes bench/results/five_years.json.
bench-five-years: setup postgres
	$(BIN)/python -m bench.measures.five_years

## Headless Chromium for the browser tests (Debian's package; `playwright install` cannot work here).
browser:
	@command -v chromium >/dev/null || { \
	  (apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium) >/dev/null; }

## PostgreSQL's server binaries (Debian's package) for the throwaway servers the tests, the bench
## and `make demo WAREHOUSE=postgres` start; the package's own cluster is not used.
postgres:
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  (apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql) >/dev/null; }

screenshots: setup browser
	$(BIN)/pytest -q -m browser tests/ui --screenshots docs/img

clean:
	rm -rf data/*.duckdb* dagster_home/storage dagster_home/history dagster_home/schedules dagster_home/logs
