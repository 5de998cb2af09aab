"""Issue 32: a table copied while streaming (``wal2delta resync``), against the initial
snapshot of the same table, and the lag of the table that streams meanwhile.

Run: ``python -m bench.resync`` (``python -m bench resync``; ``--rows`` and
``--table-rows`` for smaller tables). The default (a 2M-row table copied while 5k
changes/s stream into a 1M-row table) takes several minutes. In one run, on one server
(``bench.postgres``, ``synchronous_commit`` on as in ``bench.lag``):

1. **Initial snapshot**: the table of ``bench.snapshot`` (``--rows`` rows: ``bigint`` key,
   ``int``, ``numeric(12,2)``, ``timestamptz``, ``text``) copied by ``daemon.Supervisor``
   with ``DeltaSink`` on embedded Sail, ``snapshot.mode: initial`` over a publication of
   that table alone, to the consistent point (``bench.snapshot``'s measurement: slot,
   snapshot, markers, streaming to the end). Its rate (rows/s) is the baseline.
2. **Online copy**: the same lake; the table and ``bench.workload``'s table
   (``--table-rows`` seed rows, its Delta table seeded as in ``bench.lag``) are published,
   and a daemon on a slot of its own streams while ``bench.lag``'s ``SteadyWriter``
   commits the backlog's mix into the streaming table at ``--rate`` changes/s on a fixed
   schedule (the copied table takes no writes). After ``--warmup-seconds`` uncounted (and at
   least ``sink.compact_after_writes`` batches, so that the streaming table's first
   compaction, which counts the seeding's commits too, is behind) and
   ``--before-seconds`` of streaming alone, ``daemon.resync.request_resync`` asks for the
   table to be copied again - the ``wal2delta resync`` message, read by the daemon through
   its slot - and the copy runs as in production (``capture/tablecopy.py``: temporary
   slot, exported snapshot, staging table, one replacing commit, then the stream
   rewinds). The copy's rate is the table's rows over the time from the request to its
   ``done`` record in ``<lake>/_wal2delta_copies``: to the daemon's ``tables copied while
   streaming`` log line, which follows the record at once (the record is read from the
   lake too, every second, as ``wal2delta resync --wait`` reads it, but a poll would add
   up to a second). The daemon's log lines also split the copy: the request's way to the
   copier, the reading into the staging table (``snapshot copied``, against the same line
   of the initial snapshot) and the rest (temporary slot, replacing commit, record). The
   writer keeps its schedule through the rewind and ``--after-seconds`` more.
3. **Lag**: ``bench.lag``'s per-transaction commit-to-durable lag (``LagSink``: the time
   from each transaction's commit until the ``apply`` that made it durable returned;
   transactions replayed by the rewind count once, when first durable) of the streaming
   table, for the transactions committed from the request until the writer stops, and
   for comparison those committed in the ``--before-seconds`` before it. The sink's upkeep
   between batches (compactions, ``sink.compact_after_writes``) is timed in both windows:
   the sink worker applies nothing meanwhile, so a long one shows in the lag.

Targets (issue 32): the online copy's rate >= 0.7x the initial snapshot's, p99 lag of
the streaming table during the copy <= 2 s. Both are printed with their verdict, never
asserted. Both Delta tables are read back with delta-rs at the end and must hold as many
rows as their source tables; a copy that does not finish within ``--timeout`` seconds or
a count that differs makes the benchmark fail (exit 1) rather than report.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import psycopg
from psycopg import sql

from bench.daemon import add_delta_run_arguments, bench_config_document
from bench.lag import LagSink, SteadyRun, SteadyWriter
from bench.postgres import bench_server
from bench.report import Figure, Ratio, median_figure, print_report
from bench.settings import bench_spark_settings
from bench.sink_scaling import bucketed_settings, build_table, layout_description
from bench.snapshot import _config as snapshot_config
from bench.snapshot import _create_tables as create_snapshot_tables
from bench.snapshot import _wal2delta as measure_snapshot
from bench.tables import MeasurementError, check_row_counts
from bench.workload import PUBLICATION, TABLE, create_source_slot, create_table, drop_slot
from config import AppConfig, parse_config
from daemon.gc_tuning import collector_paced_by_time
from daemon.logging import configure_engine_logging, configure_logging
from daemon.resync import request_resync, wait_for_copies
from daemon.supervisor import Supervisor
from sink import (
    DeltaSink,
    create_spark_session,
    parts_of,
    stop_spark_session,
    table_path,
)

RATE_TARGET: Final = 0.7
"""Online copy rate / initial snapshot rate, at least (issue 32)."""
LAG_TARGET: Final = 2.0
"""p99 lag of the streaming table during the copy, in seconds, at most (issue 32)."""
COPIED: Final = "big"
"""The table copied twice: by the initial snapshot, then while streaming."""
INITIAL_SLOT: Final = "w2d_initial"
SLOT: Final = "bench_resync"
POLL_SECONDS: Final = 1.0
"""How often the lake's copy records are read while the copy runs."""
STARTED_EVENT: Final = "copying tables while streaming"
COPIED_EVENT: Final = "tables copied while streaming"
READ_EVENT: Final = "snapshot copied"
"""The daemon's log lines (``CopyLog``)."""


