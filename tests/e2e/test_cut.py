"""A consistent cut across tables: ``wal2delta cut`` while the real daemon runs.

Every source transaction changes ``orders`` and ``order_lines`` together (an order's
``total`` is the sum of its lines' ``amount``) and bumps ``progress.n``, stamping the
orders it touches with it. Cuts are taken many times while the daemon (``wal2delta run``
in a subprocess) applies small batches, one large transaction split across several;
reading the three tables with delta-rs at the cut's versions must always show one
transaction boundary: every order's total equals its lines, no line without its order,
and ``progress.n`` equal to the newest stamp on an order.
"""

from __future__ import annotations

import json
import random
import signal
import threading
from datetime import datetime
from pathlib import Path

import psycopg
import pytest
import yaml
from deltalake import DeltaTable

from capture.slots import current_wal_lsn
from config import load_config
from daemon.cut import Cut, CutError, parse_point, take_cut
from daemon.wiring import prepare_configured_source
from decoder import format_lsn
from tests.support.harness import run_cli, start_daemon, wait_for_flush

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

SCHEMA = """
CREATE SCHEMA shop;
CREATE TABLE shop.orders (id int PRIMARY KEY, total bigint NOT NULL, tx bigint NOT NULL);
CREATE TABLE shop.order_lines (
    order_id int, line_no int, amount bigint NOT NULL, PRIMARY KEY (order_id, line_no)
);
CREATE TABLE shop.progress (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO shop.progress VALUES (1, 0);
"""
TABLES = ("shop.orders", "shop.order_lines", "shop.progress")


def write_config(dsn: str, tmp_path: Path) -> Path:
    path = tmp_path / "cut.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": dsn,
                    "slot": "w2d_cut",
                    "publication": "w2d_cut",
                    "tables": list(TABLES),
                    "status_interval": "1s",
                },
                "sink": {
                    "path": str(tmp_path / "lake"),
                    "batch": {"max_rows": 60, "max_age": "50ms"},
                    "history": ["shop.orders"],
                },
                "metrics": {"enabled": False},
                "logging": {"format": "json", "level": "warning"},
            }
        )
    )
    return path


class Shop:
    """The workload: each transaction keeps every order's total equal to its lines."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]], seed: int) -> None:
        self.conn = conn
        self.rng = random.Random(seed)
        self.next_order = 1
        self.orders: list[int] = []

    def transaction(self, lines: int | None = None) -> None:
        rng = self.rng
        with self.conn.transaction():
            n = self.conn.execute(
                "UPDATE shop.progress SET n = n + 1 WHERE id = 1 RETURNING n"
            ).fetchone()
            assert n is not None
            tx = n[0]
            if lines is not None or not self.orders or rng.random() < 0.4:
                order = self.next_order
                self.next_order += 1
                amounts = [rng.randint(1, 100) for _ in range(lines or rng.randint(1, 5))]
                self.conn.execute(
                    "INSERT INTO shop.orders VALUES (%s, %s, %s)", (order, sum(amounts), tx)
                )
                with self.conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO shop.order_lines VALUES (%s, %s, %s)",
                        [(order, i, a) for i, a in enumerate(amounts)],
                    )
                self.orders.append(order)
                return
            order = rng.choice(self.orders)
            choice = rng.random()
            if choice < 0.5:  # add a line
                amount = rng.randint(1, 100)
                self.conn.execute(
                    "INSERT INTO shop.order_lines SELECT %s, coalesce(max(line_no), -1) + 1, %s "
                    "FROM shop.order_lines WHERE order_id = %s",
                    (order, amount, order),
                )
                self.conn.execute(
                    "UPDATE shop.orders SET total = total + %s, tx = %s WHERE id = %s",
                    (amount, tx, order),
                )
            elif choice < 0.8:  # change every line's amount
                self.conn.execute(
                    "UPDATE shop.order_lines SET amount = amount + 1 WHERE order_id = %s", (order,)
                )
                self.conn.execute(
                    "UPDATE shop.orders o SET total = (SELECT sum(amount) FROM "
                    "shop.order_lines WHERE order_id = o.id), tx = %s WHERE id = %s",
                    (tx, order),
                )
            elif len(self.orders) > 1:  # delete the order with its lines; stamp another
                self.conn.execute("DELETE FROM shop.order_lines WHERE order_id = %s", (order,))
                self.conn.execute("DELETE FROM shop.orders WHERE id = %s", (order,))
                self.orders.remove(order)
                self.conn.execute(
                    "UPDATE shop.orders SET tx = %s WHERE id = %s", (tx, rng.choice(self.orders))
                )
            else:
                self.conn.execute("UPDATE shop.orders SET tx = %s WHERE id = %s", (tx, order))


def read_at(cut: Cut, name: str) -> list[dict[str, object]]:
    table = next(t for t in cut.tables if t.table == name)
    rows: list[dict[str, object]] = (
        DeltaTable(table.path, version=table.version).to_pyarrow_table().to_pylist()
    )
    return rows


def disagreements(cut: Cut) -> list[str]:
    """What the three tables at ``cut`` say that no transaction boundary could."""
    names = {t.table for t in cut.tables}
    if not set(TABLES) <= names:
        return []  # a table not written yet: nothing to compare
    orders = {r["id"]: r for r in read_at(cut, "shop.orders")}
    sums: dict[object, int] = {}
    for line in read_at(cut, "shop.order_lines"):
        amount = line["amount"]
        assert isinstance(amount, int)
        sums[line["order_id"]] = sums.get(line["order_id"], 0) + amount
    (progress,) = read_at(cut, "shop.progress")
    found = [
        f"order {i}: total {o['total']} but lines sum to {sums.get(i, 0)}"
        for i, o in orders.items()
        if o["total"] != sums.get(i, 0)
    ]
    found += [f"lines of order {i} without the order" for i in sums.keys() - orders.keys()]
    # Every transaction stamps an order with its number: the newest stamp is progress.
    newest = max((int(str(o["tx"])) for o in orders.values()), default=0)
    if progress["n"] != newest:
        found.append(f"progress is {progress['n']} but the newest order stamp is {newest}")
    return [f"cut {cut.lsn} (batch {cut.batch}): {f}" for f in found]


def test_cuts_taken_while_the_daemon_runs_never_see_tables_disagree(
    pg18_dsn: str, tmp_path: Path
) -> None:
    config_path = write_config(pg18_dsn, tmp_path)
    config = load_config(str(config_path))
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    prepare_configured_source(config)  # the slot exists before the workload starts
    daemon = start_daemon(config_path, tmp_path / "daemon.log")
    cuts: list[Cut] = []
    problems: list[str] = []
    stop = threading.Event()

    def take_cuts() -> None:
        while not stop.is_set():
            try:
                cut = take_cut(config)
            except CutError:
                continue  # nothing recorded yet
            if not cuts or cut.batch != cuts[-1].batch:
                cuts.append(cut)
                problems.extend(disagreements(cut))

    reader = threading.Thread(target=take_cuts)
    reader.start()
    try:
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            shop = Shop(conn, seed=7)
            for round_number in range(30):
                for _ in range(10):
                    shop.transaction()
                if round_number % 10 == 5:
                    # A transaction larger than a batch: split across batches that end
                    # inside it.
                    shop.transaction(lines=200)
                # Let the daemon catch up now and then, so that it applies many batches.
                wait_for_flush(pg18_dsn, "w2d_cut", current_wal_lsn(conn))
            end = current_wal_lsn(conn)
        wait_for_flush(pg18_dsn, "w2d_cut", end)
    finally:
        stop.set()
        reader.join()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    final = take_cut(config)
    problems.extend(disagreements(final))
    assert not problems, "\n".join(problems[:20])
    assert len(cuts) >= 20, f"only {len(cuts)} distinct cuts were taken while the daemon ran"
    assert all(set(TABLES) <= {t.table for t in cut.tables} for cut in cuts[-5:])
    # The final cut is the source as it is now.
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT n FROM shop.progress").fetchone()
    assert row is not None
    assert read_at(final, "shop.progress")[0]["n"] == row[0] == 303


def boundaries(lake: Path) -> list[dict[str, object]]:
    """The commit log's boundaries, one per batch, in batch order."""
    rows = DeltaTable(str(lake / "_wal2delta_commits")).to_pyarrow_table().to_pylist()
    seen = {int(str(r["batch"])): r for r in rows if r["lsn"] is not None}
    return [seen[b] for b in sorted(seen)]


