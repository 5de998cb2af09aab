"""structlog configuration: JSON in containers, key=value on a terminal.

Configured once at start-up. Standard-library loggers (psycopg, py4j, pyspark, grpc) are
routed through ``ProcessorFormatter`` so every line has the same shape. Row values, DSNs
and secrets are never logged; LSNs are logged in PostgreSQL's ``X/X`` form.

Tracebacks carry no local variables, in either format. A frame's locals are where a
secret hides (a connection string with its password, a settings object): structlog's
``dict_tracebacks`` renders every frame's locals by default, and its console renderer
would too if rich were installed. ``JSON_TRACEBACKS`` and ``CONSOLE_TRACEBACKS`` say
``show_locals=False`` / a plain traceback explicitly, whatever is installed.
"""

from __future__ import annotations

import json
import logging as stdlib_logging
import os
import re
import sys
import threading
from datetime import UTC, datetime
from typing import Literal

import structlog

LogFormat = Literal["auto", "json", "console"]

# env_logger levels of the embedded Spark engine (Sail is Rust), for each of ours.
_ENGINE_LEVELS = {"debug": "debug", "info": "info", "warning": "warn", "error": "error"}

JSON_TRACEBACKS: structlog.typing.Processor = structlog.processors.ExceptionRenderer(
    structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
)
"""``exc_info`` as a structured ``exception`` field: frames with file, line and function,
never their local variables (``structlog.processors.dict_tracebacks`` shows them)."""

CONSOLE_TRACEBACKS: structlog.typing.ExceptionRenderer = structlog.dev.plain_traceback
"""The console's tracebacks: the standard library's, without locals (structlog's default
is rich's traceback with ``show_locals=True`` when rich is installed)."""


def uses_json(fmt: LogFormat) -> bool:
    """Whether ``fmt`` renders JSON on this process's stderr."""
    return fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())


def configure_engine_logging(level: str) -> None:
    """Make the embedded engine's own logger follow ``logging.level`` (``RUST_LOG``, read
    when the engine starts); an explicit ``RUST_LOG`` in the environment wins."""
    os.environ.setdefault("RUST_LOG", _ENGINE_LEVELS.get(level.lower(), "warn"))


def configure_logging(fmt: LogFormat = "auto", level: str = "info") -> None:
    """Configure structlog and the standard library root logger."""
    use_json = uses_json(fmt)
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor
    if use_json:
        shared.append(JSON_TRACEBACKS)
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=CONSOLE_TRACEBACKS
        )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = stdlib_logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                renderer,
            ],
        )
    )
    root = stdlib_logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("py4j", "pyspark", "grpc", "urllib3"):
        stdlib_logging.getLogger(noisy).setLevel(stdlib_logging.WARNING)


_ENGINE_LINE = re.compile(
    r"^\[(?P<ts>\S+)\s+(?P<level>[A-Z]+)\s+(?P<target>[^\]]+)\]\s?(?P<msg>.*)$"
)
_LEVELS = {"WARN": "warning", "ERROR": "error", "INFO": "info", "DEBUG": "debug", "TRACE": "debug"}


def as_json_line(line: str) -> str:
    """A line written to stderr by anything else than structlog, as one of our JSON events.

    JSON lines (ours) pass unchanged; the engine's ``[time LEVEL target] message`` lines
    keep their time, level and target; anything else (a library printing, a traceback line)
    becomes a warning event of logger ``stderr``.
    """
    text = line.rstrip("\n")
    if text.startswith("{"):
        try:
            json.loads(text)
        except ValueError:
            pass
        else:
            return text
    match = _ENGINE_LINE.match(text)
    if match is not None:
        event = {
            "event": match["msg"],
            "level": _LEVELS.get(match["level"], match["level"].lower()),
            "logger": match["target"],
            "timestamp": match["ts"],
        }
    else:
        event = {
            "event": text,
            "level": "warning",
            "logger": "stderr",
            "timestamp": datetime.now(UTC).isoformat(),
        }
    return json.dumps(event)


_routing: list[StderrAsJson] = []
"""The ``StderrAsJson`` active in this process, if any, for ``end_stderr_routing``."""


def end_stderr_routing() -> None:
    """Forward what is still in the pipe of an active ``StderrAsJson`` and restore the
    real stderr: for a process about to end with ``os._exit``, which runs no clean-up."""
    for routing in list(_routing):
        routing.stop()


class StderrAsJson:
    """Every line written to file descriptor 2 leaves the process as JSON.

    The embedded engine (Rust) and native libraries write to the descriptor directly, past
    structlog. While active, descriptor 2 is a pipe; a thread reads it and writes each line,
    converted by ``as_json_line``, to the real stderr. ``stop`` restores the descriptor and
    waits for the last lines. For the daemon's own process only (not inside test runners,
    which capture the descriptor themselves).
    """

    def __init__(self) -> None:
        self._saved: int | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        sys.stderr.flush()
        self._saved = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        out = os.fdopen(os.dup(self._saved), "w", encoding="utf-8", errors="replace")

        def forward() -> None:
            with os.fdopen(read_end, encoding="utf-8", errors="replace") as lines, out:
                for line in lines:
                    out.write(as_json_line(line) + "\n")
                    out.flush()

        self._thread = threading.Thread(target=forward, name="wal2delta-stderr", daemon=True)
        self._thread.start()
        _routing[:] = [self]

    def stop(self) -> None:
        if self in _routing:
            _routing.clear()
        if self._saved is None:
            return
        sys.stderr.flush()
        os.dup2(self._saved, 2)  # closes the pipe's last write end: the reader ends
        os.close(self._saved)
        self._saved = None
        if self._thread is not None:
            self._thread.join(5)