@dataclass(slots=True)
class CopyLagSink(LagSink):
    """``LagSink`` (which hands on the wrapped ``DeltaSink``'s parts, so the supervisor runs
    its ``OnlineCopier``) that also times the sink's upkeep between batches (compactions:
    the sink worker applies nothing meanwhile, so a long one shows in the lag of the
    transactions waiting behind it)."""

    upkeep: list[tuple[float, float]] = field(default_factory=list)
    """(UNIX time it ended, seconds) of every ``after_apply`` and ``settle``."""

    def after_apply(self) -> None:
        """The wrapped sink's upkeep after a batch, timed."""
        started = time.perf_counter()
        try:
            self.inner.after_apply()
        finally:
            self.upkeep.append((time.time(), time.perf_counter() - started))

    def settle(self) -> bool:
        """The wrapped sink's upkeep when idle, timed; whether some is still due."""
        started = time.perf_counter()
        try:
            return self.inner.settle()
        finally:
            self.upkeep.append((time.time(), time.perf_counter() - started))

    def upkeep_between(self, start: float, end: float) -> str:
        """The upkeep that ended from ``start`` to ``end`` (UNIX times), for a report."""
        seconds = sorted(took for at, took in self.upkeep if start <= at < end)
        long = [took for took in seconds if took >= 0.5]
        return (
            f"{len(seconds)} runs, {sum(seconds):.1f} s in all; longest "
            f"{', '.join(f'{took:.1f}' for took in reversed(long[-5:])) or 'none'} s "
            f"({len(long)} of 0.5 s or more)"
        )


