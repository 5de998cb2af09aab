"""``wal2delta run`` with the sink's work timed by phase, for ``bench tables`` (issue 40).

``python -m bench.table_timings run -c FILE --endpos END`` is ``python -m daemon.cli``
with the same arguments - the same process, configuration, threads and engine - and, when
``W2D_BENCH_TIMINGS`` names a file, the sink's methods wrapped in timers before it starts
(``install``; nothing of ``sink/`` is changed on disk). At exit the file gets one JSON
document:

* ``batches``: for every ``DeltaSink.apply``, its wall seconds, the tables it wrote
  (``BatchResult.seconds_by_table``: one table write each) and the sum of their seconds;
* ``phases``: for every timed method (``PHASES``, and every public method of the classes
  of ``CLASSES``: the keyed executors, the append path's of issue 40 among them), its
  calls and its seconds in all. Methods run inside others (a MERGE inside a keyed step
  inside a table's work), and the tables of a batch run on ``sink.concurrency`` threads,
  so seconds are thread time: they add up over threads and over nesting levels; what a
  phase costs per table write is its seconds over the table writes.

With ``W2D_BENCH_PROFILE`` naming a directory, every thread that applies batches or tables
(the sink worker, the table threads) and the main thread (capture, decoding, batching)
runs under its own ``cProfile`` profiler; their statistics are written there at exit
(``<thread>.pstats``), and merged into ``all.pstats``. Profiling slows the Python parts
several-fold: its timings are for finding where time goes, not for the figures.
"""

from __future__ import annotations

import atexit
import cProfile
import functools
import importlib
import json
import os
import pstats
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

TIMINGS_ENV: Final = "W2D_BENCH_TIMINGS"
PROFILE_ENV: Final = "W2D_BENCH_PROFILE"

PHASES: Final = (
    # (module, class or None, attribute, phase)
    ("sink.delta", "DeltaSink", "_apply", "apply (whole batch)"),
    ("sink.delta", "DeltaSink", "after_apply", "upkeep after a batch"),
    ("sink.delta", "DeltaSink", "settle", "upkeep when idle"),
    ("sink.upkeep.compaction", "Compactor", "compact_due", "compactions due"),
    ("sink.upkeep.compaction", "Compactor", "wrote", "compactor: tables written"),
    ("sink.upkeep.compaction", "Compactor", "_read_new_tables", "compactor: new tables' logs"),
    ("sink.planning.holdback", "HeldChanges", "admit", "holdback: admit"),
    ("sink.delta", None, "plan_batch", "plan the batch"),
    ("sink.records.commits", "CommitLog", "begin", "commit log: intent"),
    ("sink.records.commits", "CommitLog", "record", "commit log: record"),
    ("sink.records.commits", "CommitLog", "flush", "commit log: flush"),
    ("sink.records.bookkeeping", "Bookkeeping", "flush_column_origins", "column origins"),
    ("sink.delta", "DeltaSink", "_write_tables", "tables of a batch (wall)"),
    ("sink.steps.writer", "TableWriter", "write", "table: all of it"),
    ("sink.steps.writer", "TableWriter", "prepare", "table: prepare"),
    ("sink.steps.follow", "RelationFollower", "follow", "table: follow relation"),
    ("sink.steps.step_history", "HistoryExecutor", "apply", "table: history"),
    ("sink.steps.step_keyed", None, "source_table", "keyed: Arrow source"),
    ("sink.lake.sources", "SourceFiles", "write", "engine input: Parquet source file"),
    ("sink.lake.tables", "LakeTables", "merge", "engine: MERGE of a step"),
    ("sink.lake.tables", "LakeTables", "sql", "engine: other statement"),
    ("sink.lake.tables", "LakeTables", "append", "engine: DataFrame append"),
    ("sink.lake.tables", "LakeTables", "append_rows", "engine: append of rows"),
    ("sink.lake.tables", "LakeTables", "count", "engine: count query"),
    ("sink.lake.tables", "LakeTables", "rows", "engine: row query"),
    ("sink.lake.tables", "LakeTables", "load", "engine: create or read a table"),
    ("sink.lake.tables", "LakeTables", "add_columns", "engine: add columns"),
)
"""The methods timed; one missing in this build is skipped."""
CLASSES: Final = (
    # (module, class, phase prefix): every public method, when the build has the class
    ("sink.steps.step_keyed", "KeyedMergeExecutor", "keyed"),
    ("sink.steps.step_append", "KeyedAppendExecutor", "append step"),
    ("sink.planning.replays", "ReplayHorizon", "replay horizon"),
)
"""Classes whose public methods are all timed (the append path of issue 40 is new)."""
_PROFILED: Final = (
    ("sink.delta", "DeltaSink", "_apply"),
    ("sink.steps.writer", "TableWriter", "write"),
)
_PROFILED_TOO: Final = (
    ("sink.delta", "DeltaSink", "after_apply"),
    ("sink.delta", "DeltaSink", "settle"),
)


