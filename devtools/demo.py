"""``wal2delta demo``: embedded PostgreSQL 18 + embedded Sail + a local Delta folder.

Starts a throw-away PostgreSQL with ``wal_level=logical``, creates the demo schema, starts
the real daemon (``run_service``) on a thread, runs a live workload while showing
progress, then stops the daemon at the WAL position the workload reached (``--endpos``
semantics) and ends with ``wal2delta verify`` (``daemon.verify_source``): every Delta
table compared with its source table, the demo's exit code its verdict - and one
``wal2delta cut``: the Delta version of every table at the last transaction boundary.
"""

from __future__ import annotations

import argparse
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

# Loading this module registers the command (the ``wal2delta.commands`` entry point) on
# every ``wal2delta --help``: the demo's own imports wait until it runs
# (docs/decisions/0119-*).
if TYPE_CHECKING:
    import psycopg

    from config import AppConfig
    from decoder import Lsn


def demo_config(dsn: str, lake: Path, spool: Path) -> AppConfig:
    """The configuration the demo runs the daemon with."""
    from config import parse_config  # noqa: PLC0415 - see the imports
    from devtools.workload import DEMO_TABLES  # noqa: PLC0415

    return parse_config(
        {
            "source": {
                "dsn": dsn,
                "slot": "wal2delta_demo",
                "publication": "wal2delta_demo",
                "tables": list(DEMO_TABLES),
            },
            "sink": {
                "path": str(lake),
                "spark": {"mode": "embedded"},
                "batch": {"max_rows": 5000, "max_age": "500ms"},
            },
            "spool": {"dir": str(spool)},
            "metrics": {"enabled": False},
            "logging": {"format": "console", "level": "warning"},
        }
    )


def _wait_for_flush(
    conn: psycopg.Connection[tuple[object, ...]], slot: str, target: Lsn, timeout: float
) -> bool:
    from decoder import format_lsn  # noqa: PLC0415 - see the imports

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (format_lsn(target), slot),
        ).fetchone()
        if row is not None and row[0]:
            return True
        time.sleep(0.5)
    return False


def register_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``wal2delta demo`` (the ``wal2delta.commands`` entry point, see ``daemon.cli``)."""
    demo = commands.add_parser(
        "demo", help="embedded PostgreSQL + Sail + local Delta folder, with a live workload"
    )
    demo.add_argument("--dir", default=".wal2delta-demo", help="working directory")
    demo.add_argument("--lake", default="lake", help="where the Delta tables land")
    demo.add_argument("--rounds", type=int, default=20, help="workload rounds")
    demo.add_argument("--keep", action="store_true", help="keep the PostgreSQL data directory")
    demo.set_defaults(func=_cmd_demo)


def _cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(
        workdir=Path(args.dir), lake=Path(args.lake), rounds=args.rounds, keep=args.keep
    )


def run_demo(*, workdir: Path, lake: Path, rounds: int, keep: bool) -> int:
    """Run the demo; return 0 when every Delta table matches its source table."""
    import psycopg  # noqa: PLC0415 - see the imports

    from capture import current_wal_lsn  # noqa: PLC0415
    from daemon import (  # noqa: PLC0415
        configure_engine_logging,
        configure_logging,
        prepare_configured_source,
        render_cut,
        render_report,
        run_service,
        take_cut,
        verify_source,
    )
    from decoder import format_lsn  # noqa: PLC0415
    from devtools.pgserver import LocalPostgres  # noqa: PLC0415
    from devtools.workload import Workload, create_schema  # noqa: PLC0415

    configure_logging("console", "warning")
    configure_engine_logging("error")  # before Sail starts: it reads RUST_LOG once
    workdir = workdir.resolve()
    lake = lake.resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    if lake.exists():
        shutil.rmtree(lake)
    workdir.mkdir(parents=True)
    print(f"wal2delta demo: PostgreSQL in {workdir}, Delta tables in {lake}")
    server = LocalPostgres(workdir / "pgdata")
    server.init()
    server.start()
    try:
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            print(f"PostgreSQL {server.version()} started on port {server.port}")
            create_schema(conn)
            config = demo_config(dsn, lake, workdir / "spool")
            # Slot and publication exist before the first change, so nothing is missed.
            prepare_configured_source(config)
            stop = threading.Event()
            result: dict[str, int] = {}
            daemon = threading.Thread(
                target=lambda: result.setdefault(
                    "code", run_service(config, stop_event=stop, install_signal_handlers=False)
                ),
                name="wal2delta-daemon",
            )
            daemon.start()
            print("daemon started (embedded Sail Spark session); running the workload...")
            workload = Workload(seed=7)
            for number in range(1, rounds + 1):
                workload.run_round(conn)
                if number % 5 == 0 or number == rounds:
                    print(
                        f"  round {number}/{rounds}: {workload.committed} transactions committed, "
                        f"{workload.rolled_back} rolled back"
                    )
            endpos = current_wal_lsn(conn)
            print(f"workload done at WAL {format_lsn(endpos)}; waiting for Delta to catch up...")
            caught_up = _wait_for_flush(conn, config.source.slot, endpos, timeout=600)
            stop.set()
            daemon.join()
            if not caught_up or result.get("code", 1) != 0:
                print("the daemon did not catch up; see the log above")
                return 1
            print("\nwal2delta verify:")
            report = verify_source(config, wait=30)
            print(render_report(report, as_json=False))
            print("\nwal2delta cut (every table at the last transaction boundary):")
            print(render_cut(take_cut(config)))
            return report.exit_code
    finally:
        if keep:
            server.stop()
        else:
            server.destroy()
