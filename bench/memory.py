"""Benchmark 5 of issue 6: peak memory of a 5M-row vs a 10k-row single transaction.

Run: ``python -m bench.memory`` (``--help`` for the knobs). The 5M-row run takes several
minutes on a small machine; ``--large-rows`` makes it smaller.

Method
------
For each size, in this order so that no run sees the other's transaction:

1. create a slot, insert the rows (~100 bytes each, ``bench.workload``) in one
   transaction, and note the WAL insert position after it;
2. in a fresh Python process (so that ``ru_maxrss`` covers only this run), stream the
   slot through ``daemon.Supervisor`` into a counting sink up to that position
   (``bench.daemon``), with the production spill settings unless ``--spool-limit`` says
   otherwise, and report the peak RSS.

The server streams a transaction this size to the daemon in chunks (protocol 4,
``streaming on``, ``logical_decoding_work_mem`` at its 64MB default); the daemon spools
it, past ``spool.memory_limit``, to disk, and replays it in batches of
``sink.batch.max_rows`` changes. Peak RSS should therefore not depend on the transaction's
size (docs/architecture.md, invariant 6): the target is ``large <= 1.2 x small``. The RSS
of the probe just before it starts streaming is printed too: it is the part no transaction
size can change (interpreter, psycopg, Spark client libraries).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench.postgres import bench_server
from bench.report import Ratio, median_figure, print_report
from bench.workload import (
    PUBLICATION,
    TABLE,
    copy_slot,
    create_source_slot,
    create_table,
    drop_slot,
    write_single_transaction,
)
from config.models import BatchConfig, SpoolConfig
from decoder import Lsn, format_lsn, parse_lsn

MEMORY_TARGET = 1.2
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class MemorySettings:
    """The two settings that bound the daemon's memory, as one named configuration."""

    name: str
    spool_memory_limit: str | None
    """``spool.memory_limit``; None keeps the production default."""
    max_rows: int | None
    """``sink.batch.max_rows``; None keeps the production default."""
    max_rows_ceiling: int | None
    """``sink.batch.max_rows_ceiling``; None keeps the production default."""
    max_bytes: str | None = None
    """``sink.batch.max_bytes``; None keeps the production default."""

    def describe(self) -> str:
        """The settings in words, for the report."""
        rows = f"{self.max_rows or BatchConfig().max_rows:,}"
        ceiling = f"{self.max_rows_ceiling or BatchConfig().max_rows_ceiling:,}"
        spool = self.spool_memory_limit or f"{SpoolConfig().memory_limit // 2**20}MiB"
        weight = self.max_bytes or f"{BatchConfig().max_bytes // 2**20}MiB"
        return f"{spool} spool, batches of {rows} growing to {ceiling} or {weight}"


SETTINGS = {
    "production": MemorySettings("production", None, None, None),
    "bounded": MemorySettings("bounded", "1MiB", 5000, None),
    "fixed-batches": MemorySettings("fixed-batches", "1MiB", 5000, 5000),
    "production-fixed": MemorySettings("production-fixed", None, None, BatchConfig().max_rows),
    "previous": MemorySettings("previous", "64MiB", 50_000, None),
    "ceiling-50k": MemorySettings("ceiling-50k", None, None, 50_000),
    "bytes-16mib": MemorySettings("bytes-16mib", None, None, None, "16MiB"),
    "bytes-32mib": MemorySettings("bytes-32mib", None, None, None, "32MiB"),
}
"""``production``: the configuration defaults; ``bounded``: what the bounded-memory test
uses (1MiB spool, 5k-change batches, default ceiling); ``fixed-batches``: the same
without adaptive batching (ceiling = ``max_rows``); ``production-fixed``: the defaults
without adaptive batching; ``previous``: the defaults before issue 13 (64MiB spool,
50k-change batches); ``ceiling-50k``: growth capped at 50k changes; ``bytes-16mib`` and
``bytes-32mib``: the defaults with a smaller ``sink.batch.max_bytes``."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What one probe process measured."""

    rows: int
    peak_rss_kib: int
    start_rss_kib: int
    wall_seconds: float