class Timings:
    """Calls and seconds by phase, and the batches; safe from every thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.phases: dict[str, list[float]] = {}
        self.batches: list[dict[str, object]] = []

    def add(self, phase: str, seconds: float) -> None:
        with self.lock:
            entry = self.phases.setdefault(phase, [0, 0.0])
            entry[0] += 1
            entry[1] += seconds

    def document(self) -> dict[str, object]:
        with self.lock:
            return {
                "phases": {
                    name: {"calls": int(calls), "seconds": seconds}
                    for name, (calls, seconds) in self.phases.items()
                },
                "batches": list(self.batches),
            }


def _timed(timings: Timings, phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            timings.add(phase, time.perf_counter() - started)

    return timed


class _Profilers:
    """One ``cProfile.Profile`` per thread, enabled while a profiled method runs in it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_thread: dict[str, cProfile.Profile] = {}
        self.local = threading.local()

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def profiled(*args: Any, **kwargs: Any) -> Any:
            if getattr(self.local, "active", False):
                return function(*args, **kwargs)  # nested in a profiled call
            name = threading.current_thread().name
            with self.lock:
                profiler = self.by_thread.setdefault(name, cProfile.Profile())
            self.local.active = True
            profiler.enable()
            try:
                return function(*args, **kwargs)
            finally:
                profiler.disable()
                self.local.active = False

        return profiled

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        merged: pstats.Stats | None = None
        for name, profiler in self.by_thread.items():
            path = directory / f"{name.replace('/', '_')}.pstats"
            profiler.dump_stats(str(path))
            merged = pstats.Stats(str(path)) if merged is None else merged.add(str(path))
        if merged is not None:
            merged.dump_stats(str(directory / "all.pstats"))


def install(timings: Timings, profilers: _Profilers | None = None) -> list[str]:
    """Wrap the methods of ``PHASES`` (and with ``profilers`` those profiled) in place;
    return the phases of this build."""
    installed = []
    for module_name, class_name, attribute, phase in PHASES:
        module = importlib.import_module(module_name)
        owner: Any = module if class_name is None else getattr(module, class_name, None)
        function = getattr(owner, attribute, None) if owner is not None else None
        if function is None:
            continue
        setattr(owner, attribute, _timed(timings, phase, function))
        installed.append(phase)
    root = Path(importlib.import_module("sink").__file__ or ".").parents[1]
    for module_name, class_name, prefix in CLASSES:
        if not (root / f"{module_name.replace('.', '/')}.py").exists():
            continue  # not in this build (and not to be found elsewhere on the path)
        module = importlib.import_module(module_name)
        owner = getattr(module, class_name, None)
        if owner is None:
            continue
        for attribute, function in list(vars(owner).items()):
            if callable(function) and not attribute.startswith("_"):
                phase = f"{prefix}: {attribute}"
                setattr(owner, attribute, _timed(timings, phase, function))
                installed.append(phase)
    delta = importlib.import_module("sink.delta")
    original_apply = delta.DeltaSink.apply

    @functools.wraps(original_apply)
    def apply(self: Any, batch: Any) -> Any:
        started = time.perf_counter()
        result = original_apply(self, batch)
        seconds = time.perf_counter() - started
        by_table = dict(result.seconds_by_table)
        with timings.lock:
            timings.batches.append(
                {
                    "seconds": seconds,
                    "changes": len(batch.changes),
                    "transactions": batch.transaction_count,
                    "table_writes": len(by_table),
                    "table_seconds": sum(by_table.values()),
                    "rows": sum(sum(ops.values()) for ops in result.rows_by_table.values()),
                    "held_changes": result.held_changes,
                }
            )
        return result

    delta.DeltaSink.apply = apply
    if profilers is not None:
        for module_name, class_name, attribute in (*_PROFILED, *_PROFILED_TOO):
            owner = getattr(importlib.import_module(module_name), class_name)
            setattr(owner, attribute, profilers.wrap(getattr(owner, attribute)))
    return installed


def main() -> int:
    """``daemon.cli`` with the sink timed (module docstring)."""
    output = os.environ.get(TIMINGS_ENV)
    profile_dir = os.environ.get(PROFILE_ENV)
    timings = Timings()
    profilers = _Profilers() if profile_dir else None
    installed = install(timings, profilers) if output else []

    def write() -> None:
        if output:
            document = {**timings.document(), "installed": installed}
            Path(output).write_text(json.dumps(document))
        if profilers is not None and profile_dir:
            profilers.write(Path(profile_dir))

    atexit.register(write)
    from daemon.cli import main as cli_main

    if profilers is None:
        return cli_main(sys.argv[1:])
    main_profiler = cProfile.Profile()
    with profilers.lock:
        profilers.by_thread["main"] = main_profiler
    main_profiler.enable()
    try:
        return cli_main(sys.argv[1:])
    finally:
        main_profiler.disable()


if __name__ == "__main__":
    sys.exit(main())
