"""Tables copied while the stream runs (``sink/copies/copies.py``, ``capture/tablecopy.py``), end
to end on PostgreSQL 18 (a new table on 14 too) with the real supervisor, read back with
delta-rs.

* A table with 100k rows added to the publication while a workload runs on it and on
  another table: it is noticed and copied without a restart of the daemon, ends equal to
  the source, and the other table's changes keep reaching Delta during the copy. New
  keys inserted after the copy are appended, a stored key deleted and inserted again is
  merged.
* ``wal2delta resync`` of a damaged Delta table: the running daemon copies it again and it
  ends equal; the table goes from its old content to the copy in one commit.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from deltalake import DeltaTable

from capture.slots import current_wal_lsn
from config import AppConfig
from daemon.resync import request_resync, wait_for_copies
from daemon.status import collect_status
from daemon.supervisor import Supervisor
from daemon.wiring import sink_settings
from sink import DeltaSink, table_path
from tests.support.configs import make_config
from tests.support.harness import confirmed_flush, wait_until
from tests.support.oracle import compare_table

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

SCHEMA = """
CREATE TABLE public.steady (id int PRIMARY KEY, value int NOT NULL);
CREATE TABLE public.joiner (id int PRIMARY KEY, body text, value int);
INSERT INTO public.joiner SELECT g, repeat('x', 20) || g, g FROM generate_series(1, 100000) g;
CREATE PUBLICATION w2d_online FOR TABLE public.steady;
"""


class Daemon:
    """The supervisor running on a thread, as ``wal2delta run`` runs it."""

    def __init__(self, config: AppConfig, spark_session: Any) -> None:
        self.sink = DeltaSink(spark_session, sink_settings(config))
        self.supervisor = Supervisor(config, self.sink)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.supervisor.run()
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> Daemon:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.supervisor.stop_event.set()
        self.thread.join(60)
        self.sink.close()
        assert not self.thread.is_alive()

    def check(self) -> None:
        assert self.error is None, f"the daemon stopped: {self.error!r}"


def _config(dsn: str, tmp_path: Path, **snapshot: Any) -> AppConfig:
    return make_config(
        dsn,
        tmp_path / "lake",
        [],
        slot="w2d_online",
        source={"create_publication": False, "publication": "w2d_online"},
        snapshot={"mode": "initial", "new_tables_interval": "1s", **snapshot},
    )


def _delta_ids(lake: Path, table: str) -> set[int]:
    path = table_path(str(lake), "public", table)
    if not DeltaTable.is_deltatable(path):
        return set()
    return {int(i) for i in DeltaTable(path).to_pyarrow_table(columns=["id"])["id"].to_pylist()}


def _wait_for_delta(dsn: str, lake: Path, slot: str, daemon: Daemon, timeout: float) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        end = current_wal_lsn(conn)

    def caught_up() -> bool:
        daemon.check()
        return not daemon.sink.parts.copies.tables_copying() and confirmed_flush(dsn, slot) >= end

    wait_until(caught_up, timeout, "the daemon to copy and apply everything")


@pytest.mark.parametrize("server", ["pg18", "pg14"])
def test_a_table_added_to_the_publication_is_copied_while_streaming(
    server: str, request: pytest.FixtureRequest, tmp_path: Path, spark_session: Any
) -> None:
    # PostgreSQL 14 creates the copy's temporary slot with the old CREATE_REPLICATION_SLOT
    # syntax (``EXPORT_SNAPSHOT``); 15 and newer as 18 does.
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute("INSERT INTO steady SELECT g, g FROM generate_series(1, 100) g")
    config = _config(dsn, tmp_path)
    lake = tmp_path / "lake"
    stop = threading.Event()
    errors: list[BaseException] = []

    def workload() -> None:
        n = 100
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                while not stop.is_set():
                    n += 1
                    with conn.transaction():
                        conn.execute("INSERT INTO steady VALUES (%s, %s)", (n, n))
                        conn.execute(
                            "UPDATE steady SET value = value + 1 WHERE id = %s", (n % 50 + 1,)
                        )
                        conn.execute(
                            "UPDATE joiner SET value = value + 1 WHERE id = %s",
                            (n * 7 % 100000 + 1,),
                        )
                        conn.execute("DELETE FROM joiner WHERE id = %s", (n * 13 % 100000 + 1,))
                        conn.execute(
                            "INSERT INTO joiner VALUES (%s, 'new', 0) ON CONFLICT (id) DO NOTHING",
                            (100000 + n,),
                        )
                    time.sleep(0.01)
        except BaseException as exc:
            errors.append(exc)

    with Daemon(config, spark_session) as daemon:
        wait_until(lambda: bool(_delta_ids(lake, "steady")), 60, "steady to reach Delta")
        writer = threading.Thread(target=workload, daemon=True)
        writer.start()
        time.sleep(1.0)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER PUBLICATION w2d_online ADD TABLE public.joiner")
        wait_until(
            lambda: (
                bool(daemon.sink.parts.copies.tables_copying()) or bool(_delta_ids(lake, "joiner"))
            ),
            60,
            "the new table to be noticed",
        )
        # The other table keeps streaming while joiner is copied.
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO steady VALUES (-1, -1)")
        started = time.monotonic()
        wait_until(lambda: -1 in _delta_ids(lake, "steady"), 30, "steady's change during the copy")
        steady_lag = time.monotonic() - started
        time.sleep(2.0)
        stop.set()
        writer.join(30)
        assert not errors, errors
        _wait_for_delta(dsn, lake, "w2d_online", daemon, timeout=240)
        copied = DeltaTable(table_path(str(lake), "public", "joiner")).version()
        # After the copy: new keys only (appended, sink/steps/step_append.py), then a stored key
        # deleted and inserted again (merged).
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO joiner SELECT g, 'appended', g FROM generate_series(300001, 300500) g"
            )
        _wait_for_delta(dsn, lake, "w2d_online", daemon, timeout=60)
        with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
            conn.execute("DELETE FROM joiner WHERE id = 300001")
            conn.execute("INSERT INTO joiner VALUES (300001, 'again', -1)")
        _wait_for_delta(dsn, lake, "w2d_online", daemon, timeout=60)
        daemon.check()
    after_copy = [
        c
        for c in DeltaTable(table_path(str(lake), "public", "joiner")).history()
        if c["version"] > copied
    ]
    modes = [c.get("operationParameters", {}).get("mode") for c in after_copy]
    assert "Append" in modes, after_copy
    assert any(c["operation"] == "MERGE" for c in after_copy), after_copy
    assert steady_lag < 15, f"steady's change took {steady_lag:.1f} s to reach Delta"
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("public.steady", "public.joiner"):
            name = table.split(".")[1]
            comparison = compare_table(conn, table, table_path(str(lake), "public", name))
            assert comparison.matches, comparison.describe()
    copies = DeltaTable(str(lake / "_wal2delta_copies")).to_pyarrow_table().to_pylist()
    assert [(c["table_name"], c["state"], c["reason"]) for c in copies] == [
        ("public.joiner", "done", "new table")
    ], "joiner was copied online as a new table"
    assert copies[0]["consistent_point"] > 0


def test_resync_copies_a_damaged_table_again_while_streaming(
    pg18_dsn: str, tmp_path: Path, spark_session: Any
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute("ALTER PUBLICATION w2d_online ADD TABLE public.joiner")
        conn.execute("INSERT INTO steady SELECT g, g FROM generate_series(1, 100) g")
    config = _config(pg18_dsn, tmp_path)
    lake = tmp_path / "lake"
    joiner = table_path(str(lake), "public", "joiner")
    with Daemon(config, spark_session) as daemon:
        wait_until(lambda: len(_delta_ids(lake, "joiner")) == 100000, 120, "the initial copy")
        DeltaTable(joiner).delete("id <= 5000")  # damaged by hand
        before = DeltaTable(joiner).version()
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            conn.execute("UPDATE joiner SET value = -value WHERE id % 1000 = 0")
        request = request_resync(config, ["public.joiner"])
        assert not wait_for_copies(config, request, timeout=180), "the copy is done"
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            conn.execute("UPDATE joiner SET value = 7 WHERE id = 3")
        _wait_for_delta(pg18_dsn, lake, "w2d_online", daemon, timeout=120)
        daemon.check()
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        comparison = compare_table(conn, "public.joiner", joiner)
        assert comparison.matches, comparison.describe()
    listed = [(c.table, c.state, c.reason) for c in collect_status(config).copies]
    assert listed == [("public.joiner", "done", "resync")], "wal2delta status lists the copy"
    # Readers saw the table whole at every version after the damage: the copy replaced it
    # in one commit, and no version after it holds fewer rows than the source had then.
    table = DeltaTable(joiner)
    for version in range(before + 1, table.version() + 1):
        table.load_as_version(version)
        rows = table.to_pyarrow_table(columns=["id"]).num_rows
        assert rows >= 95000, f"version {version} holds {rows} rows: emptied or half copied"
