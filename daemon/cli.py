"""The ``wal2delta`` command line.

Sub-commands: ``run`` (the daemon), ``check-config``, ``status``, ``verify``, ``cut``,
``resync``, ``capture``,
``decode``, ``demo``. Exit codes: 0 clean
stop, 1 fatal error, 2 configuration error (or a server that cannot do what the
configuration asks), 3 slot in use by another process (Kubernetes restarts with backoff).

Start-up (docs/decisions/0119-*): this module imports the standard library only, and each
command imports what it uses when it runs (the package roots load their modules on first
use), so ``--version``, ``--help`` and the commands an operator runs during an incident
(``check-config``, ``status``) never load the engine, the sink's writers or the cut. The
plugin commands (``wal2delta.commands``) are loaded only when the command line may name
one or lists the commands: top-level help, an unknown command. ``python -m bench
startup`` measures the start-up; ``tests/unit/daemon/test_cli_imports.py`` pins what each
command imports.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from config import AppConfig
    from decoder import Lsn

    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def _lsn_argument(text: str) -> Lsn:
    from decoder import parse_lsn  # noqa: PLC0415 - see the module docstring

    try:
        return parse_lsn(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _load_or_report(path: str) -> AppConfig | None:
    from config import ConfigError, load_config  # noqa: PLC0415 - see the module docstring

    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"{path}: invalid configuration\n{exc}", file=sys.stderr)
        return None


def _with_config(
    command: Callable[[argparse.Namespace, AppConfig], int],
) -> Callable[[argparse.Namespace], int]:
    """The command, given the configuration ``args.config`` names; a file that does not
    load is reported and the command exits ``EXIT_CONFIG`` without running."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        from capture import EXIT_CONFIG  # noqa: PLC0415 - see the module docstring

        config = _load_or_report(args.config)
        return EXIT_CONFIG if config is None else command(args, config)

    return run


@_with_config
def _cmd_run(args: argparse.Namespace, config: AppConfig) -> int:
    from daemon.logging import (  # noqa: PLC0415 - see the module docstring
        StderrAsJson,
        configure_engine_logging,
        configure_logging,
        uses_json,
    )
    from daemon.process import run_service  # noqa: PLC0415

    configure_logging(config.logging.format, config.logging.level)
    configure_engine_logging(config.logging.level)
    routed = StderrAsJson() if uses_json(config.logging.format) else None
    if routed is not None:
        routed.start()
    try:
        return run_service(config, endpos=args.endpos, tune_gc=True)
    finally:
        if routed is not None:
            routed.stop()


def _cmd_check_config(args: argparse.Namespace) -> int:
    import psycopg  # noqa: PLC0415 - see the module docstring

    from capture import EXIT_CONFIG, EXIT_OK  # noqa: PLC0415
    from daemon.source_check import source_problems  # noqa: PLC0415
    from decoder import cause_line  # noqa: PLC0415

    if (args.config is None) == (args.config_option is None):
        print("check-config: name the configuration file once (FILE or -c FILE)", file=sys.stderr)
        return EXIT_CONFIG
    args.config = args.config or args.config_option
    config = _load_or_report(args.config)
    if config is None:
        return EXIT_CONFIG
    source = config.source
    tables = (
        f"{len(source.tables)} tables"
        if source.tables or source.create_publication
        else "every table they publish"
    )
    try:
        problems = source_problems(config)
    except psycopg.OperationalError as exc:
        from capture import certificate_problem  # noqa: PLC0415 - only on this path

        problem = certificate_problem(exc)
        if problem is not None:  # not an outage: fix the certificate or the settings
            print(f"{args.config}: {problem}", file=sys.stderr)
            return EXIT_CONFIG
        problems = []
        print(
            f"{args.config}: the source could not be reached ({cause_line(exc)}); the table "
            "and column names of sink.column_types and sink.on_unrepresentable were not "
            "checked against it"
        )
    if problems:
        print(f"{args.config}: invalid for its source\n" + "\n".join(problems), file=sys.stderr)
        return EXIT_CONFIG
    print(
        f"{args.config}: ok (slot {source.slot}, publication "
        f"{', '.join(source.publication)}, {tables})"
    )
    return EXIT_OK


