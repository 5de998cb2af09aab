"""The crash harness (``tests/e2e/test_crash.py``; a remote engine in
``tests/e2e/test_engine_cluster.py``): SIGKILL the daemon at random moments; Delta must
still equal the source.

A seeded, randomised multi-table workload (inserts, updates, key changes, deletes, a table
of mostly new keys whose batches are appended rather than merged, truncates, savepoints,
large streamed transactions, prepared transactions, identical rows in a table without a
key, a table published with a row filter and a column list by a second publication, small
transactions spread over 46 more small tables) runs while the real daemon (``wal2delta
run`` in a subprocess) is killed with SIGKILL at random points - during the initial
snapshot, mid-MERGE, between a MERGE or an append and the batch's record and
acknowledgement, during a compaction - and started again, at least 20 times. The daemon
applies up to four tables of a batch at once (``sink.concurrency``) and holds back the
changes of a table that changes little (``sink.table_min_rows``) for up to two seconds, so
kills also fall while MERGEs run side by side and while changes wait, unacknowledged, for a
later batch. At the end every one of the 52 Delta tables, read with delta-rs, equals its
source table: nothing lost, nothing duplicated, no deleted row resurrected.

Replay a failure with ``WAL2DELTA_CRASH_SEED=<seed> pytest tests/e2e/test_crash.py`` (or
the test that failed).
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from deltalake import DeltaTable

from capture.slots import current_wal_lsn
from decoder import format_lsn
from devtools.pgserver import LocalPostgres
from sink import history_path, table_path
from sink.constants import SNAPSHOTS_TABLE
from sink.engine.sql import SNAPSHOT_COLUMNS
from tests.support.harness import start_daemon
from tests.support.oracle import compare_table

# Many small tables (issue 31): small transactions spread over them, a few changes per table
# and batch, so most of their changes are held back for a later batch (sink.table_min_rows).
SMALL_TABLES = tuple(f"crash.s{number:02d}" for number in range(46))
SMALL_KEYS = 40
"""The small tables' changes pick keys 1..SMALL_KEYS; a key change moves one above them."""
TABLES = (
    "crash.accounts",
    "crash.lines",
    "crash.notes",
    "crash.events",
    "crash.orders",
    *SMALL_TABLES,
)
SCHEMA = """
CREATE SCHEMA crash;
CREATE TABLE crash.accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12, 2));
CREATE TABLE crash.lines (order_id int, line_no int, qty int, PRIMARY KEY (order_id, line_no));
CREATE TABLE crash.notes (id int PRIMARY KEY, body text);
-- Mostly new keys: their batches are appended (sink/steps/step_append.py), not merged.
CREATE TABLE crash.orders (id bigint PRIMARY KEY, item text NOT NULL, qty int);
ALTER TABLE crash.notes ALTER COLUMN body SET STORAGE EXTERNAL;
-- Every committed change of crash.notes, in the order each row saw them (not published):
-- the change history (sink.history) must hold exactly these.
CREATE TABLE crash.notes_audit (seq bigserial PRIMARY KEY, op text, id int, body_md5 text);
CREATE FUNCTION crash.audit_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO crash.notes_audit (op, id) VALUES ('delete', OLD.id);
    ELSE
        INSERT INTO crash.notes_audit (op, id, body_md5)
            VALUES (lower(TG_OP), NEW.id, md5(NEW.body));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER notes_audit AFTER INSERT OR UPDATE OR DELETE ON crash.notes
    FOR EACH ROW EXECUTE FUNCTION crash.audit_note();
INSERT INTO crash.accounts SELECT g, 'owner ' || g, g FROM generate_series(1, 5000) g;
INSERT INTO crash.lines SELECT g / 10, g % 10, g FROM generate_series(1, 5000) g;
-- No key: identical rows must stay as many as in PostgreSQL (sink/planning/keyless.py).
CREATE TABLE crash.events (kind int, note text);
ALTER TABLE crash.events REPLICA IDENTITY FULL;
INSERT INTO crash.events SELECT g % 40, 'n' || (g % 3) FROM generate_series(1, 1200) g;
"""
SMALL_SCHEMA = "".join(
    f"CREATE TABLE {name} (id int PRIMARY KEY, v int NOT NULL, note text);\n"
    f"INSERT INTO {name} SELECT g, g, 'seed' FROM generate_series(1, 10) g;\n"
    for name in SMALL_TABLES
)
# A table only a second publication publishes, with a row filter and a column list: the
# daemon subscribes to both (``source.publication: [w2d_crash, w2d_crash_ledger]``).
LEDGER = ("crash.ledger_published", "crash.ledger")
LEDGER_SCHEMA = """
CREATE TABLE crash.ledger (id int PRIMARY KEY, amount int NOT NULL, memo text);
CREATE UNIQUE INDEX ledger_identity ON crash.ledger (id, amount);
ALTER TABLE crash.ledger REPLICA IDENTITY USING INDEX ledger_identity;
INSERT INTO crash.ledger SELECT g, g, 'memo' FROM generate_series(1, 1500) g;
CREATE PUBLICATION w2d_crash_ledger FOR TABLE crash.ledger (id, amount) WHERE (amount % 5 <> 0);
CREATE VIEW crash.ledger_published AS SELECT id, amount FROM crash.ledger WHERE amount % 5 <> 0;
"""
KILLS = 20
SNAPSHOT_KILLS = 3
"""Kills at any moment before the first complete snapshot; after them a run may finish it."""
ACKNOWLEDGE_WAIT = 20.0
"""Seconds after its start a daemon waiting to be killed after an acknowledgement is
killed at the latest (``KillClock``)."""
STARVED_RUNS = 3
"""Runs in a row in which the workload waited all along for the daemon, after which a run
lasts until the daemon has caught up (``KillClock``)."""
BACKLOG_LIMIT = 8 * 2**20
"""WAL bytes past the slot's acknowledged position beyond which the workload only resolves
its prepared transactions (which hold that position back) until the daemon catches up: a
daemon killed again and again must get through what the server sends it again."""