def cut_json(config_path: Path, *at: str) -> dict[str, object]:
    result = run_cli("cut", "-c", str(config_path), *at, "--json")
    assert result.returncode == 0, result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


def test_cut_at_an_lsn_or_a_time_takes_the_newest_boundary_at_or_before_it(
    pg18_dsn: str, tmp_path: Path
) -> None:
    config_path = write_config(pg18_dsn, tmp_path)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        prepare_configured_source(load_config(str(config_path)))
        daemon = start_daemon(config_path, tmp_path / "daemon.log")
        try:
            shop = Shop(conn, seed=3)
            for _ in range(6):
                for _ in range(5):
                    shop.transaction()
                end = current_wal_lsn(conn)
                wait_for_flush(pg18_dsn, "w2d_cut", end)  # several batches, apart in time
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)
    marks = boundaries(tmp_path / "lake")
    assert len(marks) >= 4
    config = load_config(str(config_path))
    for mark in marks[1:]:
        lsn = int(str(mark["lsn"]))
        batch = int(str(mark["batch"]))
        assert take_cut(config, parse_point(format_lsn(lsn))).batch == batch
        assert take_cut(config, parse_point(format_lsn(lsn - 1))).batch < batch
        moment = mark["commit_time"]
        assert isinstance(moment, datetime)
        at_time = take_cut(config, parse_point(moment.isoformat()))
        # Boundaries sharing this commit time: the cut takes the newest of them.
        assert at_time.batch >= batch
        assert at_time.lsn == format_lsn(
            max(int(str(m["lsn"])) for m in marks if m["commit_time"] <= moment)  # type: ignore[operator]
        )
    middle = marks[len(marks) // 2]
    exact = cut_json(config_path, "--at", format_lsn(int(str(middle["lsn"]))))
    assert exact["batch"] == middle["batch"]
    assert exact["lsn"] == format_lsn(int(str(middle["lsn"])))
    text = run_cli("cut", "-c", str(config_path))
    assert text.returncode == 0, text.stderr
    assert "VERSION AS OF" in text.stdout
    assert "DeltaTable(" in text.stdout
    too_early = run_cli("cut", "-c", str(config_path), "--at", "0/1")
    assert too_early.returncode == 1
    assert "no transaction boundary at or before LSN 0/1" in too_early.stderr