class CopyLog(logging.Handler):
    """Catches the daemon's log lines of the online copy (``capture/tablecopy.py``, the
    copier's ``capture/snapshot.py``): when it started and landed - the ``tables copied
    while streaming`` line follows the ``done`` record at once - and how long it took, all
    of it and the reading into the staging table."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.started_at: float | None = None
        """``time.monotonic()`` of ``copying tables while streaming`` (slot created)."""
        self.landed_at: float | None = None
        """``time.monotonic()`` of ``tables copied while streaming``."""
        self.seconds: float | None = None
        """Its ``duration_seconds``: temporary slot, reading, staging, replacement."""
        self.read_seconds: float | None = None
        """``duration_seconds`` of the copier's ``snapshot copied``: read into staging."""

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the times (structlog hands its event dict over as the message)."""
        event = record.msg
        if not isinstance(event, dict):
            return
        name = event.get("event")
        if name == STARTED_EVENT:
            self.started_at = time.monotonic()
        elif name == COPIED_EVENT:
            self.landed_at = time.monotonic()
            self.seconds = float(event["duration_seconds"])
        elif name == READ_EVENT:
            self.read_seconds = float(event["duration_seconds"])

    @contextlib.contextmanager
    def installed(self) -> Iterator[CopyLog]:
        """Listen to ``wal2delta.copy`` and ``wal2delta.snapshot`` at info meanwhile (their
        lines - progress every few seconds - are printed too)."""
        loggers = [logging.getLogger(name) for name in ("wal2delta.copy", "wal2delta.snapshot")]
        levels = [logger.level for logger in loggers]
        for logger in loggers:
            logger.setLevel(logging.INFO)
            logger.addHandler(self)
        try:
            yield self
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.removeHandler(self)
                logger.setLevel(level)


@dataclass(frozen=True, slots=True)
class CopyRun:
    """What the online copy under a steady write rate measured (``copy_while_streaming``)."""

    alone: SteadyRun
    """The streaming table's lag before the request (no copy running)."""
    during: SteadyRun
    """The streaming table's lag from the request until the writer stopped."""
    request_to_done: float
    """Seconds from the request to the copy's ``done`` record."""
    log: CopyLog
    """The copy's times from the daemon's log lines (None where a line was not caught)."""
    requested_at: float
    """``time.monotonic()`` of the request."""
    upkeep_before: str
    """The sink's upkeep between batches before the request (``CopyLagSink``)."""
    upkeep_during: str
    """The same from the request until the last transaction was durable."""
    request_to_rewound: float
    """Seconds from the request until the stream was rewound after the copy."""


def _write_until(
    writer: SteadyWriter, rate: float, stop: threading.Event, failures: list[BaseException]
) -> None:
    """``SteadyWriter``'s fixed schedule (``SteadyWriter.run``) until ``stop`` is set."""
    interval = sum((writer.inserts, writer.updates, writer.deletes)) / rate
    started = time.perf_counter()
    written = 0
    try:
        while not stop.is_set():
            delay = started + written * interval - time.perf_counter()
            if delay > 0 and stop.wait(delay):
                return
            writer.write_one()
            written += 1
    except BaseException as exc:  # reported by the measuring thread
        failures.append(exc)


def _wait(seconds: float, failures: Sequence[BaseException]) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if failures:
            raise failures[0]
        time.sleep(min(left, POLL_SECONDS))


def _cut(sink: LagSink, at: float) -> LagSink:
    """Move what ``sink`` measured so far into a new ``LagSink`` (for its figures) and count
    only transactions committed from ``at`` on."""
    with sink.lock:
        before = LagSink(
            sink.inner,
            transaction_lags=sink.transaction_lags,
            batch_lags=sink.batch_lags,
            batches=list(sink.batches),
        )
        sink.transaction_lags, sink.batch_lags = [], []
        sink.measure_after = at
    return before


