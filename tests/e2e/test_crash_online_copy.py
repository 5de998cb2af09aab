"""Crash harness for tables copied while streaming (issue 32): SIGKILL the daemon during
online copies; Delta must still equal the source.

Two tables are published from the start (``snapshot.mode: initial``); three more join the
publication while the real daemon (``wal2delta run`` in a subprocess) streams - a 200k-row
table whose copy takes seconds, a small keyed table and a table without a key - and
``wal2delta resync`` asks for copies of published tables again (the CLI or
``daemon.resync.request_resync``). A seeded random workload writes to all five tables all
along (inserts, updates, key changes, deletes, transactions over several tables, rolled
back ones), also to tables not published yet and to tables being copied; a table that
just joined the publication is written at once, so its first changes race the daemon's
look for new tables (``snapshot.new_tables_interval``). The daemon is killed with SIGKILL
and started again at random moments: during start-up and the initial snapshot, while a
copy runs (found by the daemon's log line "copying tables while streaming" without its
"tables copied while streaming"), right after a copy landed (the rewind) and at random
times. A final run with ``--endpos`` at the WAL's end returns only once every copy is done
and applied; then every table's Delta table equals its source and no copy is left
unfinished in ``<lake>/_wal2delta_copies``. Resyncs ask only for tables copied before: one
for a table the daemon failed to notice when it joined would hide that.

Replay a failure with ``WAL2DELTA_CRASH_SEED=<seed> pytest tests/e2e/test_crash_online_copy.py``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
import yaml

from capture.slots import current_wal_lsn
from config import load_config
from daemon.resync import request_resync
from decoder import format_lsn
from sink import read_copy_records, table_path
from tests.support.harness import ROOT, child_environment, start_daemon
from tests.support.oracle import compare_table

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SLOT = "w2d_oc"
STREAMED = ("oc.stream", "oc.pair")
"""Published from the start: copied by the initial snapshot."""
JOINING = ("oc.big", "oc.late", "oc.bag")
"""Join the publication while the daemon runs (or is down): copied while streaming."""
TABLES = (*STREAMED, *JOINING)
BIG_ROWS = 200_000
SCHEMA = f"""
CREATE SCHEMA oc;
CREATE TABLE oc.stream (id int PRIMARY KEY, v int NOT NULL, note text);
CREATE TABLE oc.pair (a int, b int, qty int, PRIMARY KEY (a, b));
CREATE TABLE oc.big (id int PRIMARY KEY, body text NOT NULL, v int);
CREATE TABLE oc.late (id int PRIMARY KEY, v int, tag text);
-- No key: identical rows must stay as many as in PostgreSQL.
CREATE TABLE oc.bag (kind int, note text);
ALTER TABLE oc.bag REPLICA IDENTITY FULL;
INSERT INTO oc.stream SELECT g, g, 'seed' FROM generate_series(1, 3000) g;
INSERT INTO oc.pair SELECT g / 10, g % 10, g FROM generate_series(1, 2000) g;
INSERT INTO oc.big SELECT g, repeat('b', 24) || g, g FROM generate_series(1, {BIG_ROWS}) g;
INSERT INTO oc.late SELECT g, g, 't' || (g % 7) FROM generate_series(1, 3000) g;
INSERT INTO oc.bag SELECT g % 30, 'n' || (g % 3) FROM generate_series(1, 1500) g;
CREATE PUBLICATION {SLOT} FOR TABLE {", ".join(STREAMED)};
"""
KEY_RANGES = {"oc.stream": 3000, "oc.late": 3000, "oc.big": BIG_ROWS}

TRIGGERS = ("copy",) * 5 + ("landed",) + ("random",) * 2
"""When the runs after the first (killed during start-up or the initial snapshot) are
killed, in a random order: during a copy (one is asked for if none is to come), right after
one landed, at a random time (a table added or a resync asked for meanwhile, or not)."""
KILLS = 1 + len(TRIGGERS)
COPY_KILLS = 3
"""Kills that must fall while a copy runs, at the least."""
MAKE_UP_KILLS = 4
"""Runs added after the last trigger, each killed early in a copy, while fewer than
``COPY_KILLS`` kills fell during one (a copy can end before the kill meant for it)."""
NOTICE_WAIT = 20.0
"""Seconds a table added to the publication counts as a copy to come before it is noticed."""
COPY_WAIT = 60.0
"""Seconds a run waits for the copy it is to be killed in before it is killed anyway."""

RESYNC = (sys.executable, "-m", "daemon.cli", "resync")
STREAMING = "replication started"
COPY_STARTED = "copying tables while streaming"
COPY_LANDED = "tables copied while streaming"
COPY_FAILED = "copying tables while streaming failed; it is tried again"


@dataclass
class RunLog:
    """The JSON log events of the daemon run that started at ``offset`` in the log file."""

    path: Path
    offset: int
    events: list[dict[str, object]] = field(default_factory=list)
    _read: int = 0

    def refresh(self) -> list[dict[str, object]]:
        with self.path.open("rb") as log:
            log.seek(self.offset + self._read)
            data = log.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._read += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    self.events.append(json.loads(line))
                except ValueError:
                    continue
        return self.events

    def count(self, event: str) -> int:
        return sum(e.get("event") == event for e in self.events)

    def copying(self) -> list[str] | None:
        """The tables of the copy under way in this run, None when none is."""
        self.refresh()
        started = [e for e in self.events if e.get("event") == COPY_STARTED]
        if len(started) <= self.count(COPY_LANDED) + self.count(COPY_FAILED):
            return None
        tables = started[-1].get("tables")
        return [str(t) for t in tables] if isinstance(tables, list) else []


class Workload:
    """Seeded random transactions over all five tables, published or not."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.next_id = 10_000_000
        self.focus: list[str] = []
        """Tables the next transactions write first (one that just joined the publication:
        its first changes race the daemon's look for new tables)."""

    def step(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        rng = self.rng
        kind = rng.choices(["one", "several", "bulk"], weights=[50, 40, 4])[0]
        with conn.transaction(force_rollback=rng.random() < 0.08):
            if self.focus:
                for _ in range(rng.randint(1, 8)):
                    self._change(conn, self.focus[0])
                if rng.random() < 0.2:
                    self.focus.pop(0)
            elif kind == "one":
                table = rng.choice(TABLES)
                for _ in range(rng.randint(1, 8)):
                    self._change(conn, table)
            elif kind == "several":
                for table in rng.sample(TABLES, rng.randint(2, 4)):
                    for _ in range(rng.randint(1, 4)):
                        self._change(conn, table)
            else:
                start = self.next_id + 1
                self.next_id += 400
                conn.execute(
                    "INSERT INTO oc.big SELECT g, 'bulk ' || g, g "
                    "FROM generate_series(%s::int, %s::int) g",
                    (start, start + 399),
                )
                conn.execute(
                    "UPDATE oc.stream SET v = v + 1 WHERE id %% 97 = %s", (rng.randrange(97),)
                )

    def _change(self, conn: psycopg.Connection[tuple[object, ...]], table: str) -> None:
        if table == "oc.pair":
            self._pair(conn)
        elif table == "oc.bag":
            self._bag(conn)
        else:
            self._keyed(conn, table)

    def _keyed(self, conn: psycopg.Connection[tuple[object, ...]], table: str) -> None:
        rng = self.rng
        key, roll = rng.randint(1, KEY_RANGES[table]), rng.random()
        text = "body" if table == "oc.big" else ("note" if table == "oc.stream" else "tag")
        if roll < 0.35:
            conn.execute(
                f"INSERT INTO {table} (id, v, {text}) VALUES (%s, %s, %s) "
                f"ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, {text} = EXCLUDED.{text}".encode(),
                (key, rng.randrange(10**6), f"u{rng.randrange(1000)}"),
            )
        elif roll < 0.6:
            conn.execute(f"UPDATE {table} SET v = v + 1 WHERE id = %s".encode(), (key,))
        elif roll < 0.7:
            self.next_id += 1
            conn.execute(f"UPDATE {table} SET id = %s WHERE id = %s".encode(), (self.next_id, key))
        elif roll < 0.85:
            conn.execute(f"DELETE FROM {table} WHERE id = %s".encode(), (key,))
        else:
            self.next_id += 1
            conn.execute(
                f"INSERT INTO {table} (id, v, {text}) VALUES (%s, %s, 'new')".encode(),
                (self.next_id, key),
            )

    def _pair(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        rng = self.rng
        a, b, roll = rng.randrange(200), rng.randrange(10), rng.random()
        if roll < 0.4:
            conn.execute("UPDATE oc.pair SET qty = qty + 1 WHERE a = %s AND b = %s", (a, b))
        elif roll < 0.6:
            # A key change, into keys the other changes never pick, or back.
            old, new = (b, b + 100) if rng.random() < 0.5 else (b + 100, b)
            conn.execute(
                "UPDATE oc.pair SET b = %s WHERE a = %s AND b = %s AND NOT EXISTS "
                "(SELECT 1 FROM oc.pair WHERE a = %s AND b = %s)",
                (new, a, old, a, new),
            )
        elif roll < 0.8:
            conn.execute("DELETE FROM oc.pair WHERE a = %s AND b = %s", (a, b))
        else:
            conn.execute(
                "INSERT INTO oc.pair VALUES (%s, %s, 0) ON CONFLICT (a, b) DO UPDATE "
                "SET qty = oc.pair.qty - 1",
                (a, b),
            )

    def _bag(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        rng = self.rng
        kind, note, roll = rng.randrange(30), f"n{rng.randrange(3)}", rng.random()
        if roll < 0.4:
            conn.execute(
                "INSERT INTO oc.bag SELECT %s, %s FROM generate_series(1, %s)",
                (kind, note, rng.randint(1, 3)),
            )
        elif roll < 0.7:
            conn.execute(
                "UPDATE oc.bag SET note = note || '+' WHERE ctid = "
                "(SELECT min(ctid) FROM oc.bag WHERE kind = %s AND note = %s)",
                (kind, note),
            )
        else:
            conn.execute(
                "DELETE FROM oc.bag WHERE ctid = (SELECT min(ctid) FROM oc.bag WHERE kind = %s)",
                (kind,),
            )


class Requests:
    """What makes the daemon copy tables: publication additions and resync requests."""

    def __init__(self, rng: random.Random, config: Path, lake: Path, workload: Workload) -> None:
        self.rng = rng
        self.workload = workload
        self.config = config
        self.lake = lake
        self.to_add = list(JOINING)
        rng.shuffle(self.to_add)
        self.added: list[str] = []
        self._added_at: dict[str, float] = {}
        self.resyncs: list[str] = []
        self.clis: list[subprocess.Popen[str]] = []

    def pending(self) -> bool:
        """Whether a copy is requested or running, or a table added lately not yet noticed
        (one that never is - the daemon failed to see it is new - ends unequal)."""
        records = {r.table: r.state for r in read_copy_records(str(self.lake))}
        lately = time.monotonic() - NOTICE_WAIT
        return any(state != "done" for state in records.values()) or any(
            table not in records and self._added_at[table] > lately for table in self.added
        )

    def make_one(self, conn: psycopg.Connection[tuple[object, ...]]) -> str:
        """Add a table to the publication or ask for a resync; describe it."""
        rng = self.rng
        if self.to_add and (rng.random() < 0.75 or not self.added):
            table = self.to_add.pop()
            conn.execute(f"ALTER PUBLICATION {SLOT} ADD TABLE {table}".encode())
            self.added.append(table)
            self._added_at[table] = time.monotonic()
            self.workload.focus.append(table)
            return f"added {table}"
        # Only tables copied before: a request for a table the daemon missed when it joined
        # the publication would hide that it was missed.
        records = {r.table: r.state for r in read_copy_records(str(self.lake))}
        published = [*STREAMED, *(t for t in self.added if records.get(t) == "done")]
        weights = [4 if t == "oc.big" else 1 for t in published]
        tables = sorted(set(rng.choices(published, weights=weights, k=rng.randint(1, 2))))
        self.resyncs.extend(tables)
        if rng.random() < 0.3:
            # The command, in the background: it returns once the request is committed.
            self.clis.append(
                subprocess.Popen(
                    [*RESYNC, "-c", str(self.config), "--tables", *tables],
                    cwd=ROOT,
                    env=child_environment(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
            return f"wal2delta resync {' '.join(tables)}"
        request_resync(load_config(self.config), tables)
        return f"request_resync {' '.join(tables)}"

    def add_the_rest(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        while self.to_add:
            table = self.to_add.pop()
            conn.execute(f"ALTER PUBLICATION {SLOT} ADD TABLE {table}".encode())
            self.added.append(table)

    def check_clis(self) -> None:
        for cli in self.clis:
            out, err = cli.communicate(timeout=120)
            assert cli.returncode == 0, f"wal2delta resync exited {cli.returncode}: {out}{err}"


def slot_position(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    row = conn.execute(
        "SELECT confirmed_flush_lsn, pg_current_wal_lsn() FROM pg_replication_slots "
        "WHERE slot_name = %s",
        (SLOT,),
    ).fetchone()
    return "no slot" if row is None else f"slot confirmed {row[0]} of {row[1]}"


def log_digest(log: Path) -> str:
    """The copy events and every warning and error of all runs, for a failure report."""
    wanted = []
    for line in log.read_text(errors="replace").splitlines():
        if any(s in line for s in (COPY_STARTED, COPY_LANDED, "joined the publications")) or (
            '"level": "warning"' in line or '"level": "error"' in line
        ):
            wanted.append(line[:400])
    return "\n".join(wanted[-60:])


@pytest.mark.timeout(900)
def test_sigkill_during_online_copies_loses_and_duplicates_nothing(
    pg18_dsn: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("WAL2DELTA_CRASH_SEED", random.randrange(10**6)))
    print(f"online copy crash harness seed: {seed}")
    rng = random.Random(seed)
    lake = tmp_path / "lake"
    config = tmp_path / "source.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": pg18_dsn,
                    "slot": SLOT,
                    "publication": SLOT,
                    "create_publication": False,
                    "tables": [],
                    "status_interval": "500ms",
                },
                "snapshot": {
                    "mode": "initial",
                    "new_tables_interval": "1s",
                    "parallelism": 2,
                    "chunk_size": "1MiB",
                },
                "sink": {
                    "path": str(lake),
                    "batch": {"max_rows": 2000, "max_age": "200ms"},
                    "compact_after_writes": 5,
                },
                "spool": {"dir": str(tmp_path / "spool"), "memory_limit": "1MiB"},
                "metrics": {"enabled": False},
                # info: the copies' log lines tell the harness when a copy runs.
                "logging": {"format": "json", "level": "info"},
            }
        )
    )
    log = tmp_path / "daemon.log"
    log.touch()
    started = time.monotonic()
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA.encode())
        workload = Workload(rng)
        requests = Requests(rng, config, lake, workload)
        triggers = ["start", *rng.sample(TRIGGERS, len(TRIGGERS))]
        assert len(triggers) == KILLS
        kills = copy_kills = 0

        def report(what: str) -> str:
            return (
                f"seed {seed}: {what}\n{slot_position(conn)}\n"
                f"copy records: {read_copy_records(str(lake))}\n"
                f"copy events, warnings and errors:\n{log_digest(log)}\n"
                f"log tail:\n{log.read_text(errors='replace')[-3000:]}"
            )

        while kills < len(triggers):
            trigger = triggers[kills]
            if trigger == "random" and kills >= len(triggers) - 3 and copy_kills < COPY_KILLS:
                trigger = "copy"  # the last runs make up for copies that ended too soon
            run = RunLog(log, log.stat().st_size)
            daemon = start_daemon(config, log)
            begun = time.monotonic()
            deadline: float | None = None
            action_at: float | None = None
            wants_copy = trigger in ("copy", "landed")
            next_look = 0.0
            note = ""
            if trigger == "start":
                deadline = begun + rng.uniform(1.0, 8.0)
            elif trigger == "random":
                deadline = begun + rng.uniform(2.0, 12.0)
                if rng.random() < 0.6:
                    action_at = begun + rng.uniform(0.0, deadline - begun)
            try:
                while daemon.poll() is None:
                    now = time.monotonic()
                    if action_at is not None and now >= action_at:
                        action_at = None
                        note += "; " + requests.make_one(conn)
                    if deadline is None:
                        run.refresh()
                        if (
                            wants_copy
                            and now >= next_look
                            and run.count(STREAMING)
                            and not run.count(COPY_STARTED)
                        ):
                            # Once the daemon streams (a table added before its slot exists
                            # is copied by the initial snapshot): a copy to kill it in, unless
                            # one is to be made already.
                            next_look = now + 2.0
                            if not requests.pending():
                                note += "; " + requests.make_one(conn)
                        if trigger == "copy" and (tables := run.copying()) is not None:
                            span = 4.0 if "oc.big" in tables else 1.0
                            if kills >= KILLS:
                                span = 0.2  # a make-up run: kill before the copy can end
                            deadline = now + rng.uniform(0.0, span)
                        elif trigger == "landed" and run.count(COPY_LANDED):
                            deadline = now + rng.uniform(0.0, 1.5)
                        elif now - begun > COPY_WAIT:
                            note += f" (no {trigger} event within {COPY_WAIT:.0f} s)"
                            deadline = now
                    if deadline is not None and now >= deadline:
                        break
                    workload.step(conn)
                    time.sleep(0.03)
                during = run.copying()
            except BaseException:
                daemon.kill()
                raise
            exited = daemon.poll()
            if exited == 3:
                # The killed daemon's walsender still holds the slot: restart after a pause.
                time.sleep(0.5)
                continue
            if exited is not None:
                pytest.fail(report(f"the daemon exited with {exited}"))
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(30)
            kills += 1
            copy_kills += during is not None
            if (
                kills == len(triggers)
                and copy_kills < COPY_KILLS
                and len(triggers) < KILLS + MAKE_UP_KILLS
            ):
                triggers.append("copy")
            print(
                f"kill {kills} ({trigger} +{time.monotonic() - begun:.1f}s) "
                f"{'during the copy of ' + ', '.join(during) if during is not None else ''}"
                f"{note}; {slot_position(conn)}",
                file=sys.stderr,
            )
        requests.add_the_rest(conn)
        requests.check_clis()  # their requests are committed before the end position
        endpos = format_lsn(current_wal_lsn(conn))
        print(
            f"final run to {endpos} after {time.monotonic() - started:.0f} s; "
            f"{slot_position(conn)}",
            file=sys.stderr,
        )
        for _ in range(20):
            final = start_daemon(config, log, "--endpos", endpos)
            try:
                final.wait(600)
            except subprocess.TimeoutExpired:
                pytest.fail(report("the final run hung"))
            finally:
                if final.poll() is None:
                    final.kill()
            if final.returncode != 3:
                break
            time.sleep(0.5)
        assert final.returncode == 0, report(f"the final run exited with {final.returncode}")
        mismatches = []
        for name in TABLES:
            schema, _, table = name.partition(".")
            comparison = compare_table(conn, name, table_path(str(lake), schema, table))
            if not comparison.matches:
                mismatches.append(comparison.describe())
        unfinished = [r for r in read_copy_records(str(lake)) if r.state != "done"]
        print(
            f"done after {time.monotonic() - started:.0f} s: {kills} kills, {copy_kills} "
            f"during copies; resyncs: {requests.resyncs}",
            file=sys.stderr,
        )
        assert not mismatches, report("\n".join(mismatches))
        assert not unfinished, report(f"copies left unfinished: {unfinished}")
        assert copy_kills >= COPY_KILLS, report(f"only {copy_kills} kills fell during a copy")
