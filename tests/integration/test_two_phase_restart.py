"""A prepared transaction survives a daemon restart between PREPARE and COMMIT PREPARED.

The flush position is held before an unresolved PREPARE, so after the restart the
server decodes the prepared transaction again and sends it with its COMMIT PREPARED.
On every server with two-phase decoding (PostgreSQL 15 to 18; 14 refuses ``two_phase:
true`` at start-up, tests/integration/test_version_refusals.py).
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from capture.slots import current_wal_lsn, slot_state
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source
from decoder import RowChange
from tests.support.configs import make_config
from tests.support.model_sink import ModelSink

pytestmark = pytest.mark.integration


def _run(dsn: str, tmp_path: Path, config_streaming: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.ledger (id int PRIMARY KEY, amount numeric(8, 2))")
    config = make_config(
        dsn,
        tmp_path / "lake",
        ["public.ledger"],
        source={"two_phase": True, "streaming": config_streaming},
    )
    prepare_configured_source(config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO ledger VALUES (1, 1.00)")
        conn.execute("BEGIN")
        conn.execute("INSERT INTO ledger SELECT g, g FROM generate_series(2, 3000) g")
        conn.execute("PREPARE TRANSACTION 'w2d_restart'")
        prepared_at = current_wal_lsn(conn)

    first = ModelSink()
    Supervisor(config, first, endpos=prepared_at).run()
    assert len(first.tables["public.ledger"]) == 1, "the prepared rows are held, not applied"
    with psycopg.connect(dsn, autocommit=True) as conn:
        state = slot_state(conn, config.source.slot)
        assert state is not None
        assert state.confirmed_flush_lsn is not None
        assert state.confirmed_flush_lsn < prepared_at, "flush must not pass the PREPARE"
        conn.execute("COMMIT PREPARED 'w2d_restart'")
        endpos = current_wal_lsn(conn)

    second = ModelSink()
    Supervisor(config, second, endpos=endpos).run()
    rows = second.tables["public.ledger"]
    assert len(rows) == 2999, "every prepared row arrives after the restart"
    with psycopg.connect(dsn, autocommit=True) as conn:
        state = slot_state(conn, config.source.slot)
    assert state is not None
    assert state.confirmed_flush_lsn is not None
    assert state.confirmed_flush_lsn >= endpos


@pytest.mark.parametrize(
    ("server", "streaming"),
    [("pg18", "parallel"), ("pg17", "parallel"), ("pg16", "parallel"), ("pg15", "on")],
)
def test_prepared_transaction_is_sent_again_after_restart(
    server: str, streaming: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    _run(request.getfixturevalue(f"{server}_dsn"), tmp_path, streaming)


def test_row_changes_of_prepared_transactions_carry_the_commit_prepared_lsn(
    pg18_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.ledger (id int PRIMARY KEY, amount numeric(8, 2))")
    config = make_config(pg18_dsn, tmp_path / "lake", ["public.ledger"], source={"two_phase": True})
    prepare_configured_source(config)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO ledger VALUES (7, 7.00)")
        conn.execute("PREPARE TRANSACTION 'w2d_lsn'")
        conn.execute("COMMIT PREPARED 'w2d_lsn'")
        endpos = current_wal_lsn(conn)
    captured: list[RowChange] = []

    class Recording(ModelSink):
        def apply(self, batch):  # type: ignore[no-untyped-def]
            captured.extend(c for c in batch.changes if isinstance(c, RowChange))
            return super().apply(batch)

    Supervisor(config, Recording(), endpos=endpos).run()
    assert len(captured) == 1
    assert 0 < captured[0].commit_lsn < endpos
