"""Record real pgoutput bytes from real servers into the golden fixtures of the decoder tests.

Usage (from the repository root, with the project's virtualenv)::

    python -m tests.golden.harvest            # PostgreSQL 14 to 18 (see devtools.pgserver)
    python -m tests.golden.harvest --only 18  # one server

What it does: starts a throw-away server with ``devtools.pgserver.LocalPostgres``, creates
one logical slot per option set (two-phase slots with ``two_phase => true``), runs each
workload below, and after every workload reads what each slot produced with
``pg_logical_slot_get_binary_changes(slot, NULL, NULL, <pgoutput options>)``. That SQL
interface runs pgoutput in the calling session, so the session settings decide when
transactions are streamed: ``logical_decoding_work_mem = 64kB`` everywhere, and on
PostgreSQL 16+ ``debug_logical_replication_streaming = immediate`` for the option sets
marked ``immediate`` (every change is streamed at once, so even small transactions
produce stream blocks). Each message's bytes are the XLogData payload the walsender would
send.

The output is one JSON file per server and option set, ``pg<major>_<name>.json``, holding
the server version, the options, the slot, the SQL of every workload and its session
settings, and every message as an ``[lsn, xid, hex]`` triple (the LSN and xid the function
reported, the payload in hex). The files are committed, so the tests need
no server; run this script again after changing a workload and commit the result.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from devtools.pgserver import (
    LOGICAL_REPLICATION_SETTINGS,
    SUPPORTED_MAJORS,
    LocalPostgres,
    embedded_bin_dir,
    postgres_bin,
)

GOLDEN_DIR = Path(__file__).resolve().parent
PUBLICATION = "golden_pub"


@dataclass(frozen=True)
class OptionSet:
    """One slot and the pgoutput options its changes are read with."""

    name: str
    proto_version: int
    streaming: str = "off"
    two_phase: bool = False
    binary: bool = False
    immediate: bool = False  # debug_logical_replication_streaming = immediate (PG16+)
    min_major: int = 15

    @property
    def slot(self) -> str:
        return "golden_" + self.name.replace("-", "_")

    def sql_options(self) -> list[str]:
        options = [
            "proto_version",
            str(self.proto_version),
            "publication_names",
            PUBLICATION,
            "messages",
            "true",
        ]
        if self.streaming != "off":
            options += ["streaming", self.streaming]
        if self.two_phase:
            options += ["two_phase", "true"]
        if self.binary:
            options += ["binary", "true"]
        return options

    def decoder_options(self) -> dict[str, Any]:
        return {
            "proto_version": self.proto_version,
            "streaming": self.streaming,
            "two_phase": self.two_phase,
            "binary": self.binary,
            "messages": True,
        }


OPTION_SETS: Sequence[OptionSet] = (
    OptionSet("v1-text", 1, min_major=14),
    OptionSet("v1-binary", 1, binary=True, min_major=14),
    OptionSet("v2-stream", 2, streaming="on", immediate=True, min_major=14),
    OptionSet("v3-twophase", 3, two_phase=True),
    OptionSet("v3-stream-twophase", 3, streaming="on", two_phase=True, immediate=True),
    OptionSet(
        "v4-parallel-twophase",
        4,
        streaming="parallel",
        two_phase=True,
        immediate=True,
        min_major=16,
    ),
    OptionSet("v4-parallel-binary", 4, streaming="parallel", binary=True, min_major=16),
    OptionSet("v4-twophase", 4, two_phase=True, min_major=16),
)

# Each workload is a list of statements run on one autocommit connection, so explicit
# BEGIN ... COMMIT blocks are transactions. The tests know these values; keep them in step
# with tests/unit/decoder/test_golden_*.py.
SETUP = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    """CREATE TABLE typed (
        id int PRIMARY KEY,
        name text,
        amount numeric(10, 2),
        at timestamptz,
        doc jsonb,
        span interval,
        raw bytea,
        flag boolean,
        ratio float8,
        tags int8[],
        uid uuid,
        day date,
        feeling mood
    )""",
    "CREATE TABLE full_ident (id int, note text)",
    "ALTER TABLE full_ident REPLICA IDENTITY FULL",
    "CREATE TABLE toasty (id int PRIMARY KEY, counter int, big text)",
    "ALTER TABLE toasty ALTER COLUMN big SET STORAGE EXTERNAL",
    "CREATE TABLE plain (id int PRIMARY KEY, note text)",
    f"CREATE PUBLICATION {PUBLICATION} FOR ALL TABLES",
]

# A TOASTed value: 4000 bytes stored out of line uncompressed (STORAGE EXTERNAL).
BIG_TEXT_SQL = "repeat('0123456789abcdef', 250)"

WORKLOADS: dict[str, list[str]] = {
    "dml": [
        "BEGIN",
        "INSERT INTO typed VALUES (1, 'alpha', 12.50, '2024-02-29 13:14:15.123456+00', "
        "'{\"b\": [1, 2], \"a\": null}', '1 year 2 mons 3 days 04:05:06.5', '\\x00ff10', "
        "true, 1.5, '{1,-2,3}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-01-31', "
        "'happy')",
        "INSERT INTO typed (id, name, span) VALUES (2, NULL, '-1 mons +1 day -00:00:01.5')",
        "COMMIT",
        "UPDATE typed SET name = 'beta' WHERE id = 1",
        "UPDATE typed SET id = 3 WHERE id = 2",
        "DELETE FROM typed WHERE id = 3",
        "INSERT INTO full_ident VALUES (1, 'one'), (2, 'two')",
        "UPDATE full_ident SET note = 'uno' WHERE id = 1",
        "DELETE FROM full_ident WHERE id = 2",
        f"INSERT INTO toasty VALUES (1, 0, {BIG_TEXT_SQL})",
        "UPDATE toasty SET counter = counter + 1 WHERE id = 1",
        "TRUNCATE plain, full_ident RESTART IDENTITY CASCADE",
    ],
    "messages": [
        "SELECT pg_logical_emit_message(false, 'golden', 'outside')",
        "BEGIN",
        "INSERT INTO plain VALUES (10, 'with message')",
        "SELECT pg_logical_emit_message(true, 'golden', 'inside'::bytea)",
        "COMMIT",
    ],
    "subxact_abort": [
        "BEGIN",
        "INSERT INTO plain VALUES (20, 'kept before')",
        "SAVEPOINT s1",
        "INSERT INTO plain VALUES (21, 'rolled back')",
        "ROLLBACK TO SAVEPOINT s1",
        "SAVEPOINT s2",
        "INSERT INTO plain VALUES (22, 'released')",
        "RELEASE SAVEPOINT s2",
        "INSERT INTO plain VALUES (23, 'kept after')",
        "COMMIT",
    ],
    "ddl_in_aborted_subxact": [
        "BEGIN",
        "INSERT INTO plain VALUES (30, 'before ddl')",
        "SAVEPOINT s1",
        "ALTER TABLE plain ADD COLUMN extra int",
        "INSERT INTO plain VALUES (31, 'with extra', 7)",
        "ROLLBACK TO SAVEPOINT s1",
        "INSERT INTO plain VALUES (32, 'after rollback')",
        "COMMIT",
    ],
    "aborted": [
        "BEGIN",
        "INSERT INTO plain VALUES (40, 'never committed')",
        "INSERT INTO plain VALUES (41, 'never committed')",
        "ROLLBACK",
    ],
    "two_phase": [
        "BEGIN",
        "INSERT INTO plain VALUES (50, 'prepared then committed')",
        "PREPARE TRANSACTION 'golden_commit'",
        "COMMIT PREPARED 'golden_commit'",
        "BEGIN",
        "INSERT INTO plain VALUES (51, 'prepared then rolled back')",
        "PREPARE TRANSACTION 'golden_rollback'",
        "ROLLBACK PREPARED 'golden_rollback'",
    ],
    "origin": [
        "SELECT pg_replication_origin_create('golden_origin')",
        "SELECT pg_replication_origin_session_setup('golden_origin')",
        "BEGIN",
        "SELECT pg_replication_origin_xact_setup('0/ABCDEF', '2024-01-01 00:00:00+00')",
        "INSERT INTO plain VALUES (60, 'from elsewhere')",
        "COMMIT",
        "SELECT pg_replication_origin_session_reset()",
    ],
    # Larger than logical_decoding_work_mem (64kB), so it is streamed without the debug
    # setting too (it is read with "buffered" everywhere). Recorded for streaming option
    # sets only: elsewhere it is one long BEGIN ... COMMIT and adds nothing. Prepared, so
    # two-phase slots end it with STREAM PREPARE (PostgreSQL 15 included) and the others
    # stream it when COMMIT PREPARED is decoded.
    "large": [
        "BEGIN",
        "INSERT INTO plain SELECT g, NULL FROM generate_series(1000, 1399) AS g",
        "SAVEPOINT s1",
        "INSERT INTO plain SELECT g, NULL FROM generate_series(2000, 2299) AS g",
        "ROLLBACK TO SAVEPOINT s1",
        "INSERT INTO plain VALUES (1400, 'last')",
        "PREPARE TRANSACTION 'golden_large'",
        "COMMIT PREPARED 'golden_large'",
    ],
}
LARGE_WORKLOADS = frozenset({"large"})


def _server(data_dir: Path, major: int) -> LocalPostgres:
    settings = dict(LOGICAL_REPLICATION_SETTINGS)
    settings["logical_decoding_work_mem"] = "64kB"
    return LocalPostgres(data_dir, bin_dir=postgres_bin(major), settings=settings)


def harvest(major: int, out_dir: Path) -> list[Path]:
    """Run every workload on one server version and write its fixture files."""
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="wal2delta-golden-") as tmp:
        server = _server(Path(tmp) / "data", major)
        server.init()
        server.start()
        try:
            with psycopg.connect(server.dsn(), autocommit=True) as conn:
                version = conn.execute("SHOW server_version").fetchone()
                version_num = conn.execute("SHOW server_version_num").fetchone()
                assert version is not None
                assert version_num is not None
                for statement in SETUP:
                    conn.execute(statement)
                option_sets = [o for o in OPTION_SETS if major >= o.min_major]
                for option_set in option_sets:
                    conn.execute(
                        "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                        (option_set.slot, option_set.two_phase),
                    )
                captured: dict[str, list[dict[str, Any]]] = {o.name: [] for o in option_sets}
                for workload, statements in WORKLOADS.items():
                    with psycopg.connect(server.dsn(), autocommit=True) as work:
                        for statement in statements:
                            work.execute(statement)
                    large = workload in LARGE_WORKLOADS
                    for option_set in option_sets:
                        messages = _read_slot(conn, option_set, major, large=large)
                        if large and option_set.streaming == "off":
                            continue
                        captured[option_set.name].append(
                            {
                                "workload": workload,
                                "session_settings": _session_settings(option_set, major, large),
                                "sql": statements,
                                "messages": messages,
                            }
                        )
            for option_set in option_sets:
                path = out_dir / f"pg{major}_{option_set.name}.json"
                document = {
                    "generated_by": "python -m tests.golden.harvest",
                    "server_version": version[0],
                    "server_version_num": int(version_num[0]),
                    "slot": option_set.slot,
                    "slot_two_phase": option_set.two_phase,
                    "sql_options": option_set.sql_options(),
                    "options": option_set.decoder_options(),
                    "setup": SETUP,
                    "workloads": captured[option_set.name],
                }
                path.write_text(_dump(document))
                written.append(path)
        finally:
            server.destroy()
    return written


def _session_settings(option_set: OptionSet, major: int, large: bool) -> dict[str, str]:
    settings = {"logical_decoding_work_mem": "64kB"}
    if major >= 16:
        streaming = "immediate" if option_set.immediate and not large else "buffered"
        settings["debug_logical_replication_streaming"] = streaming
    return settings


def _read_slot(
    conn: psycopg.Connection[Any], option_set: OptionSet, major: int, *, large: bool
) -> list[list[Any]]:
    """Consume what the slot produced: one ``[lsn, xid, hex]`` triple per message."""
    for name, value in _session_settings(option_set, major, large).items():
        conn.execute(f"SET {name} = '{value}'")
    options = option_set.sql_options()
    placeholders = ", ".join(["%s"] * len(options))
    rows = conn.execute(
        f"SELECT lsn::text, xid::text, data FROM pg_logical_slot_get_binary_changes("
        f"%s, NULL, NULL, {placeholders})",
        [option_set.slot, *options],
    ).fetchall()
    return [[lsn, int(xid), bytes(data).hex()] for lsn, xid, data in rows]


def _dump(document: dict[str, Any]) -> str:
    """JSON with one message triple per line: readable diffs without indentation bloat."""
    triples: list[str] = []

    def placeholder(triple: list[Any]) -> str:
        triples.append(json.dumps(triple))
        return f"@@{len(triples) - 1}@@"

    for workload in document["workloads"]:
        workload["messages"] = [placeholder(triple) for triple in workload["messages"]]
    text = json.dumps(document, indent=1)
    for index, triple in enumerate(triples):
        text = text.replace(f'"@@{index}@@"', triple, 1)
    return text + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Harvest the fixtures; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=int, choices=SUPPORTED_MAJORS, help="one server version")
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR, help="output directory")
    args = parser.parse_args(argv)
    majors = [args.only] if args.only else sorted(SUPPORTED_MAJORS, reverse=True)
    for major in majors:
        bin_dir = embedded_bin_dir() if major == 18 else postgres_bin(major)
        if not (bin_dir / "postgres").exists():
            parser.error(
                f"PostgreSQL {major} is not installed in {bin_dir} (make pg15 pg-versions)"
            )
        for path in harvest(major, args.out):
            print(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
