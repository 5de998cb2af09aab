"""Change histories of a keyed, a keyless FULL and a NOTHING table hold every change once,
across SIGKILLs of the daemon.

Three tables in one publication, ``sink.history: true``: ``hist.accounts`` (primary key),
``hist.events`` (no key, REPLICA IDENTITY FULL, a column literally named ``kind``: its old
value lands in ``_wal2delta_old__kind`` beside the history's own ``_wal2delta_old_kind``,
issue 29) and ``hist.readings`` (REPLICA IDENTITY NOTHING: inserts only). A seeded random
workload on one connection - inserts, updates, key changes, deletes, truncates, identical
rows inserted, updated and deleted one at a time and all at once, rolled-back transactions
and savepoints, transactions large enough for the server to stream - runs while the real
daemon (``wal2delta run``) is killed with SIGKILL, each time while a history holds changes
the slot has not acknowledged (so the restart sends them again), and started again; a last
run goes to ``--endpos``.

An unpublished audit table, filled by triggers in the workload's own transactions, records
every committed change in commit order (its transaction's xid, operation, new and old row).
Each history, read with delta-rs in (LSN, ordinal) order, must be exactly its table's audit:
every change once, identical rows as often as they happened, with the old key (accounts) or
old row (events) pgoutput sends; and every merged table must equal its source.

Replay a failure with ``WAL2DELTA_HISTORY_SEED=<seed> pytest tests/e2e/test_history_identities.py``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml
from deltalake import DeltaTable

from capture.slots import current_wal_lsn
from decoder import format_lsn
from sink import history_path, table_path
from tests.support.harness import confirmed_flush, start_daemon
from tests.support.oracle import compare_table, read_delta_table

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SLOT = "w2d_hist"
KILLS = 3
# Each table's columns in order, and the columns pgoutput sends as its old tuple: the key
# (REPLICA IDENTITY DEFAULT: deletes and key-changing updates), the whole row (FULL: every
# update and delete), or nothing (NOTHING).
TABLES: dict[str, tuple[tuple[str, ...], str | None]] = {
    "accounts": (("id", "owner", "balance"), "key"),
    "events": (("kind", "v"), "row"),
    "readings": (("sensor", "value"), None),
}
SCHEMA = """
CREATE SCHEMA hist;
CREATE TABLE hist.accounts (id int PRIMARY KEY, owner text NOT NULL, balance int);
CREATE TABLE hist.events (kind text, v int);
ALTER TABLE hist.events REPLICA IDENTITY FULL;
CREATE TABLE hist.readings (sensor text, value int);
ALTER TABLE hist.readings REPLICA IDENTITY NOTHING;
-- Every committed change of the three tables, in commit order (not published).
CREATE TABLE hist.audit (
    seq bigserial PRIMARY KEY, tab text, op text, xid bigint, new jsonb, old jsonb
);
CREATE FUNCTION hist.audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO hist.audit (tab, op, xid, new, old) VALUES (
        TG_TABLE_NAME, lower(TG_OP),
        pg_current_xact_id()::text::bigint % 4294967296,  -- the 32-bit xid pgoutput sends
        to_jsonb(NEW), to_jsonb(OLD)
    );
    RETURN NULL;
END $$;
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON hist.accounts
    FOR EACH ROW EXECUTE FUNCTION hist.audit();
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON hist.events
    FOR EACH ROW EXECUTE FUNCTION hist.audit();
CREATE TRIGGER audit AFTER INSERT ON hist.readings
    FOR EACH ROW EXECUTE FUNCTION hist.audit();
CREATE TRIGGER audit_truncate AFTER TRUNCATE ON hist.accounts
    FOR EACH STATEMENT EXECUTE FUNCTION hist.audit();
CREATE TRIGGER audit_truncate AFTER TRUNCATE ON hist.events
    FOR EACH STATEMENT EXECUTE FUNCTION hist.audit();
