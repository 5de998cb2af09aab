"""``wal2delta capture`` records the raw stream; ``wal2delta decode`` prints it as JSON lines.

Also covers replication origins: the Origin message is kept on the transaction, and
``origin: none`` (PostgreSQL 16 and newer; run on 16 and 18) makes the server leave out
changes that came from another origin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from capture.slots import current_wal_lsn
from daemon.recording import RECORD_HEADER, read_records
from decoder import format_lsn, parse_lsn
from tests.support.harness import run_cli

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = """
CREATE TABLE public.docs (id int PRIMARY KEY, title text, body text);
ALTER TABLE public.docs ALTER COLUMN body SET STORAGE EXTERNAL;
"""


def _write_config(path: Path, dsn: str, lake: Path, **source: Any) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": dsn,
                    "slot": "w2d_record",
                    "publication": "w2d_record",
                    "tables": ["public.docs"],
                    "two_phase": True,
                    "messages": True,
                    **source,
                },
                "sink": {"path": str(lake)},
                "metrics": {"enabled": False},
                "logging": {"format": "json", "level": "warning"},
            }
        )
    )
    return path


def _workload(dsn: str, origin: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO docs VALUES (1, 'a', repeat(md5('x'), 400))")
        conn.execute("UPDATE docs SET title = 'b' WHERE id = 1")
        conn.execute("SELECT pg_logical_emit_message(false, 'w2d', 'hello')")
        conn.execute("BEGIN")
        conn.execute("INSERT INTO docs VALUES (2, 'prepared', NULL)")
        conn.execute("PREPARE TRANSACTION 'w2d_gid'")
        conn.execute("COMMIT PREPARED 'w2d_gid'")
        conn.execute("BEGIN")
        conn.execute("INSERT INTO docs VALUES (3, 'never', NULL)")
        conn.execute("PREPARE TRANSACTION 'w2d_gone'")
        conn.execute("ROLLBACK PREPARED 'w2d_gone'")
        conn.execute("SELECT pg_replication_origin_create(%s)", (origin,))
        conn.execute("SELECT pg_replication_origin_session_setup(%s)", (origin,))
        conn.execute("INSERT INTO docs VALUES (4, 'from upstream', NULL)")
        conn.execute("SELECT pg_replication_origin_session_reset()")
        conn.execute("DELETE FROM docs WHERE id = 1")
        return format_lsn(current_wal_lsn(conn))


def _record_and_decode(
    dsn: str, tmp_path: Path, origin_name: str, **source: Any
) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    config = _write_config(tmp_path / "source.yaml", dsn, tmp_path / "lake", **source)
    created = run_cli(
        "capture", "-c", str(config), "-o", str(tmp_path / "empty.rec"), "--endpos", "0/1"
    )
    assert created.returncode == 0, created.stderr
    endpos = _workload(dsn, origin_name)
    recording = tmp_path / "stream.rec"
    captured = run_cli("capture", "-c", str(config), "-o", str(recording), "--endpos", endpos)
    assert captured.returncode == 0, captured.stderr
    records = list(read_records(recording))
    assert records
    assert recording.stat().st_size == sum(RECORD_HEADER.size + len(p) for _, p in records)
    decoded = run_cli("decode", str(recording), "--proto", "4")
    assert decoded.returncode == 0, decoded.stderr
    return [json.loads(line) for line in decoded.stdout.splitlines()]


def test_capture_then_decode_prints_every_transaction_kind(pg18_dsn: str, tmp_path: Path) -> None:
    events = _record_and_decode(pg18_dsn, tmp_path, "upstream_x")
    kinds = [e["kind"] for e in events]
    assert kinds == [
        "commit",
        "commit",
        "message",
        "commit_prepared",
        "rollback_prepared",
        "commit",
        "commit",
    ]
    insert, update, message, prepared, rolled_back, from_origin, delete = events
    assert insert["changes"][0]["op"] == "insert"
    assert update["changes"][0]["new"]["body"] == {"unchanged_toast": True}
    assert update["changes"][0]["new"]["title"] == "b"
    assert message["prefix"] == "w2d"
    assert message["content"] == "hello"
    assert prepared["gid"] == "w2d_gid"
    assert prepared["changes"][0]["new"] == {"id": "2", "title": "prepared", "body": None}
    assert rolled_back["gid"] == "w2d_gone"
    assert from_origin["origin"] == "upstream_x"
    assert delete["changes"] == [
        {
            "schema": "public",
            "table": "docs",
            "op": "delete",
            "new": None,
            "key": {"id": "1", "title": None, "body": None},
        }
    ]
    for event in events:
        if "commit_lsn" in event:
            assert parse_lsn(event["commit_lsn"]) < parse_lsn(event["end_lsn"])


# 16 is the first version with the option; 17 adds nothing to it (kept short).
@pytest.mark.parametrize("server", ["pg18", "pg16"])
def test_origin_none_leaves_out_changes_from_other_origins(
    server: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    events = _record_and_decode(dsn, tmp_path, "upstream_y", origin="none")
    titles = [
        change["new"]["title"]
        for event in events
        for change in event.get("changes", [])
        if change.get("new")
    ]
    assert "from upstream" not in titles
    assert "prepared" in titles


def test_runs_taken_in_bulk_record_the_same_bytes_as_frames_fed_one_by_one(
    pg18_dsn: str, tmp_path: Path
) -> None:
    """The receive loop takes runs of row frames in C (``Session._on_frames``); without the
    kernel (``WAL2DELTA_PURE_PYTHON``) it feeds them one by one. Two slots at the same
    point, recorded both ways, give the same file."""
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    configs = {}
    for name in ("bulk", "one_by_one"):
        configs[name] = _write_config(
            tmp_path / f"{name}.yaml",
            pg18_dsn,
            tmp_path / "lake",
            slot=f"w2d_{name}",
            publication=f"w2d_{name}",
        )
        created = run_cli(
            "capture",
            "-c",
            str(configs[name]),
            "-o",
            str(tmp_path / "empty.rec"),
            "--endpos",
            "0/1",
        )
        assert created.returncode == 0, created.stderr
    with psycopg.connect(pg18_dsn) as conn:
        for round_ in range(3):
            with conn.transaction():
                for key in range(300):
                    conn.execute(
                        "INSERT INTO docs VALUES (%s, %s, NULL)", (round_ * 1000 + key, "t")
                    )
                conn.execute("UPDATE docs SET title = 'u' WHERE id % 7 = 0")
                conn.execute("SELECT pg_logical_emit_message(true, 'w2d', 'mid')")
                conn.execute("DELETE FROM docs WHERE id % 11 = 0")
        endpos = format_lsn(current_wal_lsn(conn))
    recordings = {}
    for name, env in (("bulk", {}), ("one_by_one", {"WAL2DELTA_PURE_PYTHON": "1"})):
        recordings[name] = tmp_path / f"{name}.rec"
        captured = run_cli(
            "capture",
            "-c",
            str(configs[name]),
            "-o",
            str(recordings[name]),
            "--endpos",
            endpos,
            **env,
        )
        assert captured.returncode == 0, captured.stderr
    records = list(read_records(recordings["bulk"]))
    assert len(records) > 3 * 300  # every row message, plus BEGIN, COMMIT and the rest
    assert recordings["bulk"].read_bytes() == recordings["one_by_one"].read_bytes()
