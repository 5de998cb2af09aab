"""Sink and engine settings for benchmarks that drive the sink or Spark without a daemon.

``sink.SinkSettings`` and ``sink.SparkSettings`` have no defaults of their own; these take
them from a configuration through ``daemon.wiring``, so a benchmark measures the sink and
the engine as ``wal2delta run`` configures them.
"""

from __future__ import annotations

from pathlib import Path

from config import AppConfig, parse_config
from daemon.wiring import sink_settings, spark_settings
from sink import SinkSettings, SparkSettings


def lake_config(lake: str | Path, **sink: object) -> AppConfig:
    """A configuration writing to ``lake``, with ``sink`` merged into its ``sink`` section
    (YAML spelling: ``partition_by_key={"public.t": {"width": 10}}``); its source is never
    reached."""
    return parse_config(
        {
            "source": {
                "dsn": "host=unused dbname=unused",
                "slot": "wal2delta_bench",
                "publication": "wal2delta_bench",
                "create_publication": False,
            },
            "sink": {"path": str(lake), **sink},
        },
        environ={},
    )


def bench_sink_settings(lake: str | Path, **sink: object) -> SinkSettings:
    """``daemon.wiring.sink_settings`` of ``lake_config(lake, **sink)``."""
    return sink_settings(lake_config(lake, **sink))


def bench_spark_settings() -> SparkSettings:
    """The engine of the default configuration (embedded Sail, automatic parallelism)."""
    return spark_settings(lake_config("unused"))
