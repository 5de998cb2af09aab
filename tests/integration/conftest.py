"""Fixtures for the Delta sink integration tests: a shared Sail session and lake folders."""

from __future__ import annotations

import pytest

from tests.support.spark import sail_spark_session

# Session scope: one Sail server for every Delta test in the run keeps it short.
spark_session = pytest.fixture(scope="session", name="spark_session")(sail_spark_session)
