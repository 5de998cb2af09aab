"""One embedded Sail Spark session for a whole test session.

Starting Sail takes a second or two and every Delta test needs a session, so tests share
one. Use the fixture body from a conftest::

    from tests.support.spark import sail_spark_session

    spark_session = pytest.fixture(scope="session", name="spark_session")(sail_spark_session)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from sink import create_spark_session, stop_spark_session
from tests.support.settings import spark_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def sail_spark_session() -> Iterator[SparkSession]:
    """Fixture body: start an embedded Sail session, yield it, stop it (and its server)."""
    session = create_spark_session(spark_settings(mode="embedded"))
    try:
        yield session
    finally:
        stop_spark_session(session)
