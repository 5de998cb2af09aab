"""A table written with deletion vectors (``sink.deletion_vectors``), fed from PostgreSQL 18
by the daemon, equals its source; ``verify``, ``cut`` and ``status`` work on it.

Small batches of updates and deletes at random keys (with TOASTed values kept through
updates that do not touch them) leave deletion vectors, compaction and purges run between
batches, and retention is on. The table listed gets the feature, the other one not, and
both equal their source tables read through delta-rs (the oracle); the product's verify
(through the engine) finds them equal, every table of the newest cut reads at its version,
and ``status`` reports the versions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from capture.catalog import PostgresCatalog
from daemon.cut import take_cut
from daemon.status import collect_status
from daemon.supervisor import Supervisor
from daemon.verify import verify_source
from daemon.wiring import prepare_configured_source, sink_settings
from decoder import Lsn
from sink import DeltaSink
from sink.lake.deltalog import read_table_files
from tests.support.configs import make_config
from tests.support.harness import run_statements, table_mismatches

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TABLES = ["public.accounts", "public.tags"]
BIG = "(SELECT string_agg(md5(g::text || i), '') FROM generate_series(1, 200) s(i))"
DDL = [
    "CREATE TABLE accounts (id bigint PRIMARY KEY, owner text, big text, n int)",
    "CREATE TABLE tags (id int PRIMARY KEY, tag text)",
]
WORKLOAD = [
    f"INSERT INTO accounts SELECT g, 'o' || g, {BIG}, 0 FROM generate_series(1, 3000) g",
    "INSERT INTO tags SELECT g, 't' || g FROM generate_series(1, 50) g",
    *(
        f"UPDATE accounts SET n = n + 1 WHERE id IN (SELECT id FROM accounts"
        f" ORDER BY md5(id::text || {round_}) LIMIT 150)"
        for round_ in range(12)
    ),
    *(
        f"DELETE FROM accounts WHERE id IN (SELECT id FROM accounts"
        f" ORDER BY md5(id::text || 'd{round_}') LIMIT 40)"
        for round_ in range(6)
    ),
    f"INSERT INTO accounts SELECT g, 'late', {BIG}, 0 FROM generate_series(3001, 3200) g",
    "UPDATE tags SET tag = 'changed' WHERE id % 3 = 0",
]


def test_a_deletion_vector_table_equals_its_source_and_verify_cut_status_read_it(
    pg18_dsn: str, tmp_path: Path, spark_session: Any
) -> None:
    lake = tmp_path / "lake"
    run_statements(pg18_dsn, DDL)
    config = make_config(
        pg18_dsn,
        lake,
        TABLES,
        sink={
            "batch": {"max_rows": 300, "max_rows_ceiling": 300, "max_age": "200ms"},
            "deletion_vectors": ["public.accounts"],
            "compact_after_writes": 3,
            "retention": "1h",
        },
    )
    prepare_configured_source(config)
    endpos = run_statements(pg18_dsn, WORKLOAD)
    with PostgresCatalog(pg18_dsn) as catalog:
        sink = DeltaSink(spark_session, sink_settings(config), catalog=catalog)
        Supervisor(config, sink, endpos=Lsn(endpos)).run()
        sink.close()  # the last batch's commit-log record, as the daemon writes it on exit

    accounts = str(lake / "public" / "accounts")
    tags = str(lake / "public" / "tags")
    assert "deletionVectors" in (DeltaTable(accounts).protocol().reader_features or [])
    assert "deletionVectors" not in (DeltaTable(tags).protocol().reader_features or [])
    operations = {c["operation"] for c in DeltaTable(accounts).history()}
    assert "MERGE" in operations
    assert operations & {"OPTIMIZE", "WRITE"}, "compacted or purged between batches"
    assert table_mismatches(pg18_dsn, lake, TABLES) == []

    report = verify_source(config, spark=spark_session, wait=5)
    assert report.exit_code == 0, report
    assert {t.table: t.status for t in report.tables} == {
        "public.accounts": "match",
        "public.tags": "match",
    }

    cut = take_cut(config)
    named = {t.table: t for t in cut.tables}
    assert set(named) == set(TABLES)
    with psycopg.connect(pg18_dsn) as conn:
        counts = {
            name: conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]  # type: ignore[index]
            for name in TABLES
        }
    for name, table in named.items():
        rows = pa.table(DeltaTable(table.path, version=table.version).scan().read_all())
        assert rows.num_rows == counts[name], name

    status = collect_status(config)
    versions = {t.table: t.delta_version for t in status.tables}
    assert versions == {
        "public.accounts": DeltaTable(accounts).version(),
        "public.tags": DeltaTable(tags).version(),
    }
    # Nothing older than the retention yet: every file the log names is still stored.
    assert read_table_files(accounts).tombstones
