"""Every protocol version against real servers: PostgreSQL 18 (1-4) and 15 (1-3), and the
highest protocol of 14 (2), 16 and 17 (4).

The workload streams large transactions (``logical_decoding_work_mem = 64kB``) with
savepoints, nested subtransactions rolled back, interleaved concurrent transactions, one
aborted; prepared transactions committed and rolled back (streamed too); TRUNCATE with
CASCADE and RESTART IDENTITY; logical messages. The daemon's output must equal every source
table twice over: in Delta (written through embedded Sail, read back with delta-rs) and
in a reference model that applies the changes row by row.
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
from tests.support.model_sink import ModelSink
from tests.support.oracle import canonical, compare_table, read_source
from tests.support.scenarios import PROTOCOL_SCHEMA, PROTOCOL_TABLES, run_protocol_workload
from tests.support.sinks import TeeSink

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PG18_CASES = [
    pytest.param({"protocol_version": 1, "streaming": "off"}, id="v1"),
    pytest.param({"protocol_version": 2, "streaming": "on"}, id="v2-stream"),
    pytest.param({"protocol_version": 3, "streaming": "on", "two_phase": True}, id="v3-2pc"),
    pytest.param(
        {"protocol_version": 4, "streaming": "parallel", "two_phase": True, "messages": True},
        id="v4-parallel-2pc",
    ),
    pytest.param({"protocol_version": 4, "streaming": "on", "binary": True}, id="v4-binary"),
]
PG15_CASES = [
    pytest.param({"protocol_version": 1, "streaming": "off"}, id="v1"),
    pytest.param({"protocol_version": 2, "streaming": "on", "binary": True}, id="v2-binary"),
    pytest.param(
        {"protocol_version": 3, "streaming": "on", "two_phase": True, "messages": True},
        id="v3-2pc",
    ),
]

OTHER_CASES = [
    pytest.param(
        "pg14",
        {"protocol_version": 2, "streaming": "on", "binary": True, "messages": True},
        id="pg14-v2-stream-binary",
    ),
    pytest.param(
        "pg16",
        {"protocol_version": 4, "streaming": "parallel", "two_phase": True, "messages": True},
        id="pg16-v4-parallel-2pc",
    ),
    pytest.param(
        "pg17",
        {"protocol_version": 4, "streaming": "parallel", "two_phase": True, "binary": True},
        id="pg17-v4-parallel-2pc-binary",
    ),
]


def assert_model_equals_source(dsn: str, model: ModelSink) -> None:
    problems = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in PROTOCOL_TABLES:
            schema, _, table = name.partition(".")
            columns, rows = read_source(conn, schema, table)
            source = {repr(canonical(r[0])): [canonical(v) for v in r] for r in rows}
            delta = {
                repr(canonical(r[columns[0]])): [canonical(r[c]) for c in columns]
                for r in model.tables.get(name, {}).values()
            }
            if source != delta:
                missing = sorted(set(source) - set(delta))[:5]
                extra = sorted(set(delta) - set(source))[:5]
                changed = [k for k in source if k in delta and source[k] != delta[k]][:3]
                problems.append(
                    f"{name}: source {len(source)} rows, model {len(delta)}; missing {missing}, "
                    f"extra {extra}, changed {[(source[k], delta[k]) for k in changed]}"
                )
    assert not problems, "\n".join(problems)


def assert_delta_equals_source(dsn: str, lake: Path) -> None:
    mismatches = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in PROTOCOL_TABLES:
            schema, _, table = name.partition(".")
            comparison = compare_table(conn, name, table_path(str(lake), schema, table))
            if not comparison.matches:
                mismatches.append(comparison.describe())
    assert not mismatches, "\n".join(mismatches)


def run_matrix_case(
    dsn: str, tmp_path: Path, spark_session: object, source_options: dict[str, Any]
) -> ModelSink:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(PROTOCOL_SCHEMA)
    config = make_config(dsn, tmp_path / "lake", list(PROTOCOL_TABLES), source=source_options)
    options = prepare_configured_source(config).options
    assert options.proto_version == source_options["protocol_version"]
    run_protocol_workload(dsn, two_phase=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        endpos = current_wal_lsn(conn)
    model = ModelSink()
    delta = DeltaSink(spark_session, sink_settings(config))  # type: ignore[arg-type]
    service = Supervisor(config, TeeSink(delta, model), endpos=endpos)
    service.run()
    received = {
        sample.labels["message_type"]: sample.value
        for metric in service.metrics.messages_received.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }
    if source_options["streaming"] != "off":
        # The large transactions really were streamed, and subtransactions aborted.
        assert received.get("STREAM START", 0) > 0
        assert received.get("STREAM COMMIT", 0) > 0
        assert received.get("STREAM ABORT", 0) > 0
    if source_options.get("two_phase"):
        assert received.get("COMMIT PREPARED", 0) >= 2
        assert received.get("ROLLBACK PREPARED", 0) >= 2
        assert received.get("STREAM PREPARE", 0) >= 1
    assert received.get("TRUNCATE", 0) >= 1
    assert model.toast_anomalies == 0
    assert_model_equals_source(dsn, model)
    assert_delta_equals_source(dsn, tmp_path / "lake")
    if source_options.get("messages"):
        contents = sorted(m.content for m in model.messages)
        assert contents == [b"transactional"], "only the committed transactional message"
    return model


@pytest.mark.parametrize("source_options", PG18_CASES)
def test_postgresql_18_protocol_output_equals_source(
    pg18_dsn: str, tmp_path: Path, spark_session: object, source_options: dict[str, Any]
) -> None:
    run_matrix_case(pg18_dsn, tmp_path, spark_session, source_options)


@pytest.mark.pg15
@pytest.mark.parametrize("source_options", PG15_CASES)
def test_postgresql_15_protocol_output_equals_source(
    pg15_dsn: str, tmp_path: Path, spark_session: object, source_options: dict[str, Any]
) -> None:
    run_matrix_case(pg15_dsn, tmp_path, spark_session, source_options)


@pytest.mark.parametrize(("server", "source_options"), OTHER_CASES)
def test_postgresql_14_16_and_17_highest_protocol_output_equals_source(
    server: str,
    source_options: dict[str, Any],
    request: pytest.FixtureRequest,
    tmp_path: Path,
    spark_session: object,
) -> None:
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    run_matrix_case(dsn, tmp_path, spark_session, source_options)
