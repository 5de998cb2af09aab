"""Streamed, two-phase and parallel-streamed transactions end to end into Delta.

The protocol workload (large streamed transactions with savepoints and subtransaction
aborts, interleaved transactions, prepared transactions committed and rolled back,
TRUNCATE CASCADE, logical messages) runs against PostgreSQL 18 and 15; the daemon writes
it to Delta through embedded Sail; every Delta table, read with delta-rs, must equal its
source table. Binary mode must give the same Delta contents as text mode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from capture.slots import current_wal_lsn
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source, sink_settings
from sink import DeltaSink, table_path
from tests.support.configs import make_config
from tests.support.oracle import compare_table, read_delta
from tests.support.scenarios import PROTOCOL_SCHEMA, PROTOCOL_TABLES, run_protocol_workload

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def run_into_delta(
    dsn: str, lake: Path, spark_session: object, source_options: dict[str, Any], **extra: Any
) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(PROTOCOL_SCHEMA)
    config = make_config(dsn, lake, list(PROTOCOL_TABLES), source=source_options, **extra)
    prepare_configured_source(config)
    run_protocol_workload(dsn, two_phase=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        endpos = current_wal_lsn(conn)
    sink = DeltaSink(spark_session, sink_settings(config))  # type: ignore[arg-type]
    Supervisor(config, sink, endpos=endpos).run()
    mismatches = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in PROTOCOL_TABLES:
            schema, _, table = name.partition(".")
            comparison = compare_table(conn, name, table_path(str(lake), schema, table))
            if not comparison.matches:
                mismatches.append(comparison.describe())
    assert not mismatches, "\n".join(mismatches)
    return config


def test_postgresql_18_parallel_streaming_and_two_phase_land_in_delta(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    config = run_into_delta(
        pg18_dsn,
        tmp_path / "lake",
        spark_session,
        {"protocol_version": 4, "streaming": "parallel", "two_phase": True, "messages": True},
        sink={"messages": "table"},
    )
    messages = read_delta(Path(str(config.sink.path)) / "_wal2delta_messages")
    assert [bytes(m["content"]) for m in messages] == [b"transactional"]


def test_binary_mode_gives_the_same_delta_contents_as_text_mode(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    from devtools.workload import DEMO_TABLES, Workload, create_schema

    lakes = {}
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_schema(conn)
        text_config = make_config(pg18_dsn, tmp_path / "text", list(DEMO_TABLES), slot="w2d_text")
        binary_config = make_config(
            pg18_dsn,
            tmp_path / "binary",
            list(DEMO_TABLES),
            slot="w2d_binary",
            source={"binary": True, "publication": "w2d_text"},
        )
        prepare_configured_source(text_config)
        prepare_configured_source(binary_config)
        workload = Workload(seed=3)
        for _ in range(6):
            workload.run_round(conn)
        endpos = current_wal_lsn(conn)
    for name, config in (("text", text_config), ("binary", binary_config)):
        sink = DeltaSink(spark_session, sink_settings(config))  # type: ignore[arg-type]
        Supervisor(config, sink, endpos=endpos).run()
        lakes[name] = {
            table: sorted(
                (
                    repr(sorted((k, v) for k, v in row.items() if not k.startswith("_wal2delta")))
                    for row in read_delta(table_path(str(config.sink.path), *table.split(".")))
                ),
            )
            for table in DEMO_TABLES
        }
    assert lakes["text"] == lakes["binary"]
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        for table in DEMO_TABLES:
            schema, _, name = table.partition(".")
            comparison = compare_table(
                conn, table, table_path(str(binary_config.sink.path), schema, name)
            )
            assert comparison.matches, comparison.describe()
