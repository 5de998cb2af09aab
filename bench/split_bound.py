"""What capture and sink in two processes could give at best: the bound of a split daemon.

Issue 13 allows a second process for planning once the profile shows the interpreter
lock is the limit. Before building one (a process boundary for batches, reports,
metrics, signals and crashes), this measures its upper bound on the same machine, in the
same ``bench e2e`` run (``--split-bound``):

* a **capture process** runs ``daemon.Supervisor`` from its own copy of the slot into a
  ``CountingSink`` (receive, decode, assemble, replay, batch: everything a split daemon's
  first process would do, and nothing of the sink);
* a **sink process** applies the same changes, in batches of the sizes the real daemon
  made in this run, through ``DeltaSink`` on its own embedded Sail into a copy of the
  seeded Delta table. It reads the changes from a third copy of the slot *before* the
  clock starts and holds them in memory, so it never waits for the capture process.

Both start their timed part at the same moment and share the two cores with the
walsender, as the two halves of a split daemon would; the bound is the later of the two
ends. It is optimistic: no batch crosses a process boundary, and the sink never waits
for data, so a real split daemon is slower than this.

Before that, the sink process runs once more with nothing beside it (``measure_sink_alone``,
its own slot copy and table copy): what the sink costs when capture costs nothing. Both sink
runs report their CPU per thread (``threads_cpu_seconds``): Python's main thread against the
engine's (Sail's Rust runtime, ``tokio-rt-worker``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.daemon import bench_config, run_daemon
from bench.report import Figure, median_figure
from bench.settings import bench_spark_settings
from bench.sink_scaling import bucketed_settings
from bench.workload import PUBLICATION, TABLE
from config import AppConfig
from daemon.gc_tuning import collector_paced_by_time
from decoder import Lsn
from sink import (
    Batch,
    BatchResult,
    DeltaSink,
    create_spark_session,
    stop_spark_session,
)

_START_TIMEOUT_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class HalfRun:
    """One process's timed part, from the common start ("go") to its end."""

    name: str
    wall_seconds: float
    cpu_seconds: float
    threads_cpu_seconds: dict[str, float]
    """CPU seconds of the timed part per thread name (the sink half only)."""

    def figure(self, label: str, changes: int) -> Figure:
        """Changes per second of this half, with its CPU time (the engine's included)."""
        return median_figure(
            label,
            [changes / self.wall_seconds],
            "changes/s",
            note=f"{self.cpu_seconds:.1f} s CPU",
        )


@dataclass(frozen=True, slots=True)
class SplitBound:
    """Both halves; ``wall_seconds`` is the later end."""

    capture: HalfRun
    sink: HalfRun

    @property
    def wall_seconds(self) -> float:
        return max(self.capture.wall_seconds, self.sink.wall_seconds)


class CollectingSink:
    """Keeps every batch it is given; durable at once."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []

    def apply(self, batch: Batch) -> BatchResult:
        """Keep the batch."""
        self.batches.append(batch)
        return BatchResult(rows_by_table={}, toast_anomalies=0, duration_seconds=0.0)

    def close(self) -> None:
        """Nothing to release."""


def regroup(batches: Sequence[Batch], sizes: Sequence[int]) -> Iterator[Batch]:
    """Join consecutive ``batches`` until each reaches the next of ``sizes`` changes.

    Batches are only joined, never cut, so every result ends where a collected batch
    ended; it carries the newest ``durable_lsn`` and commit time of its parts: the result
    is a valid batch sequence. What is left after the last size forms one more batch.
    """
    wanted = iter(sizes)
    group: list[Batch] = []
    count = 0
    target = next(wanted, None)
    for batch in batches:
        group.append(batch)
        count += len(batch.changes)
        if target is not None and count >= target:
            yield _joined(group)
            group, count = [], 0
            target = next(wanted, None)
    if group:
        yield _joined(group)


def _joined(group: list[Batch]) -> Batch:
    durable = [b.durable_lsn for b in group if b.durable_lsn is not None]
    times = [b.last_commit_time for b in group if b.last_commit_time is not None]
    return Batch(
        changes=tuple(change for batch in group for change in batch.changes),
        durable_lsn=durable[-1] if durable else None,
        transaction_count=sum(b.transaction_count for b in group),
        last_commit_time=times[-1] if times else None,
    )


@dataclass(frozen=True, slots=True)
class _Half:
    """What one half's process needs: its slot, and for the sink the lake and batch sizes."""

    role: str
    dsn: str
    slot: str
    endpos: Lsn
    lake: str = ""
    bucket_width: int | None = None
    sizes: tuple[int, ...] = ()

    def config(self, workdir: str) -> AppConfig:
        return bench_config(
            self.dsn,
            Path(workdir),
            slot=self.slot,
            publication=PUBLICATION,
            tables=[f"public.{TABLE}"],
        )