def _rss_kib() -> int:
    """Current resident set size of this process, from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("VmRSS not found in /proc/self/status")


def probe(dsn: str, slot: str, endpos: Lsn, workdir: Path, settings: MemorySettings) -> ProbeResult:
    """Stream ``slot`` up to ``endpos`` through the daemon; runs in the probe process."""
    from bench.daemon import bench_config, run_daemon  # imports the daemon: probe only

    config = bench_config(
        dsn,
        workdir,
        slot=slot,
        publication=PUBLICATION,
        tables=[f"public.{TABLE}"],
        spool_memory_limit=settings.spool_memory_limit,
        max_rows=settings.max_rows,
        max_rows_ceiling=settings.max_rows_ceiling,
        max_bytes=settings.max_bytes,
    )
    start_rss = _rss_kib()
    run = run_daemon(config, endpos)
    return ProbeResult(
        rows=run.rows,
        peak_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        start_rss_kib=start_rss,
        wall_seconds=run.wall_seconds,
    )


def _run_probe(
    dsn: str, slot: str, endpos: Lsn, workdir: Path, settings: MemorySettings
) -> ProbeResult:
    workdir.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "bench.memory",
        "--probe",
        dsn,
        slot,
        format_lsn(endpos),
        str(workdir),
        settings.name,
    ]
    python_path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=7200,
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": python_path},
    )
    if result.returncode != 0:
        raise RuntimeError(f"the probe failed ({result.returncode}):\n{result.stderr[-4000:]}")
    data = json.loads(result.stdout.strip().splitlines()[-1])
    return ProbeResult(**data)


def _measure(
    dsn: str, rows: int, workdir: Path, settings: list[MemorySettings]
) -> dict[str, ProbeResult]:
    """Write one transaction of ``rows`` rows, then stream it once per settings."""
    source = f"bench_memory_{rows}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE public.bench_rows")
        create_source_slot(conn, source)
        print(f"writing one transaction of {rows:,} rows ...", flush=True)
        started = time.perf_counter()
        backlog = write_single_transaction(conn, rows=rows)
        print(
            f"  written in {time.perf_counter() - started:.1f} s, "
            f"{backlog.wal_bytes / 2**20:,.0f} MiB of WAL",
            flush=True,
        )
    results = {}
    for setting in settings:
        slot = f"{source}_{setting.name.replace('-', '_')}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            copy_slot(conn, source, slot)
        print(f"  streaming it through the daemon ({setting.name} settings) ...", flush=True)
        result = _run_probe(dsn, slot, backlog.end_lsn, workdir / slot, setting)
        if result.rows != rows:
            raise RuntimeError(f"the daemon delivered {result.rows:,} row changes, not {rows:,}")
        results[setting.name] = result
        with psycopg.connect(dsn, autocommit=True) as conn:
            drop_slot(conn, slot)
    with psycopg.connect(dsn, autocommit=True) as conn:
        drop_slot(conn, source)
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with ``--probe``, one probe); 0 when it measured."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--probe"]:
        probe_dsn, slot, endpos, probe_dir, name = argv[1:6]
        measured = probe(probe_dsn, slot, parse_lsn(endpos), Path(probe_dir), SETTINGS[name])
        print(json.dumps(dataclasses.asdict(measured)))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--small-rows", type=int, default=10_000)
    parser.add_argument("--large-rows", type=int, default=5_000_000)
    parser.add_argument(
        "--settings",
        default="all",
        help=f"comma-separated settings to run with, of {', '.join(SETTINGS)} (default: all)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON line at the end")
    parser.add_argument("--workdir", type=Path, help="keep the server here (default: tmp)")
    args = parser.parse_args(argv)
    names = list(SETTINGS) if args.settings == "all" else args.settings.split(",")
    unknown = [name for name in names if name not in SETTINGS]
    if unknown:
        parser.error(f"unknown settings {', '.join(unknown)}; choose from {', '.join(SETTINGS)}")
    chosen = [SETTINGS[name] for name in names]

    with contextlib.ExitStack() as stack:
        workdir: Path = args.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="w2d-bench-memory-"))
        )
        server = stack.enter_context(bench_server(workdir))
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_table(conn, seed_rows=0)
        small = _measure(dsn, args.small_rows, workdir, chosen)
        large = _measure(dsn, args.large_rows, workdir, chosen)

    figures = []
    ratios = []
    for setting in chosen:
        one, big = small[setting.name], large[setting.name]
        label = setting.name
        figures += [
            median_figure(f"{label}: {args.small_rows:,} rows", [one.peak_rss_kib / 1024], "MiB"),
            median_figure(f"{label}: {args.large_rows:,} rows", [big.peak_rss_kib / 1024], "MiB"),
            median_figure(
                f"{label}: {args.large_rows:,} rows throughput",
                [args.large_rows / big.wall_seconds],
                "rows/s",
            ),
        ]
        ratios.append(
            Ratio(
                f"{setting.name}: large / small peak RSS",
                big.peak_rss_kib / one.peak_rss_kib,
                target=MEMORY_TARGET,
                higher_is_better=False,
            )
        )
    first = small[chosen[0].name]
    figures.append(median_figure("RSS before streaming", [first.start_rss_kib / 1024], "MiB"))
    facts: dict[str, object] = {
        **{f"settings {setting.name}": setting.describe() for setting in chosen},
    }
    print_report("peak RSS vs transaction size", figures, ratios, facts=facts, as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
