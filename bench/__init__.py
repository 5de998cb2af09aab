"""Benchmarks of wal2delta (issue 6): one command each, run against a server they start.

Every benchmark starts its own throw-away PostgreSQL (``bench.postgres``), builds its
workload, measures the daemon *and* a baseline in the same run, and prints both figures
and their ratio. The ratio is the result; absolute times depend on the machine and on
whatever else runs on it, so they are printed but never judged. A benchmark exits 0 when
it measured, whatever the ratio, and non-zero only when it could not measure (the
server did not start, the daemon lost rows...).

``python -m bench`` lists the benchmarks; ``python -m bench NAME`` or
``python -m <module>`` runs one. The shared building blocks:

* ``bench.postgres``: the server, with the settings every benchmark uses;
* ``bench.workload``: the issue's backlog (insert/update/delete mix in fixed-size
  transactions), single large transactions, and fresh copies of one slot so that every
  consumer reads exactly the same WAL;
* ``bench.daemon``: runs ``daemon.Supervisor`` up to an end LSN into a sink, timed;
* ``bench.report``: figures, ratios, and the ``--json`` output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Benchmark:
    """One benchmark of issue 6: its module and what it compares."""

    part: int
    name: str
    summary: str
    module: str | None
    """``python -m <module>`` runs it; None while it cannot be written yet."""
    blocked_by: str | None = None


BENCHMARKS: Final = (
    Benchmark(
        1,
        "capture",
        "receive + decode + assemble over a 1M-change backlog vs pg_recvlogical",
        "bench.capture",
    ),
    Benchmark(
        2,
        "e2e",
        "PostgreSQL -> Delta (embedded Sail) over the backlog vs PostgreSQL's native apply",
        "bench.e2e",
    ),
    Benchmark(
        3,
        "sink",
        "MERGE of a 10k-change batch into 1M- vs 10M-row Delta tables, keys clustered/random",
        "bench.sink_scaling",
    ),
    Benchmark(
        4,
        "lag",
        "p50/p99 commit-to-durable-in-Delta lag at a steady 5k changes/s",
        "bench.lag",
    ),
    Benchmark(
        5,
        "memory",
        "peak RSS of a 5M-row vs a 10k-row single transaction",
        "bench.memory",
    ),
    Benchmark(
        6,
        "plan",
        "sink planning + Arrow per change: per-column converters vs generic",
        "bench.plan",
    ),
    Benchmark(
        7,
        "snapshot",
        "initial snapshot of a 2M-row table vs ADBC + delta-rs; parallel tables vs one stream",
        "bench.snapshot",
    ),
    Benchmark(
        8,
        "tables",
        "one 100k-change backlog (insert-only, 70/30) over 1 to 200 tables vs one table and "
        "the engine's floor per table; 10k inserts into 10M rows; lag over 200 tables "
        "(issues 31, 40)",
        "bench.tables",
    ),
    Benchmark(
        9,
        "resync",
        "a 2M-row table copied while 5k changes/s stream (wal2delta resync) vs its initial "
        "snapshot; lag of the streaming table (issue 32)",
        "bench.resync",
    ),
    Benchmark(
        10,
        "startup",
        "wall time of wal2delta --version, --help, check-config and status vs python -c pass "
        "and the 0.3 s target (issue 38)",
        "bench.startup",
    ),
    Benchmark(
        11,
        "logs",
        "engine appends on a 2,000-version Delta log vs the same log trimmed (decision 0134)",
        "bench.log_growth",
    ),
)
"""Every benchmark of issue 6, in the issue's order, then those of later issues."""
