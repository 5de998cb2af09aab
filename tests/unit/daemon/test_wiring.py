"""One source of truth per setting: defaults live in ``config/models.py`` only.

The plain settings objects of the layers below ``daemon`` carry no defaults for what the
configuration sets; ``daemon.wiring`` fills every field from a validated ``AppConfig``.
"""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest

from capture import (
    BatchSettings,
    CaptureSettings,
    ReconnectSettings,
    ReplicationRequest,
    SnapshotTuning,
)
from config import parse_config
from daemon.wiring import capture_settings, sink_settings, spark_settings
from sink import KeyBuckets, MetadataColumns, SinkSettings, SparkSettings

# Fields no configuration sets; only these may have a default of their own.
UNCONFIGURED = {SinkSettings: {"inline_sources"}, SnapshotTuning: {"reader"}}


@pytest.mark.parametrize(
    "settings_class",
    [
        SinkSettings,
        SparkSettings,
        MetadataColumns,
        KeyBuckets,
        CaptureSettings,
        BatchSettings,
        SnapshotTuning,
        ReconnectSettings,
        ReplicationRequest,
    ],
)
def test_settings_objects_have_no_defaults_of_their_own(settings_class: type) -> None:
    defaulted = {
        field.name
        for field in fields(settings_class)
        if field.default is not MISSING or field.default_factory is not MISSING
    }
    assert defaulted == UNCONFIGURED.get(settings_class, set())


def test_the_default_configuration_gives_the_sink_its_defaults() -> None:
    config = parse_config(
        {
            "source": {"dsn": "host=h", "slot": "s", "publication": "p", "tables": ["t"]},
            "sink": {"path": "/lake"},
        },
        environ={},
    )
    sink = sink_settings(config)
    assert sink.path == "/lake"
    assert sink.metadata.soft_delete is False
    assert (sink.messages_table, sink.history, sink.inline_sources) == (False, False, False)
    assert (sink.on_missing_key, sink.column_names, sink.bulk_writer) == ("error", "error", "auto")
    assert sink.compact_after_writes == config.sink.compact_after_writes
    assert (sink.keys, sink.key_buckets, sink.column_types) == ({}, {}, {})
    assert (sink.on_unrepresentable, sink.on_unrepresentable_tables) == ("keep", {})
    spark = spark_settings(config)
    assert (spark.mode, spark.url, spark.conf, spark.parallelism) == ("embedded", None, {}, None)
    capture = capture_settings(config)
    assert capture.snapshot.parallelism == config.snapshot.parallelism
    assert capture.snapshot.chunk_bytes == int(config.snapshot.chunk_size)
    assert capture.batch.close_when_idle is config.sink.batch.close_when_idle is True
    assert capture.request.protocol_version == "auto"