_Timed = tuple[float, float, dict[str, float]]


def _capture_half(half: _Half) -> _Timed:
    with tempfile.TemporaryDirectory(prefix="w2d-split-capture-") as workdir:
        config = half.config(workdir)
        _ready_then_wait_for_go()
        run = run_daemon(config, half.endpos)
        return run.wall_seconds, run.cpu_seconds, {}


def _sink_half(half: _Half) -> _Timed:
    with tempfile.TemporaryDirectory(prefix="w2d-split-sink-") as workdir:
        collector = CollectingSink()
        run_daemon(half.config(workdir), half.endpos, collector)
        batches = list(regroup(collector.batches, half.sizes))
        collector.batches.clear()
        spark = create_spark_session(bench_spark_settings())
        sink = DeltaSink(spark, bucketed_settings(half.lake, half.bucket_width))
        try:
            with collector_paced_by_time():
                _ready_then_wait_for_go()
                started = time.perf_counter()
                cpu_started = time.process_time()
                threads_before = threads_cpu_seconds()
                while batches:
                    sink.apply(batches.pop(0))
                wall = time.perf_counter() - started
                cpu = time.process_time() - cpu_started
                return wall, cpu, _cpu_delta(threads_before, threads_cpu_seconds())
        finally:
            sink.close()
            stop_spark_session(spark)


def threads_cpu_seconds() -> dict[str, float]:
    """CPU seconds of this process's live threads, summed per thread name (Linux /proc).

    The Python threads are named by Python; the engine's (Sail's Rust runtime) by Rust.
    """
    tick = os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        # utime and stime are fields 14 and 15 of stat; [1] starts at field 3.
        seconds = (int(fields[11]) + int(fields[12])) / tick
        totals[name] = totals.get(name, 0.0) + seconds
    return totals


def _cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {
        name: round(seconds - before.get(name, 0.0), 2)
        for name, seconds in sorted(after.items(), key=lambda item: -item[1])
        if seconds - before.get(name, 0.0) >= 0.05
    }


def _ready_then_wait_for_go() -> None:
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("the parent did not say go")


@dataclass(frozen=True, slots=True)
class SplitRun:
    """What both measurements share: the source, where its backlog ends, the table layout
    and the daemon's batch sizes (not ``bench.workload.Backlog``, which describes the
    written backlog itself)."""

    dsn: str
    endpos: Lsn
    bucket_width: int | None
    batch_sizes: tuple[int, ...]
    """The sizes of the batches the daemon applied in the same run, in order."""

    def sink_half(self, slot: str, lake: str) -> _Half:
        return _Half("sink", self.dsn, slot, self.endpos, lake, self.bucket_width, self.batch_sizes)


def measure_split_bound(
    run: SplitRun, *, capture_slot: str, sink_slot: str, lake: str
) -> SplitBound:
    """Run both halves in their own processes, started together; see the module doc."""
    capture = _Half("capture", run.dsn, capture_slot, run.endpos)
    runs = _run_halves([capture, run.sink_half(sink_slot, lake)])
    return SplitBound(capture=runs["capture"], sink=runs["sink"])


def measure_sink_alone(run: SplitRun, *, slot: str, lake: str) -> HalfRun:
    """The sink half with nothing beside it: what the sink costs on a quiet machine."""
    return _run_halves([run.sink_half(slot, lake)])["sink"]


def _run_halves(halves: list[_Half]) -> dict[str, HalfRun]:
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.split_bound", json.dumps(asdict(half))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for half in halves
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError("a split-bound half ended before it was ready")
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        runs: dict[str, HalfRun] = {}
        for half, process in zip(halves, processes, strict=True):
            assert process.stdout is not None
            wall, cpu, threads = json.loads(process.stdout.readline())
            runs[half.role] = HalfRun(half.role, wall, cpu, threads)
            if process.wait(_START_TIMEOUT_SECONDS) != 0:
                raise RuntimeError(f"the {half.role} half exited with {process.returncode}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    return runs


def main(argv: list[str]) -> int:
    """A half's process: ``python -m bench.split_bound '<_Half as JSON>'``."""
    fields = json.loads(argv[0])
    fields["sizes"] = tuple(fields["sizes"])
    half = _Half(**fields)
    run = (_capture_half if half.role == "capture" else _sink_half)(half)
    print(json.dumps(run), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