CREATE PUBLICATION w2d_hist FOR TABLE hist.accounts, hist.events, hist.readings;
"""

Conn = psycopg.Connection[tuple[Any, ...]]
Change = tuple[int, str, tuple[object, ...] | None, tuple[object, ...] | None, str | None]
"""(xid, operation, new row, old key or row, old kind) of one change."""


class Workload:
    """Seeded random transactions over the three tables, on one connection."""

    KINDS = ("click", "view", None)  # NULLs must match NULLs in the old row

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.next_id = 0
        self.transactions = 0

    def step(self, conn: Conn) -> None:
        rng = self.rng
        kind = rng.choices(
            ["accounts", "events", "readings", "mixed", "savepoint", "large", "truncate"],
            weights=[25, 30, 15, 15, 8, 3, 2],
        )[0]
        conn.execute("BEGIN")
        if kind == "accounts":
            for _ in range(rng.randint(1, 8)):
                self._account(conn)
        elif kind == "events":
            for _ in range(rng.randint(1, 6)):
                self._event(conn)
        elif kind == "readings":
            self._readings(conn)
        elif kind == "mixed":
            for _ in range(rng.randint(2, 10)):
                rng.choice([self._account, self._event, self._readings])(conn)
        elif kind == "savepoint":
            self._event(conn)
            conn.execute("SAVEPOINT a")
            for _ in range(rng.randint(1, 6)):
                rng.choice([self._account, self._event, self._readings])(conn)
            conn.execute("ROLLBACK TO SAVEPOINT a" if rng.random() < 0.5 else "RELEASE SAVEPOINT a")
            self._account(conn)
        elif kind == "large":
            # Past logical_decoding_work_mem (64kB): the server streams it before the commit.
            conn.execute(
                "INSERT INTO hist.events SELECT 'bulk', g % 3 FROM generate_series(1, 1500) g"
            )
            conn.execute("UPDATE hist.events SET v = v + 10 WHERE kind = 'bulk' AND v = 0")
            conn.execute("DELETE FROM hist.events WHERE kind = 'bulk' AND v = 1")
            conn.execute("INSERT INTO hist.readings SELECT 'bulk', 1 FROM generate_series(1, 500)")
        else:
            table = rng.choice(["accounts", "events"])
            conn.execute(f"TRUNCATE hist.{table}".encode())
            self._account(conn)
            self._event(conn)
        # Rolled back, none of it may reach a history (the audit rows roll back too).
        conn.execute("COMMIT" if rng.random() > 0.1 else "ROLLBACK")
        self.transactions += 1

    def _account(self, conn: Conn) -> None:
        rng = self.rng
        roll = rng.random()
        existing = rng.randrange(1, max(self.next_id, 1) + 1)
        if roll < 0.35 or self.next_id == 0:
            self.next_id += 1
            balance = None if rng.random() < 0.1 else rng.randrange(1000)
            conn.execute(
                "INSERT INTO hist.accounts VALUES (%s, %s, %s)",
                (self.next_id, f"o{self.next_id}", balance),
            )
        elif roll < 0.6:
            conn.execute(
                "UPDATE hist.accounts SET balance = coalesce(balance, 0) + 1, owner = owner || '+' "
                "WHERE id = %s",
                (existing,),
            )
        elif roll < 0.75:
            # A key change: pgoutput sends the old key.
            self.next_id += 1
            conn.execute("UPDATE hist.accounts SET id = %s WHERE id = %s", (self.next_id, existing))
        elif roll < 0.85:
            conn.execute("DELETE FROM hist.accounts WHERE id = %s", (existing,))
        else:
            self.next_id += 1
            conn.execute(
                "INSERT INTO hist.accounts VALUES (%s, 'upsert', 1) ON CONFLICT (id) DO UPDATE "
                "SET balance = EXCLUDED.balance",
                (rng.choice([existing, self.next_id]),),
            )

    def _event(self, conn: Conn) -> None:
        """Changes of the table without a key, where identical rows are the rule."""
        rng = self.rng
        kind, v = rng.choice(self.KINDS), rng.choice([1, 2, None])
        same = "kind IS NOT DISTINCT FROM %s AND v IS NOT DISTINCT FROM %s"
        roll = rng.random()
        if roll < 0.4:
            conn.execute(
                "INSERT INTO hist.events SELECT %s, %s FROM generate_series(1, %s)",
                (kind, v, rng.randint(1, 4)),
            )
        elif roll < 0.55:  # one of several identical rows
            conn.execute(
                "UPDATE hist.events SET v = coalesce(v, 0) + 1 WHERE ctid = "
                f"(SELECT min(ctid) FROM hist.events WHERE {same})".encode(),
                (kind, v),
            )
        elif roll < 0.65:  # every identical row
            conn.execute(
                f"UPDATE hist.events SET v = 2 WHERE {same}".encode(),
                (kind, v),
            )
        elif roll < 0.75:  # the kind column itself
            conn.execute(
                "UPDATE hist.events SET kind = %s WHERE ctid = "
                "(SELECT max(ctid) FROM hist.events WHERE kind IS NOT DISTINCT FROM %s)",
                (rng.choice(self.KINDS), kind),
            )
        elif roll < 0.9:  # one of several identical rows
            conn.execute(
                "DELETE FROM hist.events WHERE ctid = "
                f"(SELECT max(ctid) FROM hist.events WHERE {same})".encode(),
                (kind, v),
            )
        else:  # every identical row
            conn.execute(f"DELETE FROM hist.events WHERE {same}".encode(), (kind, v))

    def _readings(self, conn: Conn) -> None:
        """Inserts only (PostgreSQL refuses updates and deletes of a NOTHING table)."""
        rng = self.rng
        sensor = rng.choice(["s1", "s2", None])
        conn.execute(
            "INSERT INTO hist.readings SELECT %s, %s FROM generate_series(1, %s)",
            (sensor, rng.choice([7, None]), rng.randint(1, 3)),
        )


def audited(conn: Conn, table: str) -> list[Change]:
    """The committed changes of ``hist.<table>`` in commit order, as its history should
    hold them: the old key only where pgoutput sends one."""
    columns, identity = TABLES[table]
    out: list[Change] = []
    rows = conn.execute(
        "SELECT op, xid, new, old FROM hist.audit WHERE tab = %s ORDER BY seq", (table,)
    )
    for op, xid, new, old in rows:
        new_row = None if new is None else tuple(new[c] for c in columns)
        old_row: tuple[object, ...] | None = None
        if identity == "row" and op in ("update", "delete"):
            old_row = tuple(old[c] for c in columns)
        elif identity == "key" and (op == "delete" or (op == "update" and old["id"] != new["id"])):
            old_row = (old["id"], *(None for _ in columns[1:]))
        kind = None if old_row is None else identity
        out.append((int(xid), op, new_row, old_row, kind))
    return out


def delta_rows(path: str) -> list[dict[str, Any]]:
    """A Delta table's rows, read with delta-rs (deletion vectors applied)."""
    rows: list[dict[str, Any]] = read_delta_table(path).to_pylist()
    return rows


