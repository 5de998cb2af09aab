"""Settings for tests, derived from a configuration as the daemon derives them.

``sink.SinkSettings``, ``sink.SparkSettings`` and the capture settings have no defaults of
their own: the configuration's (``config/models.py``) are the only ones, and
``daemon.wiring`` carries them over. Tests that drive a layer without a whole daemon build
its settings here, so they run with the defaults ``wal2delta run`` runs with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from capture import ReplicationRequest
from config import AppConfig, parse_config
from daemon.wiring import capture_settings as wired_capture_settings
from daemon.wiring import sink_settings as wired_sink_settings
from daemon.wiring import spark_settings as wired_spark_settings
from sink import DeltaSink, MetadataColumns, SinkSettings, SparkSettings

SinkFactory = Callable[..., DeltaSink]
"""Makes a ``DeltaSink`` from ``sink`` section keys (the ``make_sink`` fixture)."""


def sink_config(
    path: str | Path,
    *,
    source: Mapping[str, Any] | None = None,
    snapshot: Mapping[str, Any] | None = None,
    **sink: Any,
) -> AppConfig:
    """A configuration writing to ``path``; nothing in it reaches a database.

    Args:
        path: ``sink.path``.
        source: keys of the ``source`` section (``on_missing_key``, ``messages``); the
            publication is not created, so no table needs to be listed.
        snapshot: keys of the ``snapshot`` section (``writer``).
        sink: keys of the ``sink`` section, spelt as in YAML (``soft_delete=True``,
            ``partition_by_key={"public.t": {"width": 10}}``, ``messages="table"``).
    """
    return parse_config(
        {
            "source": {
                "dsn": "host=unused dbname=unused",
                "slot": "wal2delta_test",
                "publication": "wal2delta_test",
                "create_publication": False,
                **(source or {}),
            },
            "snapshot": dict(snapshot or {}),
            "sink": {"path": str(path), **sink},
        },
        environ={},
    )


def sink_settings(
    path: str | Path,
    *,
    source: Mapping[str, Any] | None = None,
    snapshot: Mapping[str, Any] | None = None,
    inline_sources: bool = False,
    **sink: Any,
) -> SinkSettings:
    """``daemon.wiring.sink_settings`` of ``sink_config(path, ...)``.

    Args:
        path, source, snapshot, sink: see ``sink_config``.
        inline_sources: ``SinkSettings.inline_sources``, which no configuration sets.
    """
    settings = wired_sink_settings(sink_config(path, source=source, snapshot=snapshot, **sink))
    return replace(settings, inline_sources=inline_sources)


def metadata_columns(**sink: Any) -> MetadataColumns:
    """The sink's metadata columns under the configuration's ``sink`` keys ``sink``
    (``soft_delete=True``, ``metadata={"lsn_column": "src_lsn"}``)."""
    return sink_settings("unused", **sink).metadata


def spark_settings(**spark: Any) -> SparkSettings:
    """``daemon.wiring.spark_settings`` of a configuration whose ``sink.spark`` is ``spark``
    (``mode="connect", url="sc://..."``, ``parallelism=2``)."""
    return wired_spark_settings(sink_config("unused", spark=spark))


def replication_request(**source: Any) -> ReplicationRequest:
    """The protocol options ``daemon.wiring.capture_settings`` asks for under the
    configuration's ``source`` keys ``source`` (``protocol_version=1``, ``binary=True``)."""
    return wired_capture_settings(sink_config("unused", source=source)).request
