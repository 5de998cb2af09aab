"""Initial snapshot: existing rows copied in the slot's exported snapshot, then streaming.

Across the seam no change may be missed or applied twice: a row copied by the snapshot
never arrives again as a streamed insert, and every change committed after the
consistent point does (on every version, 14 to 18). An interrupted snapshot restarts
cleanly.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from capture.errors import SlotNotFoundError
from capture.slots import current_wal_lsn, slot_state
from daemon.supervisor import Supervisor
from sink import Batch, BatchResult
from tests.support.configs import make_config
from tests.support.harness import wait_for_flush
from tests.support.model_sink import ModelSink
from tests.support.oracle import canonical, read_source
from tests.support.sinks import InjectedFaultError

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCHEMA = """
CREATE TABLE public.accounts (id int PRIMARY KEY, region text NOT NULL, balance numeric(10, 2),
                              secret text);
INSERT INTO public.accounts
SELECT g, CASE WHEN g % 3 = 0 THEN 'us' ELSE 'eu' END, g * 1.5, 'hidden ' || g
FROM generate_series(1, 20000) g;
"""


def _config(dsn: str, tmp_path: Path, table: Any = "public.accounts", **overrides: Any):  # type: ignore[no-untyped-def]
    return make_config(
        dsn,
        tmp_path / "lake",
        [table],
        snapshot={"mode": "initial"},
        sink={"batch": {"max_rows": 1000}},
        **overrides,
    )


def _source(
    dsn: str, columns: list[str] | None = None, where: str = "true"
) -> dict[str, list[object]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        _, rows = read_source(conn, "public", "accounts", columns)
        keep = {
            r[0] for r in conn.execute(f"SELECT id FROM public.accounts WHERE {where}").fetchall()
        }
    return {repr(r[0]): [canonical(v) for v in r] for r in rows if r[0] in keep}


def _model(model: ModelSink, columns: list[str]) -> dict[str, list[object]]:
    return {
        repr(row["id"]): [canonical(row[c]) for c in columns]
        for row in model.tables.get("public.accounts", {}).values()
    }


def _writer(dsn: str, stop: threading.Event) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        n = 0
        while not stop.is_set() and n < 400:
            n += 1
            conn.execute(
                "UPDATE accounts SET balance = balance + 1 WHERE id = %s", (n * 37 % 20000 + 1,)
            )
            conn.execute("INSERT INTO accounts VALUES (%s, 'eu', 1, 'new')", (100000 + n,))
            conn.execute("DELETE FROM accounts WHERE id = %s", (n * 53 % 20000 + 1,))


@pytest.mark.parametrize("server", ["pg18", "pg17", "pg16", "pg15", "pg14"])
def test_snapshot_and_stream_meet_without_gaps_or_duplicates(
    server: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # PostgreSQL 14 exports the snapshot with the old CREATE_REPLICATION_SLOT syntax.
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    config = _config(dsn, tmp_path)
    model = ModelSink()
    stop = threading.Event()
    service = Supervisor(config, model, stop_event=stop)
    runner = threading.Thread(target=service.run)
    writer_stop = threading.Event()
    writer = threading.Thread(target=_writer, args=(dsn, writer_stop))
    runner.start()
    writer.start()  # changes race with the snapshot being taken and copied
    writer.join(120)
    with psycopg.connect(dsn, autocommit=True) as conn:
        endpos = current_wal_lsn(conn)
    try:
        wait_for_flush(dsn, config.source.slot, endpos)
    finally:
        stop.set()
        runner.join(60)
    marker = model.markers[config.source.slot]
    assert marker.status == "complete"
    assert marker.consistent_point > 0
    columns = ["id", "region", "balance", "secret"]
    assert _model(model, columns) == _source(dsn)
    copied = {key for lsn, _, op, key in model.events if lsn == marker.consistent_point}
    streamed_inserts = [
        key for lsn, _, op, key in model.events if lsn > marker.consistent_point and op == "insert"
    ]
    assert len(copied) >= 19000
    assert not copied.intersection(streamed_inserts), "a copied row was inserted again"
    assert all(lsn >= marker.consistent_point for lsn, *_ in model.events)
    assert service.metrics.snapshot_rows.labels(table="public.accounts")._value.get() == len(copied)


class _FailingAfter(ModelSink):
    """A model sink that fails once, after ``fail_after`` batches."""

    def __init__(self, fail_after: int) -> None:
        super().__init__()
        self.fail_after = fail_after

    def apply(self, batch: Batch) -> BatchResult:
        if self.fail_after == 0:
            self.fail_after = -1
            raise InjectedFaultError("crash in the middle of the snapshot")
        self.fail_after -= 1
        return super().apply(batch)


def test_interrupted_snapshot_restarts_cleanly(pg18_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    config = _config(pg18_dsn, tmp_path)
    model = _FailingAfter(fail_after=5)
    with pytest.raises(InjectedFaultError):
        Supervisor(config, model).run()
    assert model.markers[config.source.slot].status == "in_progress"
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM accounts WHERE id <= 100")  # changes while the daemon is down
        conn.execute("UPDATE accounts SET region = 'us' WHERE id BETWEEN 101 AND 200")
        endpos = current_wal_lsn(conn)
    Supervisor(config, model, endpos=endpos).run()
    assert model.markers[config.source.slot].status == "complete"
    columns = ["id", "region", "balance", "secret"]
    assert _model(model, columns) == _source(pg18_dsn)


def test_snapshot_honours_the_publication_row_filter_and_column_list(
    pg18_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    table = {
        "name": "public.accounts",
        "where": "region = 'eu'",
        "columns": ["id", "region", "balance"],
    }
    config = _config(pg18_dsn, tmp_path, table)
    model = ModelSink()
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        endpos = current_wal_lsn(conn)
    Supervisor(config, model, endpos=endpos).run()
    rows = list(model.tables["public.accounts"].values())
    assert rows
    assert all(set(row) == {"id", "region", "balance"} for row in rows)
    assert _model(model, ["id", "region", "balance"]) == _source(
        pg18_dsn, ["id", "region", "balance"], "region = 'eu'"
    )


def test_a_dropped_slot_is_never_recreated_silently(pg18_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.accounts (id int PRIMARY KEY)")
    config = make_config(pg18_dsn, tmp_path / "lake", ["public.accounts"])
    model = ModelSink()
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        endpos = current_wal_lsn(conn)
    Supervisor(config, model, endpos=endpos).run()
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (config.source.slot,))
        conn.execute("INSERT INTO accounts VALUES (1)")
    with pytest.raises(SlotNotFoundError, match="was dropped"):
        Supervisor(config, model).run()
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        assert slot_state(conn, config.source.slot) is None