def recorded(lake: Path, table: str) -> list[Change]:
    """The history of ``hist.<table>`` in (LSN, ordinal) order (a change held twice shows as
    a difference from the audit)."""
    columns, _ = TABLES[table]
    rows = delta_rows(history_path(str(lake), "hist", table))
    rows.sort(key=lambda r: (r["_wal2delta_lsn"], r["_wal2delta_ordinal"]))
    # The old value of ``kind`` is beside the history's own ``_wal2delta_old_kind``.
    old_names = {
        c: "_wal2delta_old__kind" if c == "kind" else f"_wal2delta_old_{c}" for c in columns
    }
    out: list[Change] = []
    for row in rows:
        op = row["_wal2delta_op"]
        new_row = None if op in ("delete", "truncate") else tuple(row[c] for c in columns)
        kind = row["_wal2delta_old_kind"]
        old_row = None if kind is None else tuple(row.get(old_names[c]) for c in columns)
        out.append((row["_wal2delta_xid"], op, new_row, old_row, kind))
    return out


def first_difference(expected: list[Change], found: list[Change]) -> str:
    for index, (want, got) in enumerate(zip(expected, found, strict=False)):
        if want != got:
            return f"change {index}: audited {want}, history {got}"
    return f"audited {len(expected)} changes, history {len(found)}"


def unacknowledged(dsn: str, lake: Path) -> bool:
    """Whether some history holds a change of a transaction the slot has not acknowledged
    (its commit LSN at or past the confirmed flush position, which is a transaction's end).
    Read from the newest LSN of each data file's statistics, as delta-rs lists them."""
    flushed = confirmed_flush(dsn, SLOT)
    for table in TABLES:
        path = history_path(str(lake), "hist", table)
        if not DeltaTable.is_deltatable(path):
            continue
        files = pa.table(DeltaTable(path).get_add_actions(flatten=True))
        newest = pc.max(files["max._wal2delta_lsn"]).as_py() if files.num_rows else None
        if newest is not None and newest >= flushed:
            return True
    return False


