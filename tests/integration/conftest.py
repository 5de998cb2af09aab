"""Fixtures for the Delta sink integration tests: a shared Sail session and lake folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sink import DeltaSink
from tests.support.settings import SinkFactory, sink_settings
from tests.support.spark import sail_spark_session

# Session scope: one Sail server for every Delta test in the run keeps it short.
spark_session = pytest.fixture(scope="session", name="spark_session")(sail_spark_session)


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """The test's lake folder (not created: the sink makes it)."""
    return tmp_path / "lake"


@pytest.fixture
def make_sink(spark_session: Any, lake: Path) -> SinkFactory:
    """Makes a ``DeltaSink`` on the shared session writing to ``lake``, its keyword
    arguments the ``sink`` section's keys (``tests.support.settings.sink_config``)."""

    def make(**settings: Any) -> DeltaSink:
        return DeltaSink(spark_session, sink_settings(lake, **settings))

    return make