class KillClock:
    """When to kill the daemon just started (the harness's random points).

    A daemon spends its first seconds importing and starting its engine (longer on a busy
    machine), and the snapshot of many tables takes longer still: a kill at a random time
    after the start would rarely fall while it streams. So a kill is timed from one of
    five moments:

    * ``start``: the daemon's start - a kill during start-up, the snapshot or the first
      batches (the first ``SNAPSHOT_KILLS`` runs, then a quarter of them);
    * ``snapshot``: the first complete snapshot (once, after those);
    * ``walsender``: a new walsender has taken the slot - a kill mid-MERGE, between
      MERGE and acknowledgement, during a compaction, while changes are held back (half
      of the runs);
    * ``acknowledged``: this daemon has moved the slot's acknowledged position - a kill
      after some of its batches acknowledged, others not, with changes held back (a
      quarter of the runs), or ``ACKNOWLEDGE_WAIT`` seconds after the start if none did;
    * ``caught up``: the daemon has acknowledged all but half of ``BACKLOG_LIMIT`` (the
      workload waits for that).

    A daemon killed again and again must still get on: the work at the head of what the
    server sends again (a large transaction, then a compaction of the key-partitioned
    table due after it) can take longer than most runs last, and meanwhile the workload
    waits (``BACKLOG_LIMIT``). After ``STARVED_RUNS`` runs in a row in which it waited all
    along, a run lasts until the daemon has caught up.
    """

    def __init__(self, rng: random.Random, snapshot_kills: int = SNAPSHOT_KILLS) -> None:
        self.rng = rng
        self.snapshot_kills = snapshot_kills
        self.early_kills = 0
        self.starved_runs = 0
        self._walsender: int | None = None
        """The slot's walsender when the last daemon was killed: not the next one's."""
        self._confirmed: str | None = None
        """The slot's acknowledged position when this daemon started."""
        self._next_look = 0.0
        self.trigger = "start"
        self.started = 0.0
        self.deadline: float | None = None

    def start(self, conn: psycopg.Connection[tuple[object, ...]], streaming: bool) -> None:
        """A daemon was started now; ``streaming``: a snapshot completed before."""
        rng, now = self.rng, time.monotonic()
        self.started = now
        self.deadline = None
        self._confirmed = slot_row(conn)[1]
        if not streaming:
            self.trigger = "start" if self.early_kills < self.snapshot_kills else "snapshot"
        elif self.starved_runs >= STARVED_RUNS:
            self.trigger = "caught up"
        else:
            triggers = ["start", "walsender", "acknowledged"]
            self.trigger = rng.choices(triggers, weights=[1, 2, 1])[0]
        if self.trigger == "start":
            self.deadline = now + rng.uniform(0.5, 8.0)

    def due(self, conn: psycopg.Connection[tuple[object, ...]], streaming: bool) -> bool:
        """Whether the daemon is to be killed now."""
        now = time.monotonic()
        if self.deadline is None:
            if self.trigger == "snapshot" and streaming:
                self.deadline = now + self.rng.uniform(0.2, 3.0)
            elif self.trigger == "caught up" and now >= self._next_look:
                self._next_look = now + 0.25
                if backlog(conn) < self.backlog_limit:
                    self.deadline = now + self.rng.uniform(0.3, 4.0)
            elif self.trigger in ("walsender", "acknowledged") and now >= self._next_look:
                self._next_look = now + 0.25
                walsender, confirmed = slot_row(conn)
                if self.trigger == "walsender":
                    if walsender is not None and walsender != self._walsender:
                        self.deadline = now + self.rng.uniform(0.3, 4.0)
                elif confirmed is not None and confirmed != self._confirmed:
                    self.deadline = now + self.rng.uniform(0.0, 3.0)
                elif now - self.started > ACKNOWLEDGE_WAIT:
                    self.trigger = "acknowledgement awaited"
                    self.deadline = now
            if self.deadline is None and now - self.started > 240:
                pytest.fail(f"the daemon never reached its kill point ({self.trigger})")
        return self.deadline is not None and now >= self.deadline

    @property
    def backlog_limit(self) -> int:
        """The backlog beyond which the workload waits (lower while the daemon catches up)."""
        return BACKLOG_LIMIT // 2 if self.trigger == "caught up" else BACKLOG_LIMIT

    def killed(self, conn: psycopg.Connection[tuple[object, ...]], starved: bool) -> None:
        """The daemon was killed (its walsender may still hold the slot for a moment);
        ``starved``: the workload waited for it all along."""
        self.early_kills += self.trigger == "start"
        self._walsender = slot_row(conn)[0]
        self.starved_runs = self.starved_runs + 1 if starved else 0


