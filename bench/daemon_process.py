"""``wal2delta run --endpos`` in a child process: its wall time, peak RSS and milestones.

The daemon runs as it is deployed: the ``wal2delta run`` command (``python -m daemon.cli``)
with a YAML configuration file, in a process of its own, logging JSON at ``info`` (one line
per batch, as in production). The child's embedded Sail engine runs in that process too.

* Peak RSS and CPU time are the child's own, from ``os.wait4`` (``ru_maxrss``: the
  interpreter, the decoder, Sail and whatever they allocated, over the whole run).
* Milestones come from the timestamps of its log lines: ``starting`` (configuration
  loaded), ``replication started`` (the engine is up, the source was checked and the slot
  streams) and the first and last ``batch applied``. Times are UNIX seconds, comparable
  with ``ChildRun.started_at`` (taken just before the process was started).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final

import yaml

from decoder import Lsn, format_lsn

ROOT: Final = Path(__file__).resolve().parents[1]
STARTING: Final = "starting"
STREAMING: Final = "replication started"
BATCH_APPLIED: Final = "batch applied"
_MILESTONES: Final = frozenset({STARTING, STREAMING, BATCH_APPLIED})
_TAIL_LINES: Final = 60


@dataclass(slots=True)
class DaemonLog:
    """The milestones of a JSON log, read line by line, and its last lines."""

    first: dict[str, float] = field(default_factory=dict)
    """Event -> UNIX time of its first line."""
    last: dict[str, float] = field(default_factory=dict)
    """Event -> UNIX time of its last line."""
    batches: int = 0
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=_TAIL_LINES))

    def read(self, lines: Iterable[str]) -> None:
        """Take every line of ``lines`` (a child's output) until it ends."""
        for line in lines:
            self.tail.append(line.rstrip("\n"))
            try:
                record = json.loads(line)
            except ValueError:
                continue  # not a log record (a traceback before logging was set up)
            event = record.get("event") if isinstance(record, dict) else None
            if event not in _MILESTONES or "timestamp" not in record:
                continue
            at = datetime.fromisoformat(str(record["timestamp"])).timestamp()
            self.first.setdefault(event, at)
            self.last[event] = at
            if event == BATCH_APPLIED:
                self.batches += 1


@dataclass(frozen=True, slots=True)
class ChildRun:
    """Figures of one ``wal2delta run`` process."""

    started_at: float
    """UNIX time just before the process was started."""
    wall_seconds: float
    peak_rss_kib: int
    cpu_seconds: float
    """User and system CPU time of the child (every thread, Sail's included)."""
    log: DaemonLog

    def since_start(self, event: str) -> float:
        """Seconds from the process start to the first line of ``event``."""
        return self.log.first[event] - self.started_at

    @property
    def streaming_seconds(self) -> float:
        """From ``replication started`` to the last ``batch applied``: the time it took to
        stream, decode and make durable what it read, without the process's start-up."""
        return self.log.last[BATCH_APPLIED] - self.log.first[STREAMING]


def run_wal2delta(
    document: Mapping[str, object],
    endpos: Lsn,
    workdir: Path,
    *,
    timeout: float,
    module: str = "daemon.cli",
    environment: Mapping[str, str] | None = None,
) -> ChildRun:
    """Run ``wal2delta run -c FILE --endpos END`` with ``document`` as FILE; wait for it.

    Args:
        document: the configuration (``bench.daemon.bench_config_document``); its logging
            section is replaced by JSON at ``info``.
        endpos: the ``--endpos`` position.
        workdir: where the configuration file is written.
        timeout: seconds before the child is killed.
        module: the module run as ``python -m MODULE run -c FILE --endpos END``: the
            ``wal2delta`` command, or a benchmark's wrapper of it (``bench.table_timings``).
        environment: more environment variables for the child.

    Raises:
        RuntimeError: the child exited non-zero (its last log lines are in the message),
            or never logged a batch.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "wal2delta.yaml"
    config_file.write_text(
        yaml.safe_dump({**document, "logging": {"format": "json", "level": "info"}})
    )
    command = [sys.executable, "-m", module, "run", "-c", str(config_file)]
    python_path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    # The engine's own log at warnings: at info, Sail logs every query.
    child_environment = {
        **os.environ,
        "PYTHONPATH": python_path,
        "RUST_LOG": "warn",
        **(environment or {}),
    }
    log = DaemonLog()
    started_at = time.time()
    child = subprocess.Popen(
        [*command, "--endpos", format_lsn(endpos)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=child_environment,
    )
    assert child.stdout is not None
    reader = threading.Thread(target=log.read, args=(child.stdout,), daemon=True)
    reader.start()
    killer = threading.Timer(timeout, child.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(child.pid, 0)
    finally:
        killer.cancel()
    wall = time.time() - started_at
    child.returncode = os.waitstatus_to_exitcode(status)
    reader.join(30)
    child.stdout.close()
    if child.returncode != 0 or BATCH_APPLIED not in log.first or STREAMING not in log.first:
        raise RuntimeError(
            f"wal2delta run exited with {child.returncode} after {wall:.1f} s "
            f"({log.batches} batches applied); its last lines:\n" + "\n".join(log.tail)
        )
    return ChildRun(
        started_at=started_at,
        wall_seconds=wall,
        peak_rss_kib=usage.ru_maxrss,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        log=log,
    )