def copy_while_streaming(
    config: AppConfig,
    sink: CopyLagSink,
    writer: SteadyWriter,
    *,
    rate: float,
    warmup_seconds: float,
    before_seconds: float,
    after_seconds: float,
    timeout: float,
) -> CopyRun:
    """Stream at ``rate``, ask for ``COPIED`` to be copied again, measure (module docstring).

    Raises:
        MeasurementError: the copy did not finish, or the stream was not rewound, within
            ``timeout`` seconds.
        BaseException: the daemon's or the writer's error, if one failed.
    """
    if parts_of(sink).copies is None:
        # The daemon would ignore the request (it copies through a sink's copies part only)
        # and the run would wait for a copy that never starts.
        raise MeasurementError("CopyLagSink does not hand on the wrapped sink's copies")
    configure_logging("console", "warning")
    stop = threading.Event()
    stop_writing = threading.Event()
    failures: list[BaseException] = []
    service = Supervisor(config, sink, stop_event=stop)

    def serve() -> None:
        try:
            service.run()
        except BaseException as exc:  # reported after the run; the thread must not die silently
            failures.append(exc)

    daemon = threading.Thread(target=serve, name="daemon", daemon=True)
    writing = threading.Thread(
        target=_write_until, args=(writer, rate, stop_writing, failures), name="writer"
    )
    with contextlib.ExitStack() as stack:
        stack.enter_context(collector_paced_by_time())
        copy_log = stack.enter_context(CopyLog().installed())
        daemon.start()
        stack.callback(daemon.join, 60)
        stack.callback(stop.set)
        writer.write_one()
        sink.wait_durable(writer.end_lsn(), timeout=300, failures=failures)
        print("daemon warmed up; writing", flush=True)
        started = time.monotonic()
        writing.start()
        stack.callback(writing.join, 60)
        stack.callback(stop_writing.set)
        _wait(warmup_seconds, failures)
        # Every table's first compaction behind (it counts the seeding's commits too).
        while len(sink.batches) <= config.sink.compact_after_writes:
            if time.monotonic() - started > timeout:
                raise MeasurementError(f"the daemon applied too few batches in {timeout:.0f} s")
            _wait(0.05, failures)
        sink.measure_after = alone_from = time.time()
        first_alone = writer.transactions
        _wait(before_seconds, failures)

        requested_at = time.time()
        alone = _cut(sink, requested_at)
        first_during = writer.transactions
        started = time.monotonic()
        request = request_resync(config, [f"public.{COPIED}"])
        print(f"copy of public.{COPIED} requested", flush=True)
        while wait_for_copies(config, request, timeout=0):
            if time.monotonic() - started > timeout:
                raise MeasurementError(f"the copy was not done after {timeout:.0f} s")
            _wait(POLL_SECONDS, failures)
        request_to_done = (copy_log.landed_at or time.monotonic()) - started
        print(f"copy done after {request_to_done:.1f} s", flush=True)
        copies = sink.parts.copies
        assert copies is not None, "a DeltaSink copies while streaming"
        while copies.copy_rewind_due() or copies.tables_copying():
            if time.monotonic() - started > timeout:
                raise MeasurementError(f"the stream was not rewound after {timeout:.0f} s")
            _wait(0.05, failures)
        request_to_rewound = time.monotonic() - started
        _wait(after_seconds, failures)

        stop_writing.set()
        writing.join()
        stopped_at = time.time()
        last = writer.transactions
        sink.wait_durable(writer.end_lsn(), timeout=600, failures=failures)
        ended_at = time.time()
    if failures:
        raise failures[0]
    per_transaction = writer.inserts + writer.updates + writer.deletes
    alone_rate = (first_during - first_alone) * per_transaction / (requested_at - alone_from)
    during_rate = (last - first_during) * per_transaction / (stopped_at - requested_at)
    return CopyRun(
        alone=SteadyRun(alone, alone_rate, alone_from),
        during=SteadyRun(sink, during_rate, requested_at),
        request_to_done=request_to_done,
        log=copy_log,
        requested_at=started,
        upkeep_before=sink.upkeep_between(alone_from, requested_at),
        upkeep_during=sink.upkeep_between(requested_at, ended_at),
        request_to_rewound=request_to_rewound,
    )


def _streaming_config(dsn: str, workdir: Path, lake: str, args: argparse.Namespace) -> AppConfig:
    """The streaming daemon: the benchmark slot and publication (both tables), the lake of
    the initial snapshot, production batching, the copy at ``--parallelism``."""
    document = bench_config_document(
        dsn,
        workdir,
        slot=SLOT,
        publication=PUBLICATION,
        tables=[f"public.{TABLE}", f"public.{COPIED}"],
        max_rows=args.max_rows,
        max_rows_ceiling=args.max_rows_ceiling,
        max_bytes=args.max_bytes,
        sink={"path": lake},
    )
    document["snapshot"] = {"parallelism": args.parallelism}
    return parse_config(document)


