"""``wal2delta status`` with several daemons per source: it warns about a published table
another pgoutput slot of the database streams, or may stream (``capture.overlaps``).

Two configurations, each with its own slot and publication, run against one PostgreSQL 18
database; ``status`` runs as an operator runs it (the CLI, in a child process). The other
daemon's walsender is a replication connection named ``wal2delta`` streaming its slot with
its publication, as the daemon's own (``ReplicationStream``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from capture.overlaps import publication_names_of
from capture.stream import ReplicationStream
from tests.support.harness import ROOT, child_environment, run_cli, wait_until

pytestmark = [pytest.mark.integration]

CLI = (sys.executable, "-m", "daemon.cli")

SCHEMA = """
CREATE TABLE public.orders (id int PRIMARY KEY);
CREATE TABLE public.customers (id int PRIMARY KEY);
CREATE TABLE public.shared (id int PRIMARY KEY);
SELECT pg_create_logical_replication_slot('w2d_a', 'pgoutput');
SELECT pg_create_logical_replication_slot('w2d_b', 'pgoutput');
"""


def _config(tmp_path: Path, dsn: str, name: str, publication: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": dsn,
                    "slot": f"w2d_{name}",
                    "publication": publication,
                    "create_publication": False,
                },
                "sink": {"path": str(tmp_path / f"lake_{name}")},
                "metrics": {"enabled": False},
            }
        )
    )
    return path


def _status(config: Path) -> tuple[dict[str, Any], str]:
    as_json = run_cli("status", "-c", str(config), "--json")
    assert as_json.returncode == 0, as_json.stderr
    human = run_cli("status", "-c", str(config))
    assert human.returncode == 0, human.stderr
    return json.loads(as_json.stdout), human.stdout


def _warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("warning:")]


@contextmanager
def _streaming(
    dsn: str, slot: str, publications: str, *, application_name: str = "wal2delta"
) -> Iterator[None]:
    """A walsender streaming ``slot`` with ``publications`` while the block runs."""
    conn = psycopg.connect(
        dsn, replication="database", autocommit=True, application_name=application_name
    )
    stream = ReplicationStream(conn)
    try:
        stream.start(slot, 0, {"proto_version": "1", "publication_names": publications})

        wait_until(lambda: _active(dsn, slot), 10, f"slot {slot} to be streamed")
        yield
    finally:
        stream.close()


def _active(dsn: str, slot: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as check:
        row = check.execute(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    return row is not None and row[0] is not None


@pytest.fixture
def dsn(pg18_dsn: str) -> str:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        for statement in SCHEMA.strip().splitlines():
            conn.execute(statement.encode())
    return pg18_dsn


def test_a_table_two_publications_share_is_named_with_publications_and_slots(
    dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE PUBLICATION pub_a FOR TABLE public.orders, public.shared")
        conn.execute("CREATE PUBLICATION pub_b FOR TABLE public.customers, public.shared")
    config_a = _config(tmp_path, dsn, "a", "pub_a")

    # Both slots idle: the server cannot say which publication w2d_b is streamed with.
    status, text = _status(config_a)
    assert status["overlaps"] == [
        {
            "table": "public.shared",
            "publications": ["pub_a", "pub_b"],
            "slots": ["w2d_a", "w2d_b"],
            "confirmed_slots": [],
        }
    ]
    [warning] = _warnings(text)
    for name in ("public.shared", "pub_a", "pub_b", "w2d_a", "w2d_b"):
        assert name in warning
    assert "public.orders" not in warning

    # The other daemon streams w2d_b with pub_b: confirmed, from its START_REPLICATION.
    with _streaming(dsn, "w2d_b", '"pub_b"'):
        status, text = _status(config_a)
    assert status["overlaps"] == [
        {
            "table": "public.shared",
            "publications": ["pub_a", "pub_b"],
            "slots": ["w2d_a", "w2d_b"],
            "confirmed_slots": ["w2d_b"],
        }
    ]
    [warning] = _warnings(text)
    assert "also streamed by another wal2delta, from slot w2d_b" in warning


def test_a_running_daemon_on_a_publication_sharing_a_table_is_confirmed(
    dsn: str, tmp_path: Path
) -> None:
    """The other daemon is a real one (``wal2delta capture``: the daemon's start-up and
    stream, recording instead of writing Delta), on a slot it creates itself."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE PUBLICATION pub_a FOR TABLE public.orders, public.shared")
        conn.execute("CREATE PUBLICATION pub_c FOR TABLE public.customers, public.shared")
    config_a = _config(tmp_path, dsn, "a", "pub_a")
    config_c = _config(tmp_path, dsn, "c", "pub_c")
    log = tmp_path / "c.log"
    with log.open("ab") as stderr:
        other = subprocess.Popen(
            [*CLI, "capture", "-c", str(config_c), "-o", str(tmp_path / "rec")],
            cwd=ROOT,
            env=child_environment(),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        wait_until(lambda: _active(dsn, "w2d_c"), 120, "the other daemon to stream w2d_c")
        status, text = _status(config_a)
    finally:
        other.send_signal(signal.SIGTERM)
        other.wait(60)
    assert status["overlaps"] == [
        {
            "table": "public.shared",
            "publications": ["pub_a", "pub_c"],
            "slots": ["w2d_a", "w2d_b", "w2d_c"],
            "confirmed_slots": ["w2d_c"],
        }
    ], log.read_text()
    [warning] = _warnings(text)
    assert "also streamed by another wal2delta, from slot w2d_c" in warning


def test_disjoint_publications_give_no_warning(dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE PUBLICATION pub_a FOR TABLE public.orders, public.shared")
        conn.execute("CREATE PUBLICATION pub_b FOR TABLE public.customers")
    config_a = _config(tmp_path, dsn, "a", "pub_a")
    config_b = _config(tmp_path, dsn, "b", "pub_b")
    status, text = _status(config_a)
    assert (status["overlaps"], _warnings(text)) == ([], [])
    with _streaming(dsn, "w2d_b", '"pub_b"'):
        status, text = _status(config_a)
        assert (status["overlaps"], _warnings(text)) == ([], [])
        status, text = _status(config_b)
        assert (status["overlaps"], _warnings(text)) == ([], [])


def test_a_second_daemon_streaming_our_own_publication_is_confirmed(
    dsn: str, tmp_path: Path
) -> None:
    """The same publication in two configurations: only a streaming walsender shows it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE PUBLICATION pub_a FOR TABLE public.orders, public.shared")
    config_a = _config(tmp_path, dsn, "a", "pub_a")
    status, _ = _status(config_a)
    assert status["overlaps"] == []  # an idle w2d_b: what it streams is not recorded
    with _streaming(dsn, "w2d_b", '"pub_a"'):
        status, text = _status(config_a)
    assert [o["table"] for o in status["overlaps"]] == ["public.orders", "public.shared"]
    assert all(o["confirmed_slots"] == ["w2d_b"] for o in status["overlaps"])
    assert len(_warnings(text)) == 2


def test_another_tools_walsender_is_not_a_wal2delta_overlap(dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE PUBLICATION pub_a FOR TABLE public.orders, public.shared")
        conn.execute("CREATE PUBLICATION pub_b FOR TABLE public.shared")
    config_a = _config(tmp_path, dsn, "a", "pub_a")
    with _streaming(dsn, "w2d_b", '"pub_b"', application_name="other_subscriber"):
        status, text = _status(config_a)
    assert (status["overlaps"], _warnings(text)) == ([], [])


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            'START_REPLICATION SLOT "s" LOGICAL 0/0 ("proto_version" \'4\', '
            '"publication_names" \'"a","it\'\'s", Big\')',
            ("a", "it's", "big"),
        ),
        ("START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '1', publication_names 'p')", ("p",)),
        ("IDENTIFY_SYSTEM", None),
        ("<insufficient privilege>", None),
        (None, None),
    ],
)
def test_publication_names_of_a_start_replication_command(
    command: str | None, expected: tuple[str, ...] | None
) -> None:
    assert publication_names_of(command) == expected
