"""Run the daemon's capture path (``daemon.Supervisor``) up to an end LSN, timed.

The service runs exactly as ``wal2delta run`` runs it (same loop, same decoder, same
batcher and sink worker thread) with two substitutions: the sink is ``CountingSink``, which
counts row changes and keeps nothing, and ``endpos`` stops the service once every
transaction committed up to the backlog's end is durable in that sink. What is measured
is therefore the receive + decode + assemble + batch path and nothing of Delta.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Required, TypedDict, Unpack

from config import AppConfig, parse_config
from daemon.gc_tuning import collector_paced_by_time
from daemon.logging import configure_logging
from daemon.supervisor import Supervisor
from decoder import Lsn, RowChange
from sink import Batch, BatchResult, Sink


class CountingSink:
    """A sink that counts row changes and batches, and keeps nothing."""

    def __init__(self) -> None:
        self.rows = 0
        self.batches = 0

    def apply(self, batch: Batch) -> BatchResult:
        """Count the batch's row changes; durable at once."""
        self.batches += 1
        self.rows += sum(1 for change in batch.changes if isinstance(change, RowChange))
        return BatchResult(rows_by_table={}, toast_anomalies=0, duration_seconds=0.0)

    def close(self) -> None:
        """Nothing to release."""


@dataclass(frozen=True, slots=True)
class DaemonRun:
    """Figures of one daemon run."""

    rows: int
    batches: int
    wall_seconds: float
    cpu_seconds: float
    """CPU time of this whole process (loop, sink worker and monitor threads)."""
    gc_seconds: float
    """Wall time spent in the cyclic garbage collector during the run."""


class ConfigOptions(TypedDict, total=False):
    """What ``bench_config`` and ``bench_config_document`` take besides the DSN and workdir."""

    slot: Required[str]
    """An existing slot (a fresh copy); the service must not create one."""
    publication: Required[str]
    """An existing publication."""
    tables: Required[list[str]]
    """``schema.table`` names the publication publishes."""
    spool_memory_limit: str | None
    """``spool.memory_limit``; the production default unless the benchmark is about
    spilling (and when None)."""
    max_rows: int | None
    """``sink.batch.max_rows``; the production default when None."""
    max_rows_ceiling: int | None
    """``sink.batch.max_rows_ceiling``; the production default when None."""
    max_bytes: str | None
    """``sink.batch.max_bytes``; the production default when None."""
    sink: Mapping[str, object]
    """More of the ``sink`` section, in YAML spelling (``{"concurrency": 2}``)."""


def bench_config_document(
    dsn: str, workdir: Path, **options: Unpack[ConfigOptions]
) -> dict[str, object]:
    """A daemon configuration that reads an existing slot and publication, as the document
    a YAML file for ``wal2delta run -c`` holds.

    ``workdir`` holds the lake (``workdir/lake``) and the spool directory; logging is set
    to warnings on the console, metrics are off.
    """
    batch = {
        name: options[name]
        for name in ("max_rows", "max_rows_ceiling", "max_bytes")
        if options.get(name) is not None
    }
    spool_memory_limit = options.get("spool_memory_limit")
    return {
        "source": {
            "dsn": dsn,
            "slot": options["slot"],
            "publication": options["publication"],
            "create_slot": False,
            "create_publication": False,
            "tables": options["tables"],
        },
        "sink": {"path": str(workdir / "lake"), "batch": batch, **options.get("sink", {})},
        "spool": {"dir": str(workdir / "spool")}
        | ({} if spool_memory_limit is None else {"memory_limit": spool_memory_limit}),
        "metrics": {"enabled": False},
        "logging": {"format": "console", "level": "warning"},
    }


def bench_config(dsn: str, workdir: Path, **options: Unpack[ConfigOptions]) -> AppConfig:
    """``bench_config_document`` parsed (``ConfigOptions`` says what it takes)."""
    return parse_config(bench_config_document(dsn, workdir, **options))


def run_daemon(
    config: AppConfig, endpos: Lsn, sink: Sink | None = None, *, tune_gc: bool = True
) -> DaemonRun:
    """Run ``daemon.Supervisor`` from the configured slot until ``endpos``; time it.

    Args:
        config: see ``bench_config``.
        endpos: stop once everything committed up to here is durable in the sink.
        sink: where the changes go; a ``CountingSink`` when None. ``rows`` and
            ``batches`` of the result are counted only by a ``CountingSink``.
        tune_gc: with the collector settings ``wal2delta run`` applies
            (``daemon.gc_tuning.collector_paced_by_time``).

    Logging is set to warnings only, as a production deployment at ``info`` logs one
    line per batch and nothing per change.
    """
    configure_logging("console", "warning")
    counting = CountingSink()
    service = Supervisor(config, sink if sink is not None else counting, endpos=endpos)
    tuned = collector_paced_by_time() if tune_gc else contextlib.nullcontext()
    with tuned, _GcTimer() as gc_timer:
        cpu_started = time.process_time()
        started = time.perf_counter()
        service.run()
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
    return DaemonRun(
        rows=counting.rows,
        batches=counting.batches,
        wall_seconds=wall,
        cpu_seconds=cpu,
        gc_seconds=gc_timer.seconds,
    )


class _GcTimer:
    """Adds up the time the cyclic garbage collector runs, through ``gc.callbacks``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started

    def __enter__(self) -> _GcTimer:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def add_delta_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by the benchmarks that run the daemon into a seeded Delta table."""
    parser.add_argument("--table-rows", type=int, default=1_000_000, help="rows before it")
    parser.add_argument("--per-transaction", type=int, default=1000)
    parser.add_argument("--max-rows", type=int, help="sink.batch.max_rows (default: config)")
    parser.add_argument(
        "--max-rows-ceiling", type=int, help="sink.batch.max_rows_ceiling (default: config)"
    )
    parser.add_argument("--max-bytes", help="sink.batch.max_bytes, e.g. 128MiB (default: config)")
    parser.add_argument("--rows-per-file", type=int, default=100_000, help="seed file size")
    parser.add_argument(
        "--key-bucket-width",
        type=int,
        default=100_000,
        help="sink.partition_by_key width of the table; 0 leaves it unpartitioned",
    )