def slot_row(conn: psycopg.Connection[tuple[object, ...]]) -> tuple[int | None, str | None]:
    """The walsender process that holds the slot, and the slot's acknowledged position."""
    row = conn.execute(
        "SELECT active_pid, confirmed_flush_lsn::text FROM pg_replication_slots "
        "WHERE slot_name = 'w2d_crash'"
    ).fetchone()
    if row is None:
        return None, None
    pid, confirmed = row
    assert pid is None or isinstance(pid, int)
    assert confirmed is None or isinstance(confirmed, str)
    return pid, confirmed


def backlog(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """WAL bytes past the slot's acknowledged position (0 before there is a slot)."""
    row = conn.execute(
        "SELECT pg_current_wal_lsn() - confirmed_flush_lsn FROM pg_replication_slots "
        "WHERE slot_name = 'w2d_crash'"
    ).fetchone()
    return 0 if row is None or row[0] is None else int(row[0])


class Workload:
    """Seeded random transactions over the crash tables."""

    def __init__(self, rng: random.Random, lake: Path) -> None:
        self.rng = rng
        self.lake = lake
        self.next_id = 10_000
        self.next_order = 0
        self.prepared: list[str] = []
        # crash.notes changes only once the lake records the slot's snapshot as complete:
        # every change is then streamed (none copied by a snapshot), so its change history
        # must hold them all. A slot merely existing is not enough: a daemon killed during
        # the snapshot leaves it unfinished, and the next one drops the slot and copies
        # again from a new consistent point.
        # TRUNCATE (a catalog change) waits for the same moment: committed while a slot is
        # being created, next to the open prepared transactions that creation waits for, it
        # can trip PostgreSQL's snapshot-builder defect (tests/e2e/test_undecodable_slot.py),
        # and the slot copied again would break the change history checked here.
        self.streaming = False
        self._next_snapshot_look = 0.0

    def _snapshot_complete(self) -> bool:
        if time.monotonic() < self._next_snapshot_look:
            return False
        self._next_snapshot_look = time.monotonic() + 0.5
        markers = self.lake / SNAPSHOTS_TABLE
        if not (markers / "_delta_log").is_dir():
            return False
        slot, status, *_ = SNAPSHOT_COLUMNS
        rows = DeltaTable(str(markers)).to_pyarrow_table().to_pylist()
        return any(r[slot] == "w2d_crash" and r[status] == "complete" for r in rows)

    def look(self) -> None:
        """Notice a snapshot completed (also while the workload waits for the daemon)."""
        if not self.streaming:
            self.streaming = self._snapshot_complete()

    def step(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        rng = self.rng
        self.look()
        kind = rng.choices(
            [
                "small",
                "large",
                "savepoints",
                "key_change",
                "truncate",
                "prepare",
                "resolve",
                "duplicates",
                "ledger",
                "spread",
                "many",
                "orders",
            ],
            weights=[40, 8, 12, 12, 3, 8, 8, 12, 10, 16, 3, 14],
        )[0]
        if kind == "truncate" and not self.streaming:
            kind = "small"
        if kind == "resolve" and not self.prepared:
            kind = "small"
        if kind == "prepare" and len(self.prepared) >= 5:
            kind = "resolve"
        conn.execute("BEGIN")
        if kind == "small":
            for _ in range(rng.randint(1, 20)):
                self._random_change(conn)
            conn.execute("COMMIT" if rng.random() > 0.1 else "ROLLBACK")
        elif kind == "large":
            start = self.next_id + 1
            self.next_id += 1500
            conn.execute(
                "INSERT INTO crash.accounts SELECT g, 'bulk', g "
                "FROM generate_series(%s::int, %s::int) g",
                (start, start + 1499),
            )
            conn.execute("UPDATE crash.accounts SET balance = balance + 1 WHERE id % 13 = 0")
            conn.execute("COMMIT" if rng.random() > 0.2 else "ROLLBACK")
        elif kind == "savepoints":
            self._random_change(conn)
            conn.execute("SAVEPOINT a")
            for _ in range(rng.randint(1, 200)):
                self._random_change(conn)
            conn.execute("ROLLBACK TO SAVEPOINT a" if rng.random() < 0.5 else "RELEASE SAVEPOINT a")
            self._random_change(conn)
            conn.execute("COMMIT")
        elif kind == "key_change":
            conn.execute(
                "UPDATE crash.lines SET line_no = line_no + 1000 WHERE order_id = %s "
                "AND line_no < 1000",
                (rng.randrange(500),),
            )
            conn.execute("COMMIT")
        elif kind == "duplicates":
            self._duplicates(conn)
            conn.execute("COMMIT" if rng.random() > 0.1 else "ROLLBACK")
        elif kind == "ledger":
            self._ledger(conn)
            conn.execute("COMMIT" if rng.random() > 0.1 else "ROLLBACK")
        elif kind == "spread":
            # A few changes to one to three small tables: mostly held back by the sink.
            for table in rng.sample(SMALL_TABLES, rng.randint(1, 3)):
                if self.streaming and rng.random() < 0.03:
                    # A TRUNCATE brings back the changes held back for its table first.
                    conn.execute(f"TRUNCATE {table}".encode())
                for _ in range(rng.randint(1, 3)):
                    self._small_change(conn, table)
            conn.execute("COMMIT" if rng.random() > 0.1 else "ROLLBACK")
        elif kind == "many":
            # One transaction over many tables: the sink applies its changes of some
            # tables at once and holds back those of others, so it is durable in parts.
            for table in rng.sample(SMALL_TABLES, rng.randint(5, 20)):
                for _ in range(rng.randint(1, 6)):
                    self._small_change(conn, table)
            self._random_change(conn)
            conn.execute("COMMIT" if rng.random() > 0.1 else "ROLLBACK")
        elif kind == "orders":
            self._orders(conn)
            conn.execute("COMMIT" if rng.random() > 0.1 else "ROLLBACK")
        elif kind == "truncate":
            conn.execute("TRUNCATE crash.lines")
            conn.execute(
                "INSERT INTO crash.lines SELECT g / 10, g % 10, g FROM generate_series(1, 200) g"
            )
            conn.execute("COMMIT")
        elif kind == "prepare":
            # Only new rows: a prepared transaction keeps its row locks until resolved, and
            # this single-connection workload must never wait on them.
            for _ in range(rng.randint(1, 50)):
                self.next_id += 1
                conn.execute(
                    "INSERT INTO crash.accounts VALUES (%s, 'prepared', 1)", (self.next_id,)
                )
            gid = f"crash_{self.next_id}"
            self.next_id += 1
            conn.execute(f"PREPARE TRANSACTION '{gid}'".encode())
            self.prepared.append(gid)
        else:
            conn.execute("ROLLBACK")
            self.resolve(conn)

    def resolve(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        """Commit or roll back one of the open prepared transactions."""
        rng = self.rng
        gid = self.prepared.pop(rng.randrange(len(self.prepared)))
        verb = "COMMIT" if rng.random() < 0.7 else "ROLLBACK"
        conn.execute(f"{verb} PREPARED '{gid}'".encode())

    def _small_change(self, conn: psycopg.Connection[tuple[object, ...]], table: str) -> None:
        """One change of a small table: an upsert, an update, a key change or a delete."""
        rng = self.rng
        key, roll = rng.randint(1, SMALL_KEYS), rng.random()
        if roll < 0.45:
            conn.execute(
                f"INSERT INTO {table} VALUES (%s, %s, %s) ON CONFLICT (id) DO UPDATE "
                "SET v = EXCLUDED.v, note = EXCLUDED.note".encode(),
                (key, rng.randrange(10**6), rng.choice([None, f"n{key}"])),
            )
        elif roll < 0.7:
            conn.execute(f"UPDATE {table} SET v = v + 1 WHERE id = %s".encode(), (key,))
        elif roll < 0.8:
            # A key change, out of the keys the other changes pick or back into them.
            old, new = (key, key + SMALL_KEYS) if rng.random() < 0.5 else (key + SMALL_KEYS, key)
            conn.execute(
                f"UPDATE {table} SET id = %s WHERE id = %s AND NOT EXISTS "
                f"(SELECT 1 FROM {table} WHERE id = %s)".encode(),
                (new, old, new),
            )
        else:
            conn.execute(f"DELETE FROM {table} WHERE id = %s".encode(), (key,))

    def _orders(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        """New orders, now and then one of them updated or deleted in the same transaction
        (still appended), or an older order deleted and inserted again (merged)."""
        rng = self.rng
        first, count = self.next_order + 1, rng.randint(1, 60)
        self.next_order += count
        conn.execute(
            "INSERT INTO crash.orders SELECT g, 'order ' || g, g %% 9 "
            "FROM generate_series(%s::bigint, %s::bigint) g",
            (first, first + count - 1),
        )
        new, roll = rng.randint(first, first + count - 1), rng.random()
        if roll < 0.15:
            conn.execute("UPDATE crash.orders SET qty = qty + 100 WHERE id = %s", (new,))
        elif roll < 0.25:
            conn.execute("DELETE FROM crash.orders WHERE id = %s", (new,))
        elif roll < 0.3 and first > 1:
            old = rng.randint(1, first - 1)
            deleted = conn.execute("DELETE FROM crash.orders WHERE id = %s", (old,)).rowcount
            if deleted:
                conn.execute("INSERT INTO crash.orders VALUES (%s, 'again', 0)", (old,))

    def _duplicates(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        """Changes of the table without a key, where identical rows are the rule."""
        rng = self.rng
        for _ in range(rng.randint(1, 10)):
            kind, note = rng.randrange(40), f"n{rng.randrange(3)}"
            roll = rng.random()
            if roll < 0.4:
                copies = rng.randint(1, 3)
                conn.execute(
                    "INSERT INTO crash.events SELECT %s, %s FROM generate_series(1, %s)",
                    (kind, note, copies),
                )
            elif roll < 0.6:
                conn.execute(
                    "UPDATE crash.events SET note = note || '+' WHERE ctid = "
                    "(SELECT min(ctid) FROM crash.events WHERE kind = %s AND note = %s)",
                    (kind, note),
                )
            elif roll < 0.8:
                conn.execute(
                    "DELETE FROM crash.events WHERE ctid = "
                    "(SELECT max(ctid) FROM crash.events WHERE kind = %s AND note = %s)",
                    (kind, note),
                )
            elif roll < 0.9:
                conn.execute("UPDATE crash.events SET kind = %s WHERE kind = %s", (kind, kind + 1))
            else:
                conn.execute("DELETE FROM crash.events WHERE kind = %s AND note = %s", (kind, note))

    def _ledger(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        """Changes of the second publication's table; rows cross its row filter."""
        rng = self.rng
        for _ in range(rng.randint(1, 10)):
            row, roll = rng.randrange(1, 2000), rng.random()
            if roll < 0.4:
                conn.execute(
                    "INSERT INTO crash.ledger VALUES (%s, %s, 'new') ON CONFLICT (id) DO UPDATE "
                    "SET amount = EXCLUDED.amount",
                    (row, rng.randrange(1000)),
                )
            elif roll < 0.8:
                conn.execute(
                    "UPDATE crash.ledger SET amount = amount + 1, memo = memo || '+' WHERE id = %s",
                    (row,),
                )
            else:
                conn.execute("DELETE FROM crash.ledger WHERE id = %s", (row,))

    def _random_change(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.35:
            self.next_id += 1
            conn.execute(
                "INSERT INTO crash.accounts VALUES (%s, %s, %s)",
                (self.next_id, f"o{self.next_id}", rng.randrange(10**6) / 100),
            )
        elif roll < 0.6:
            conn.execute(
                "UPDATE crash.accounts SET balance = balance * 2, owner = owner || '+' "
                "WHERE id = %s",
                (rng.randrange(1, self.next_id),),
            )
        elif roll < 0.75:
            conn.execute(
                "DELETE FROM crash.accounts WHERE id = %s", (rng.randrange(1, self.next_id),)
            )
        elif roll < 0.85 and self.streaming:
            note = rng.randrange(300)
            conn.execute(
                "INSERT INTO crash.notes VALUES (%s, %s) ON CONFLICT (id) DO UPDATE "
                "SET body = CASE WHEN random() < 0.5 THEN crash.notes.body ELSE EXCLUDED.body END",
                (note, rng.randbytes(3000).hex()),
            )
        elif roll >= 0.95 and self.streaming:
            conn.execute("DELETE FROM crash.notes WHERE id = %s", (rng.randrange(300),))
        else:
            conn.execute(
                "UPDATE crash.lines SET qty = qty + 1 WHERE order_id = %s", (rng.randrange(500),)
            )


def history_mismatches(conn: psycopg.Connection[tuple[object, ...]], lake: Path) -> list[str]:
    """Where the change history of crash.notes differs from its audit trail, per key.

    Each key's changes in (LSN, ordinal) order must be exactly its audited changes in
    order; an unchanged TOAST body takes the key's previous body. Every change is unique.
    """
    audited: dict[int, list[tuple[str, str | None]]] = {}
    audit = conn.execute("SELECT op, id, body_md5 FROM crash.notes_audit ORDER BY seq")
    for op, key, body in audit:
        assert isinstance(op, str)
        assert isinstance(key, int)
        assert body is None or isinstance(body, str)
        audited.setdefault(key, []).append((op, body))
    rows = DeltaTable(history_path(str(lake), "crash", "notes")).to_pyarrow_table().to_pylist()
    rows.sort(key=lambda r: (r["_wal2delta_lsn"], r["_wal2delta_ordinal"]))
    positions = [(r["_wal2delta_lsn"], r["_wal2delta_ordinal"]) for r in rows]
    found = [] if len(set(positions)) == len(positions) else ["history holds a change twice"]
    recorded: dict[int, list[tuple[str, str | None]]] = {}
    bodies: dict[int, str | None] = {}
    for row in rows:
        op = row["_wal2delta_op"]
        if op == "truncate":
            continue  # the snapshot's, at the consistent point: the workload truncates no note
        if op == "delete":
            key = row["_wal2delta_old_id"]
            recorded.setdefault(key, []).append((op, None))
            continue
        key = row["id"]
        body = row["body"]
        if "body" in (row["_wal2delta_unchanged_toast"] or []):
            body = bodies[key]
        else:
            body = hashlib.md5(body.encode()).hexdigest()
        bodies[key] = body
        recorded.setdefault(key, []).append((op, body))
    found += [
        f"history of crash.notes key {key}: {recorded.get(key)} != audited {audited.get(key)}"
        for key in sorted(audited.keys() | recorded.keys())
        if recorded.get(key) != audited.get(key)
    ]
    return found[:10]


def source_state(conn: psycopg.Connection[tuple[object, ...]], log: Path) -> str:
    """What a failure report needs beyond the log's tail: the slot, the prepared
    transactions, and how often each warning occurred over the whole run."""
    try:
        return _source_state(conn, log)
    except Exception as exc:  # the report must never hide the failure it describes
        return f"(source state unavailable: {type(exc).__name__}: {exc})"


def _source_state(conn: psycopg.Connection[tuple[object, ...]], log: Path) -> str:
    slot = conn.execute(
        "SELECT restart_lsn, confirmed_flush_lsn, two_phase, two_phase_at "
        "FROM pg_replication_slots WHERE slot_name = 'w2d_crash'"
    ).fetchall()
    prepared = conn.execute("SELECT gid, prepared FROM pg_prepared_xacts ORDER BY 2").fetchall()
    warnings: dict[str, int] = {}
    for line in log.read_text().splitlines():
        if '"level": "warning"' in line or '"level": "error"' in line:
            event = line.split('"event": "', 1)[-1].split('"', 1)[0]
            warnings[event] = warnings.get(event, 0) + 1
    return (
        f"slot (restart, confirmed flush, two_phase, two_phase_at): {slot}\n"
        f"prepared on the source: {prepared}\n"
        f"warnings and errors over the run: {warnings}"
    )


def slot_position(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    """The slot's restart and confirmed flush LSNs and the WAL's end, for the progress
    lines."""
    row = conn.execute(
        "SELECT restart_lsn, confirmed_flush_lsn, pg_current_wal_lsn() "
        "FROM pg_replication_slots WHERE slot_name = 'w2d_crash'"
    ).fetchone()
    return "no slot" if row is None else f"slot restart {row[0]}, confirmed {row[1]} of {row[2]}"


def walsender_starts(server: LocalPostgres) -> str:
    """Where the server's walsenders started decoding (its log), for a failure report."""
    lines = server.log_file.read_text(errors="replace").splitlines()
    wanted = [line for line in lines if "w2d_crash" in line or "Streaming transactions" in line]
    return "\n".join(wanted[-40:])


def run_crash_harness(
    server: LocalPostgres,
    dsn: str,
    tmp_path: Path,
    *,
    kills: int = KILLS,
    snapshot_kills: int = SNAPSHOT_KILLS,
    spark: dict[str, Any] | None = None,
) -> None:
    """The harness: ``kills`` SIGKILLs (the first ``snapshot_kills`` before the first
    complete snapshot), a final run to ``--endpos``, then every table, the filtered
    ledger and the change history compared with the source. ``spark``: the daemon's
    ``sink.spark`` (default: the embedded engine). Fails the test on any difference."""
    seed = int(os.environ.get("WAL2DELTA_CRASH_SEED", random.randrange(10**6)))
    print(f"crash harness seed: {seed}")
    rng = random.Random(seed)
    lake = tmp_path / "lake"
    config = tmp_path / "source.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": dsn,
                    "slot": "w2d_crash",
                    "publication": ["w2d_crash", "w2d_crash_ledger"],
                    "create_publication": False,
                    "tables": list(TABLES),
                    "two_phase": True,
                    "status_interval": "500ms",
                },
                # Small chunks and two workers: the snapshot is several bulk appends per
                # table, in page ranges, and a kill can fall between any two of them.
                "snapshot": {"mode": "initial", "parallelism": 2, "chunk_size": "64KiB"},
                "sink": {
                    "path": str(lake),
                    "batch": {"max_rows": 2000, "max_age": "200ms"},
                    # Replays into key-range partitions must find their rows as well.
                    "partition_by_key": {
                        "crash.accounts": {"width": 50},
                        "crash.lines": {"column": "order_id", "width": 20},
                    },
                    # Unchanged TOAST bodies, deletes, prepared and rolled-back work.
                    "history": ["crash.notes"],
                    # Compactions every few writes, so kills fall during them too.
                    "compact_after_writes": 3,
                    # Four tables' MERGEs at once, and the changes of a table with fewer
                    # than five in a batch held back for up to two seconds: kills fall
                    # while MERGEs run side by side and while changes wait, unacknowledged.
                    "concurrency": 4,
                    "table_min_rows": 5,
                    "table_max_age": "2s",
                    **({"spark": spark} if spark is not None else {}),
                },
                "spool": {"dir": str(tmp_path / "spool"), "memory_limit": "256KiB"},
                "metrics": {"enabled": False},
                "logging": {"format": "json", "level": "warning"},
            }
        )
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(LEDGER_SCHEMA)
        conn.execute(SMALL_SCHEMA.encode())
        conn.execute(f"CREATE PUBLICATION w2d_crash FOR TABLE {', '.join(TABLES)}".encode())
        workload = Workload(rng, lake)
        kills, kills_wanted = 0, kills
        log = tmp_path / "daemon.log"
        clock = KillClock(rng, snapshot_kills)
        while kills < kills_wanted:
            daemon = start_daemon(config, log)
            clock.start(conn, workload.streaming)
            steps = waits = 0
            try:
                while daemon.poll() is None:
                    workload.look()
                    if clock.due(conn, workload.streaming):
                        break
                    if backlog(conn) < clock.backlog_limit:
                        workload.step(conn)
                        steps += 1
                    elif workload.prepared:
                        workload.resolve(conn)
                    else:
                        waits += 1
                    time.sleep(0.02)  # a steady stream, not a flood the daemon never catches
            except BaseException:
                daemon.kill()
                raise
            # One poll: the daemon may exit between the loop's last poll and this check.
            exited = daemon.poll()
            if exited == 3:
                # The killed daemon's walsender has not noticed yet and still holds the
                # slot; like Kubernetes, restart after a pause.
                time.sleep(0.5)
                continue
            if exited is not None:
                pytest.fail(
                    f"daemon exited with {exited} (seed {seed}):\n"
                    + log.read_text()[-3000:]
                    + "\n"
                    + source_state(conn, log)
                )
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(30)
            clock.killed(conn, starved=workload.streaming and not steps)
            kills += 1
            print(
                f"kill {kills} at {time.strftime('%H:%M:%S')} ({clock.trigger} "
                f"+{time.monotonic() - clock.started:.1f}s), snapshot complete: "
                f"{workload.streaming}, {steps} steps, {waits} waits, prepared open: "
                f"{', '.join(workload.prepared) or 'none'}; {slot_position(conn)}",
                file=sys.stderr,
            )
        for gid in workload.prepared:
            conn.execute(f"COMMIT PREPARED '{gid}'".encode())
        endpos = format_lsn(current_wal_lsn(conn))
        print(f"final run to {endpos}; {slot_position(conn)}", file=sys.stderr)
        for _ in range(20):
            final = start_daemon(config, log, "--endpos", endpos)
            try:
                final.wait(600)
            except subprocess.TimeoutExpired:
                pytest.fail(f"final run hung (seed {seed}):\n" + log.read_text()[-3000:])
            finally:
                if final.poll() is None:
                    final.kill()
            if final.returncode != 3:
                break
            time.sleep(0.5)
        assert final.returncode == 0, (
            f"seed {seed}:\n{log.read_text()[-3000:]}\n{source_state(conn, log)}\n"
            f"walsenders (server log):\n{walsender_starts(server)}"
        )
        recreated = "postgresql cannot decode the slot" in log.read_text()
        assert not recreated, f"seed {seed}: the slot was dropped and copied again"
        mismatches = []
        checks: list[tuple[str, str, list[str] | None]] = [(t, t, None) for t in TABLES]
        checks.append((*LEDGER, ["id"]))
        for source, name, key in checks:
            schema, _, table = name.partition(".")
            comparison = compare_table(conn, source, table_path(str(lake), schema, table), key=key)
            if not comparison.matches:
                mismatches.append(comparison.describe())
        mismatches += history_mismatches(conn, lake)
    assert kills >= kills_wanted
    orders = DeltaTable(table_path(str(lake), "crash", "orders")).history()
    appends = [c for c in orders if c.get("operationParameters", {}).get("mode") == "Append"]
    assert appends, "no batch of crash.orders took the append path"
    assert not mismatches, f"seed {seed}:\n" + "\n".join(mismatches)
