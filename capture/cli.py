"""The ``wal2delta`` command line.

Sub-commands: ``run`` (the daemon), ``check-config``, ``demo``. Exit codes: 0 clean
stop, 1 fatal error, 2 configuration error (or a server that cannot do what the
configuration asks), 3 slot in use by another process (Kubernetes restarts with backoff).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import structlog

from capture.catalog import PostgresCatalog
from capture.errors import EXIT_CONFIG, EXIT_FATAL, EXIT_OK, CaptureError
from capture.gc_tuning import tune_garbage_collector
from capture.health import HealthServer, loop_alive_check
from capture.logging import configure_logging
from capture.metrics import Metrics
from capture.service import CaptureService
from config import AppConfig, ConfigError, load_config, parse_table_name, redact_dsn
from decoder import Lsn, Wal2DeltaError, parse_lsn
from sink import KeyBuckets, SinkSettings, SparkSettings

log = structlog.get_logger("wal2delta.cli")


def sink_settings(config: AppConfig) -> SinkSettings:
    """Translate the sink section of the configuration for ``sink``."""
    sink = config.sink
    return SinkSettings(
        path=str(sink.path),
        lsn_column=sink.metadata.lsn_column,
        commit_time_column=sink.metadata.commit_time_column,
        deleted_column=sink.metadata.deleted_column,
        soft_delete=sink.soft_delete,
        messages_table=sink.messages == "table",
        keys=configured_keys(config),
        on_missing_key=config.source.on_missing_key,
        key_buckets={
            relation_name(name): KeyBuckets(width=entry.width, column=entry.column)
            for name, entry in sink.partition_by_key.items()
        },
        key_bucket_column=sink.metadata.key_bucket_column,
        column_names=sink.column_names,
    )


def configured_keys(config: AppConfig) -> dict[str, tuple[str, ...]]:
    """MERGE keys from ``source.tables[].key`` and ``sink.keys`` (they must agree).

    Keyed by the sink's table names (``relation_name``).
    """
    keys = {relation_name(name): tuple(columns) for name, columns in config.sink.keys.items()}
    for table in config.source.tables:
        if table.key is not None:
            keys[relation_name(table.qualified_name)] = tuple(table.key)
    return keys


def relation_name(configured: str) -> str:
    """The sink's name of a configured table: ``schema.table`` as the relation spells it.

    The configuration quotes a part that contains a dot (``public."a.b"``); pgoutput's
    relation names are exact, and the sink looks tables up by ``Relation.qualified_name``
    (``public.a.b``).
    """
    schema, table = parse_table_name(configured)
    return f"{schema}.{table}"


def spark_settings(config: AppConfig) -> SparkSettings:
    spark = config.sink.spark
    return SparkSettings(mode=spark.mode, url=spark.url, conf=dict(spark.conf))


def _lsn_argument(text: str) -> Lsn:
    try:
        return parse_lsn(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _load_or_report(path: str) -> AppConfig | None:
    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"{path}: invalid configuration\n{exc}", file=sys.stderr)
        return None


def _install_stop_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT ask the loop to stop: drain, acknowledge, exit 0."""

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("stop requested", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def run_service(
    config: AppConfig,
    *,
    endpos: Lsn | None = None,
    stop_event: threading.Event | None = None,
    install_signal_handlers: bool = True,
    tune_gc: bool = False,
) -> int:
    """Run the daemon with ``config`` until stopped; return the process exit code.

    ``tune_gc`` applies the daemon's garbage-collector settings (``capture.gc_tuning``),
    process-wide: for the daemon's own process, not for a caller that embeds it.
    """
    stop = stop_event if stop_event is not None else threading.Event()
    if install_signal_handlers:
        _install_stop_signals(stop)

    metrics = Metrics()
    log.info(
        "starting",
        source=redact_dsn(config.source.dsn),
        slot=config.source.slot,
        sink_path=str(config.sink.path),
        spark_mode=config.sink.spark.mode,
    )
    # Spark is imported only by the commands that write Delta: the others start fast.
    from sink import DeltaSink, create_spark_session, stop_spark_session  # noqa: PLC0415

    spark = create_spark_session(spark_settings(config))
    # The sink asks the source catalog about fast defaults, renames and primary keys;
    # the callable re-reads a password file on every (re)connect.
    catalog = PostgresCatalog(config.source.conninfo)
    sink = DeltaSink(spark, sink_settings(config), catalog=catalog)
    service = CaptureService(config, sink, metrics=metrics, endpos=endpos, stop_event=stop)
    health: HealthServer | None = None
    if config.metrics.enabled:
        max_lag = config.health.max_lag.total_seconds()

        def ready() -> tuple[bool, str]:
            if not service.state.connected:
                return False, "not connected to the source"
            applied = service.state.last_applied_commit_time
            lagging = applied is not None and time.time() - applied > max_lag
            if lagging and service.state.pending > 0:
                return False, f"apply lag above {max_lag:.0f}s"
            return True, "ok"

        health = HealthServer(
            metrics,
            host=config.metrics.host,
            port=config.metrics.port,
            alive=loop_alive_check(lambda: service.state.last_loop_at, limit_seconds=300),
            ready=ready,
        )
        health.start()
    if tune_gc:
        tune_garbage_collector()
    try:
        service.run()
    except Wal2DeltaError as exc:
        log.error("stopped by error", error=str(exc), error_type=type(exc).__name__)
        return exc.exit_code if isinstance(exc, CaptureError) else EXIT_FATAL
    except ConfigError as exc:
        # A password file that disappeared or became unreadable while running.
        log.error("configuration error", error=str(exc))
        return EXIT_CONFIG
    finally:
        if health is not None:
            health.stop()
        sink.close()
        catalog.close()
        stop_spark_session(spark)
    return EXIT_OK


def _cmd_run(args: argparse.Namespace) -> int:
    config = _load_or_report(args.config)
    if config is None:
        return EXIT_CONFIG
    configure_logging(config.logging.format, config.logging.level)
    return run_service(config, endpos=args.endpos, tune_gc=True)


def _cmd_check_config(args: argparse.Namespace) -> int:
    config = _load_or_report(args.config)
    if config is None:
        return EXIT_CONFIG
    source = config.source
    tables = (
        f"{len(source.tables)} tables"
        if source.tables or source.create_publication
        else "every table they publish"
    )
    print(
        f"{args.config}: ok (slot {source.slot}, publication "
        f"{', '.join(source.publication)}, {tables})"
    )
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    from capture.status import collect_status, render_status  # noqa: PLC0415

    config = _load_or_report(args.config)
    if config is None:
        return EXIT_CONFIG
    print(render_status(collect_status(config), as_json=args.json))
    return EXIT_OK


def _cmd_capture(args: argparse.Namespace) -> int:
    from capture.recording import RecordingSink, StreamRecorder  # noqa: PLC0415

    config = _load_or_report(args.config)
    if config is None:
        return EXIT_CONFIG
    configure_logging(config.logging.format, config.logging.level)
    recorder = StreamRecorder(Path(args.output))
    sink = RecordingSink(recorder)
    stop = threading.Event()
    _install_stop_signals(stop)
    service = CaptureService(
        config, sink, endpos=args.endpos, stop_event=stop, frame_tap=recorder.write
    )
    try:
        service.run()
    except Wal2DeltaError as exc:
        log.error("stopped by error", error=str(exc), error_type=type(exc).__name__)
        return exc.exit_code if isinstance(exc, CaptureError) else EXIT_FATAL
    finally:
        sink.close()
    log.info("recording written", path=args.output, records=recorder.records)
    return EXIT_OK


def _cmd_decode(args: argparse.Namespace) -> int:
    from capture.recording import decode_recording, dump_json_lines  # noqa: PLC0415
    from decoder import DecodeError, ProtocolOptions, StreamingMode  # noqa: PLC0415

    streaming: StreamingMode = args.streaming or ("on" if args.proto >= 2 else "off")
    options = ProtocolOptions(
        proto_version=args.proto,
        streaming=streaming,
        two_phase=args.proto >= 3,
        binary=False,
        messages=True,
    )
    try:
        for line in dump_json_lines(decode_recording(Path(args.file), options)):
            print(line)
    except DecodeError as exc:
        print(f"{args.file}: {exc}", file=sys.stderr)
        return EXIT_FATAL
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from capture.demo import run_demo  # noqa: PLC0415 - the demo pulls in the server helper

    return run_demo(
        workdir=Path(args.dir), lake=Path(args.lake), rounds=args.rounds, keep=args.keep
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wal2delta",
        description="Stream PostgreSQL logical replication (pgoutput) into Delta Lake tables.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the daemon for one source database")
    run.add_argument("-c", "--config", required=True, help="YAML configuration file")
    run.add_argument(
        "--endpos",
        type=_lsn_argument,
        help="stop once everything committed up to this LSN (X/X) is in Delta and acknowledged",
    )
    run.set_defaults(func=_cmd_run)

    check = commands.add_parser("check-config", help="validate a configuration file")
    check.add_argument("config", help="YAML configuration file")
    check.set_defaults(func=_cmd_check_config)

    capture = commands.add_parser(
        "capture", help="record the raw replication stream to a file (for bug reports)"
    )
    capture.add_argument("-c", "--config", required=True, help="YAML configuration file")
    capture.add_argument("-o", "--output", required=True, help="recording file to append to")
    capture.add_argument("--endpos", type=_lsn_argument, help="stop at this LSN (X/X)")
    capture.set_defaults(func=_cmd_capture)

    decode = commands.add_parser("decode", help="decode a recording to JSON lines")
    decode.add_argument("file", help="recording written by `wal2delta capture`")
    decode.add_argument("--proto", type=int, default=4, choices=[1, 2, 3, 4])
    decode.add_argument(
        "--streaming", choices=["off", "on", "parallel"], help="as negotiated when recorded"
    )
    decode.set_defaults(func=_cmd_decode)

    status = commands.add_parser("status", help="slot, lag, retained WAL and Delta tables")
    status.add_argument("-c", "--config", required=True, help="YAML configuration file")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=_cmd_status)

    demo = commands.add_parser(
        "demo", help="embedded PostgreSQL + Sail + local Delta folder, with a live workload"
    )
    demo.add_argument("--dir", default=".wal2delta-demo", help="working directory")
    demo.add_argument("--lake", default="lake", help="where the Delta tables land")
    demo.add_argument("--rounds", type=int, default=20, help="workload rounds")
    demo.add_argument("--keep", action="store_true", help="keep the PostgreSQL data directory")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