@_with_config
def _cmd_status(args: argparse.Namespace, config: AppConfig) -> int:
    from capture import EXIT_OK  # noqa: PLC0415 - see the module docstring
    from daemon.status import collect_status, render_status  # noqa: PLC0415

    print(render_status(collect_status(config), as_json=args.json))
    return EXIT_OK


@_with_config
def _cmd_verify(args: argparse.Namespace, config: AppConfig) -> int:
    import psycopg  # noqa: PLC0415 - see the module docstring

    from capture import EXIT_FATAL  # noqa: PLC0415
    from daemon.logging import configure_engine_logging, configure_logging  # noqa: PLC0415
    from daemon.verify import render_report, verify_source  # noqa: PLC0415
    from decoder import Wal2DeltaError  # noqa: PLC0415

    configure_logging(config.logging.format, "warning")
    configure_engine_logging("error")
    tables = [name for group in args.tables or [] for name in group.split(",") if name]
    try:
        report = verify_source(config, tables=tables or None, wait=args.wait)
    except (psycopg.Error, Wal2DeltaError) as exc:
        print(f"verify: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FATAL
    print(render_report(report, as_json=args.json))
    return report.exit_code


@_with_config
def _cmd_cut(args: argparse.Namespace, config: AppConfig) -> int:
    from capture import EXIT_CONFIG, EXIT_FATAL, EXIT_OK  # noqa: PLC0415 - module docstring
    from daemon.cut import CutError, parse_point, render_cut, take_cut  # noqa: PLC0415

    try:
        at = None if args.at is None else parse_point(args.at)
    except ValueError as exc:
        print(f"--at: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        cut = take_cut(config, at)
    except CutError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_FATAL
    print(render_cut(cut, as_json=args.json))
    return EXIT_OK


@_with_config
def _cmd_resync(args: argparse.Namespace, config: AppConfig) -> int:
    import psycopg  # noqa: PLC0415 - see the module docstring

    from capture import EXIT_CONFIG, EXIT_FATAL, EXIT_OK  # noqa: PLC0415
    from daemon.resync import request_resync, wait_for_copies  # noqa: PLC0415
    from decoder import cause_line  # noqa: PLC0415

    tables = [name for group in args.tables for name in group.split(",") if name]
    try:
        request = request_resync(config, tables)
    except ValueError as exc:
        print(f"resync: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except psycopg.Error as exc:
        print(f"resync: cannot write the request on the source: {cause_line(exc)}", file=sys.stderr)
        return EXIT_FATAL
    for table in request.unpublished:
        print(f"resync: {table} is not published; its copy will be empty", file=sys.stderr)
    print(f"resync requested for {', '.join(request.tables)} at {request.lsn}")
    if not args.wait:
        return EXIT_OK
    pending = wait_for_copies(config, request, args.timeout)
    if pending:
        print(
            f"resync: not copied after {args.timeout:.0f} s: {', '.join(pending)}", file=sys.stderr
        )
        return EXIT_FATAL
    print(f"copied: {', '.join(request.tables)}")
    return EXIT_OK


@_with_config
def _cmd_capture(args: argparse.Namespace, config: AppConfig) -> int:
    import threading  # noqa: PLC0415 - see the module docstring
    from pathlib import Path  # noqa: PLC0415

    import structlog  # noqa: PLC0415

    from capture import EXIT_FATAL, EXIT_OK, CaptureError  # noqa: PLC0415
    from daemon.logging import configure_logging  # noqa: PLC0415
    from daemon.process import install_stop_signals  # noqa: PLC0415
    from daemon.recording import RecordingSink, StreamRecorder  # noqa: PLC0415
    from daemon.supervisor import Supervisor  # noqa: PLC0415
    from decoder import Wal2DeltaError  # noqa: PLC0415

    log = structlog.get_logger("wal2delta.cli")
    configure_logging(config.logging.format, config.logging.level)
    recorder = StreamRecorder(Path(args.output))
    sink = RecordingSink(recorder)
    stop = threading.Event()
    install_stop_signals(stop)
    service = Supervisor(
        config,
        sink,
        endpos=args.endpos,
        stop_event=stop,
        frame_tap=recorder.write,
        frames_tap=recorder.write_frames,
        replay_changes=False,
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
    from pathlib import Path  # noqa: PLC0415 - see the module docstring

    from capture import EXIT_FATAL, EXIT_OK  # noqa: PLC0415
    from daemon.recording import decode_recording, dump_json_lines  # noqa: PLC0415
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


PLUGIN_GROUP = "wal2delta.commands"
"""Entry-point group of extra subcommands: ``register(commands)`` adds one subparser.

The demo (``devtools``) joins the CLI this way, so the runtime never imports the
development tooling, and a runtime installed without the ``devtools`` extra has no demo.
"""


def _register_plugins(commands: Commands) -> None:
    from importlib.metadata import entry_points  # noqa: PLC0415 - see the module docstring

    for entry in entry_points(group=PLUGIN_GROUP):
        try:
            register = entry.load()
        except ImportError as exc:
            import structlog  # noqa: PLC0415

            # Installed without the extra its dependencies come with.
            structlog.get_logger("wal2delta.cli").debug(
                "command unavailable", command=entry.name, error=str(exc)
            )
            continue
        register(commands)


def _may_name_a_plugin(arguments: Sequence[str], builtin: Iterable[str]) -> bool:
    """Whether parsing ``arguments`` may need the plugin commands: the command is not a
    built-in one, or the parser will list the commands (help, an unknown option, no
    command). ``--version`` before any of those needs none; neither does a built-in
    command, whatever follows it (its own ``--help`` included)."""
    for argument in arguments:
        if argument == "--version":
            return False
        if argument.startswith("-"):
            return True
        return argument not in builtin
    return True


class _VersionAction(argparse.Action):
    """``--version``: the installed version, read (``importlib.metadata``) only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings,
            dest,
            default=argparse.SUPPRESS,
            nargs=0,
            help="show program's version number and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from daemon.version import package_version  # noqa: PLC0415 - module docstring

        print(f"wal2delta {package_version()}")
        parser.exit()


def build_parser(*, plugins: bool = True) -> argparse.ArgumentParser:
    """The command line's parser, with the plugin commands unless ``plugins`` is false."""
    parser, commands = _builtin_parser()
    if plugins:
        _register_plugins(commands)
    return parser


def _builtin_parser() -> tuple[argparse.ArgumentParser, Commands]:
    parser = argparse.ArgumentParser(
        prog="wal2delta",
        description="Stream PostgreSQL logical replication (pgoutput) into Delta Lake tables.",
    )
    parser.add_argument("--version", action=_VersionAction)
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
    check.add_argument("config", nargs="?", help="YAML configuration file")
    check.add_argument(
        "-c", "--config", dest="config_option", help="YAML configuration file (as for run)"
    )
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

    verify = commands.add_parser(
        "verify", help="compare every replicated table with its source (exit 1 on differences)"
    )
    verify.add_argument("-c", "--config", required=True, help="YAML configuration file")
    verify.add_argument(
        "--tables", nargs="+", metavar="TABLE", help="only these tables (schema.table, comma lists)"
    )
    verify.add_argument("--json", action="store_true", help="machine-readable output")
    verify.add_argument(
        "--wait",
        type=float,
        default=30.0,
        help="seconds to wait for the slot to pass the compared LSN (default 30)",
    )
    verify.set_defaults(func=_cmd_verify)

    cut = commands.add_parser(
        "cut", help="Delta versions of every table at one source transaction boundary"
    )
    cut.add_argument("-c", "--config", required=True, help="YAML configuration file")
    cut.add_argument(
        "--at",
        metavar="LSN|TIMESTAMP",
        help="the newest boundary at or before this LSN (X/X) or ISO 8601 time (default: newest)",
    )
    cut.add_argument("--json", action="store_true", help="machine-readable output")
    cut.set_defaults(func=_cmd_cut)

    resync = commands.add_parser(
        "resync", help="ask the running daemon to copy tables again while it streams"
    )
    resync.add_argument("-c", "--config", required=True, help="YAML configuration file")
    resync.add_argument(
        "--tables", nargs="+", required=True, metavar="TABLE", help="schema.table (comma lists)"
    )
    resync.add_argument(
        "--wait", action="store_true", help="return once every table's copy is done"
    )
    resync.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds --wait waits (default 3600)"
    )
    resync.set_defaults(func=_cmd_resync)
    return parser, commands


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    parser, commands = _builtin_parser()
    if _may_name_a_plugin(arguments, commands.choices):
        _register_plugins(commands)
    args = parser.parse_args(arguments)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
