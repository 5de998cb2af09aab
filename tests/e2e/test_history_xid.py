"""The change history names each change's transaction: ``_wal2delta_xid`` is PostgreSQL's xid.

Three transactions against PostgreSQL 18 (inserts and an update; a delete; a truncate with
an insert after it), each noting its own ``pg_current_xact_id()``; after one daemon run the
history holds every change once with the xid of the transaction that made it, in (LSN,
ordinal) order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from deltalake import DeltaTable

from capture.slots import current_wal_lsn
from sink.values.naming import history_path
from tests.support.configs import make_config
from tests.support.harness import run_daemon

pytestmark = [pytest.mark.e2e]


def test_every_history_row_carries_its_transactions_xid(
    pg18_dsn: str, spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    config = make_config(pg18_dsn, lake, ["public.ledger"], slot="w2d_xid", sink={"history": True})
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.ledger (id int PRIMARY KEY, v text)")
        run_daemon(pg18_dsn, config, spark_session, current_wal_lsn(conn))  # slot, no rows
        transactions = [
            (
                [
                    "INSERT INTO ledger VALUES (1, 'a'), (2, 'b')",
                    "UPDATE ledger SET v = 'c' WHERE id = 1",
                ],
                ["insert", "insert", "update"],
            ),
            (["DELETE FROM ledger WHERE id = 2"], ["delete"]),
            (["TRUNCATE ledger", "INSERT INTO ledger VALUES (3, 'd')"], ["truncate", "insert"]),
        ]
        expected: list[tuple[str, int]] = []
        for statements, ops in transactions:
            with conn.transaction():
                for statement in statements:
                    conn.execute(statement.encode())
                row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
            assert row is not None
            xid = int(row[0]) & 0xFFFFFFFF  # the 32-bit xid pgoutput sends
            expected += [(op, xid) for op in ops]
        run_daemon(pg18_dsn, config, spark_session, current_wal_lsn(conn))
    history = DeltaTable(history_path(str(lake), "public", "ledger")).to_pyarrow_table()
    rows = sorted(history.to_pylist(), key=lambda r: (r["_wal2delta_lsn"], r["_wal2delta_ordinal"]))
    assert [(r["_wal2delta_op"], r["_wal2delta_xid"]) for r in rows] == expected