def _copy_phases(run: CopyRun) -> list[Figure]:
    """Where the online copy's time went, from the daemon's log lines that were caught."""
    log = run.log
    phases: list[tuple[str, float]] = []
    if log.started_at is not None:
        phases.append(("request to the copy's start", log.started_at - run.requested_at))
    if log.read_seconds is not None:
        phases.append(("reading into the staging table", log.read_seconds))
    if log.seconds is not None and log.read_seconds is not None:
        phases.append(("slot, replacing commit, record", log.seconds - log.read_seconds))
    return [median_figure(f"online copy: {name}", [seconds], "s") for name, seconds in phases]


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """The command line (``--help``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.resync", description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the copied table")
    parser.add_argument(
        "--parallelism", type=int, default=1, help="snapshot.parallelism of both copies"
    )
    parser.add_argument("--rate", type=float, default=5000.0, help="changes per second")
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=15.0,
        help="writing at the rate before anything is counted (and at least until "
        "sink.compact_after_writes batches are applied)",
    )
    parser.add_argument(
        "--before-seconds", type=float, default=20.0, help="streaming alone before the request"
    )
    parser.add_argument(
        "--after-seconds", type=float, default=5.0, help="writing on after the rewind"
    )
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds the copy may take at most"
    )
    add_delta_run_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print a JSON line at the end")
    parser.add_argument("--workdir", type=Path, help="keep server and lake here (default: tmp)")
    args = parser.parse_args(argv)
    if args.before_seconds <= 0:
        parser.error("--before-seconds must be positive (the lag without a copy)")
    return args


@dataclass(frozen=True, slots=True)
class Measured:
    """What ``measure`` measured."""

    initial_seconds: float
    """The initial snapshot's daemon run: slot, snapshot, streaming to its end."""
    initial_read_seconds: float | None
    """Its ``snapshot copied`` duration (reading into the table); None when not caught."""
    online: CopyRun
    size: int
    """The copied table's size in PostgreSQL, bytes."""