def write_config(path: Path, dsn: str, lake: Path, spool: Path) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": dsn,
                    "slot": SLOT,
                    "publication": "w2d_hist",
                    "create_publication": False,
                    "tables": [f"hist.{t}" for t in TABLES],
                    "status_interval": "500ms",
                },
                "sink": {
                    "path": str(lake),
                    "batch": {"max_rows": 500, "max_age": "200ms"},
                    "history": True,
                    # Compactions every few writes, histories included.
                    "compact_after_writes": 5,
                },
                "spool": {"dir": str(spool), "memory_limit": "256KiB"},
                "metrics": {"enabled": False},
                "logging": {"format": "json", "level": "warning"},
            }
        )
    )


def run_to(config: Path, log: Path, endpos: str) -> None:
    """``wal2delta run --endpos``; again while the slot is still held by a killed run."""
    for _ in range(20):
        daemon = start_daemon(config, log, "--endpos", endpos)
        try:
            daemon.wait(600)
        except subprocess.TimeoutExpired:
            pytest.fail("the run to --endpos hung:\n" + log.read_text()[-3000:])
        finally:
            if daemon.poll() is None:
                daemon.kill()
        if daemon.returncode != 3:
            break
        time.sleep(0.5)
    assert daemon.returncode == 0, log.read_text()[-3000:]


@pytest.mark.timeout(900)
def test_histories_of_keyed_full_and_nothing_tables_hold_every_change_once_across_kills(
    pg18_dsn: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("WAL2DELTA_HISTORY_SEED", random.randrange(10**6)))
    print(f"history identities seed: {seed}")
    rng = random.Random(seed)
    lake = tmp_path / "lake"
    config = tmp_path / "source.yaml"
    log = tmp_path / "daemon.log"
    write_config(config, pg18_dsn, lake, tmp_path / "spool")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        # Create the slot before the workload: every change after it is streamed.
        run_to(config, log, format_lsn(current_wal_lsn(conn)))
        workload = Workload(rng)
        kills = 0
        while kills < KILLS:
            started_at = confirmed_flush(pg18_dsn, SLOT)
            daemon = start_daemon(config, log)
            deadline = time.monotonic() + rng.uniform(1.0, 4.0)
            give_up = deadline + 120
            try:
                # Work for a while, then on until this daemon acknowledged some of it and a
                # history holds a change the slot has not acknowledged: the kill falls after
                # an append that the restart receives again and must not repeat.
                while daemon.poll() is None and (
                    time.monotonic() < deadline
                    or confirmed_flush(pg18_dsn, SLOT) <= started_at
                    or not unacknowledged(pg18_dsn, lake)
                ):
                    assert time.monotonic() < give_up, "no history got ahead of the slot"
                    workload.step(conn)
                    time.sleep(0.01)
            except BaseException:
                daemon.kill()
                daemon.wait(30)
                raise
            exited = daemon.poll()
            if exited == 3:  # the killed daemon's walsender still holds the slot
                time.sleep(0.5)
                continue
            assert exited is None, (
                f"daemon exited with {exited} (seed {seed}):\n" + (log.read_text()[-3000:])
            )
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(30)
            kills += 1
            # More work while no daemon runs: the next one starts behind.
            for _ in range(rng.randint(0, 20)):
                workload.step(conn)
        run_to(config, log, format_lsn(current_wal_lsn(conn)))
        failures: list[str] = []
        for table in TABLES:
            comparison = compare_table(conn, f"hist.{table}", table_path(str(lake), "hist", table))
            if not comparison.matches:
                failures.append(comparison.describe())
            expected, found = audited(conn, table), recorded(lake, table)
            if found != expected:
                failures.append(f"history of hist.{table}: {first_difference(expected, found)}")
        counts = {t: len(audited(conn, t)) for t in TABLES}
    print(f"{workload.transactions} transactions, changes per table: {counts}")
    assert kills == KILLS
    assert all(counts.values()), counts
    assert not failures, f"seed {seed}:\n" + "\n".join(failures)