def measure(args: argparse.Namespace, workdir: Path) -> Measured:
    """Both copies on one server (module docstring).

    Raises:
        MeasurementError: the copy did not finish, or a row count differs.
    """
    configure_logging("console", "warning")  # before any logger is used (and cached)
    seed = args.table_rows
    width = args.key_bucket_width or None
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(bench_server(workdir / "server", synchronous_commit=True))
        dsn = server.dsn()
        print(f"creating public.{COPIED} ({args.rows:,} rows) and public.{TABLE}", flush=True)
        size = create_snapshot_tables(dsn, [COPIED], args.rows)
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_table(conn, seed_rows=seed)
        configure_engine_logging("warning")  # Sail logs every query at info
        spark = create_spark_session(bench_spark_settings())
        stack.callback(stop_spark_session, spark)

        print("initial snapshot", flush=True)
        initial = snapshot_config(dsn, workdir, [COPIED], INITIAL_SLOT, args.parallelism)
        with CopyLog().installed() as initial_log:
            initial_seconds = measure_snapshot(dsn, spark, initial)
        lake = str(initial.sink.path)
        print(f"initial snapshot: {args.rows / initial_seconds:,.0f} rows/s", flush=True)

        with psycopg.connect(dsn, autocommit=True) as conn:
            check_row_counts(conn, Path(lake), [COPIED])
            drop_slot(conn, INITIAL_SLOT)
            conn.execute(
                sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                    sql.Identifier(PUBLICATION), sql.Identifier("public", COPIED)
                )
            )
            create_source_slot(conn, SLOT)
        settings = bucketed_settings(lake, width)
        build_table(
            spark,
            DeltaSink(spark, settings),
            table_path(lake, "public", TABLE),
            keys=(1 - seed, 0),
            per_file=args.rows_per_file,
            bucket_width=width,
        )
        config = _streaming_config(dsn, workdir, lake, args)
        writer = SteadyWriter(dsn, args.per_transaction)
        stack.callback(writer.close)
        run = copy_while_streaming(
            config,
            CopyLagSink(DeltaSink(spark, settings)),
            writer,
            rate=args.rate,
            warmup_seconds=args.warmup_seconds,
            before_seconds=args.before_seconds,
            after_seconds=args.after_seconds,
            timeout=args.timeout,
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            check_row_counts(conn, Path(lake), [COPIED, TABLE])
    return Measured(initial_seconds, initial_log.read_seconds, run, size)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when it measured, 1 when it could not."""
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    with contextlib.ExitStack() as stack:
        workdir: Path = args.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="w2d-bench-resync-"))
        )
        try:
            measured = measure(args, workdir)
        except MeasurementError as exc:
            print(f"could not measure: {exc}", file=sys.stderr)
            return 1

    rows, run, initial_seconds = args.rows, measured.online, measured.initial_seconds
    initial_rate = rows / initial_seconds
    online_rate = rows / run.request_to_done
    figures: list[Figure] = [
        median_figure("initial snapshot", [initial_rate], "rows/s", f"{initial_seconds:.1f} s"),
        median_figure(
            "online copy, request to done",
            [online_rate],
            "rows/s",
            f"{run.request_to_done:.1f} s; rewound after {run.request_to_rewound:.1f} s",
        ),
    ]
    ratios = [
        Ratio("online copy / initial snapshot (rows/s)", online_rate / initial_rate, RATE_TARGET)
    ]
    log = run.log
    if log.seconds is not None:
        figures.append(
            median_figure(
                "online copy alone (daemon log)",
                [rows / log.seconds],
                "rows/s",
                f"{log.seconds:.1f} s: temporary slot, read into staging, replacing commit",
            )
        )
        ratios.append(
            Ratio(
                "online copy alone / initial snapshot (rows/s)", rows / log.seconds / initial_rate
            )
        )
    if measured.initial_read_seconds is not None:
        figures.append(
            median_figure(
                "initial snapshot: reading into the table", [measured.initial_read_seconds], "s"
            )
        )
    figures += _copy_phases(run)
    if measured.initial_read_seconds is not None and log.read_seconds is not None:
        ratios.append(
            Ratio(
                "reading: online copy / initial snapshot (rows/s)",
                measured.initial_read_seconds / log.read_seconds,
            )
        )
    figures += run.during.figures("during the copy: ")
    figures += run.alone.figures("before the copy: ")
    ratios.append(
        Ratio(
            f"p99 lag during the copy / {LAG_TARGET:g} s",
            run.during.p99 / LAG_TARGET,
            target=1.0,
            higher_is_better=False,
        )
    )
    during_seconds = run.request_to_rewound + args.after_seconds
    facts: dict[str, object] = {
        "copied table": f"public.{COPIED}, {rows:,} rows, "
        f"{measured.size / 1e6:.0f} MB in PostgreSQL",
        "streaming table": f"public.{TABLE}, {args.table_rows:,} rows before, "
        + layout_description(args.key_bucket_width or None),
        "snapshot.parallelism": args.parallelism,
        "before the copy: rate": f"{run.alone.achieved:,.0f} changes/s written "
        f"(asked {args.rate:,.0f}) for {args.before_seconds:g} s, after "
        f"{args.warmup_seconds:g} s uncounted",
        "before the copy: upkeep between batches": run.upkeep_before,
        "during the copy: upkeep between batches": run.upkeep_during,
        **{
            f"during the copy: {name}": value
            for name, value in run.during.facts(args.rate, round(during_seconds, 1)).items()
            # CopyLagSink times the upkeep from the request on (above); the steady run's
            # own figure covers only its measured window.
            if name != "upkeep between batches"
        },
    }
    print_report(
        "Issue 32: a table copied while streaming (wal2delta resync), embedded Sail",
        figures,
        ratios,
        facts=facts,
        as_json=args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
