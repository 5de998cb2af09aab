"""The process around one supervisor: Spark session, sink, catalog, health server, signals.

``run_service`` is what ``wal2delta run`` (and the demo) runs: it wires the configuration
into a Delta sink on a Spark session and a ``Supervisor``, serves ``/metrics``,
``/healthz`` and ``/readyz``, and turns SIGTERM/SIGINT into a graceful stop. It returns the
process exit code.

Every call into the engine or the store runs under ``sink.spark.call_timeout``
(``sink/engine/deadline.py``). One that passes it ends the process at once with
``EXIT_ENGINE_DEADLINE`` (``exit_on_overdue_call``), whatever the other threads do: the
call cannot be cancelled for sure (Sail runs an interrupted operation to its end), so no
new session may start while it might still commit, and a graceful stop would call into
the same stuck engine. Nothing past the durable position was acknowledged; the restarted
process resumes from the slot's confirmed position, and the embedded engine (a classic
JVM too) ends with this process. A remote Spark Connect engine is asked to interrupt its
operations first, for at most ``_INTERRUPT_SECONDS``.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import nullcontext
from types import FrameType
from typing import TYPE_CHECKING

import structlog

from capture import (
    EXIT_CONFIG,
    EXIT_ENGINE_DEADLINE,
    EXIT_FATAL,
    EXIT_OK,
    CaptureError,
    Metrics,
    PostgresCatalog,
)
from config import AppConfig, ConfigError, redact_dsn
from daemon.gc_tuning import collector_paced_by_time
from daemon.health import HealthServer, loop_alive_check, readiness_check
from daemon.logging import end_stderr_routing
from daemon.supervisor import Supervisor
from daemon.wiring import sink_settings, source_conninfo, spark_settings
from decoder import DECODER_KERNEL, Lsn, Wal2DeltaError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sink import OverdueCall, SparkSettings

log = structlog.get_logger("wal2delta.process")

_INTERRUPT_SECONDS = 5.0
"""Longest a remote engine's ``interruptAll`` may take before the process exits anyway."""


def install_stop_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT ask the loop to stop: drain, acknowledge, exit 0."""

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("stop requested", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def exit_on_overdue_call(call: OverdueCall, interrupt: Callable[[], object] | None = None) -> None:
    """End the process: an engine or store call passed its deadline (the module docstring).

    ``interrupt`` (a remote engine's ``interruptAll``) runs first, on its own thread, for
    at most ``_INTERRUPT_SECONDS``.
    """
    log.error(
        "stopped by error",
        error=call.describe(),
        error_type="EngineCallOverdue",
        exit_code=EXIT_ENGINE_DEADLINE,
        consequence="the process exits; nothing more is acknowledged, and the restarted "
        "daemon resumes from the slot's confirmed position",
    )
    if interrupt is not None:
        asking = threading.Thread(target=interrupt, name="wal2delta-interrupt", daemon=True)
        asking.start()
        asking.join(_INTERRUPT_SECONDS)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    end_stderr_routing()
    os._exit(EXIT_ENGINE_DEADLINE)


def run_service(
    config: AppConfig,
    *,
    endpos: Lsn | None = None,
    stop_event: threading.Event | None = None,
    install_signal_handlers: bool = True,
    tune_gc: bool = False,
) -> int:
    """Run the daemon with ``config`` until stopped; return the process exit code.

    ``tune_gc`` applies the daemon's garbage-collector settings (``daemon.gc_tuning``),
    process-wide: for the daemon's own process, not for a caller that embeds it.
    """
    stop = stop_event if stop_event is not None else threading.Event()
    if install_signal_handlers:
        install_stop_signals(stop)

    metrics = Metrics()
    log.info(
        "starting",
        source=redact_dsn(config.source.dsn),
        slot=config.source.slot,
        sink_path=str(config.sink.path),
        spark_mode=config.sink.spark.mode,
        decoder_kernel=DECODER_KERNEL,
    )
    # Spark is imported only by the commands that write Delta: the others start fast.
    from sink import CallDeadlines, install_call_deadlines  # noqa: PLC0415

    engine = spark_settings(config)
    remote: list[SparkSession] = []  # the remote engine to interrupt, once there is one
    deadlines = (
        None
        if engine.call_timeout is None
        else CallDeadlines(
            engine.call_timeout,
            lambda call: exit_on_overdue_call(call, remote[0].interruptAll if remote else None),
        )
    )
    previous_deadlines = install_call_deadlines(deadlines)
    try:
        return _run_with_engine(
            config,
            engine,
            endpos=endpos,
            stop=stop,
            metrics=metrics,
            remote=remote,
            tune_gc=tune_gc,
        )
    finally:
        install_call_deadlines(previous_deadlines)
        if deadlines is not None:
            deadlines.stop()


def _run_with_engine(
    config: AppConfig,
    engine: SparkSettings,
    *,
    endpos: Lsn | None,
    stop: threading.Event,
    metrics: Metrics,
    remote: list[SparkSession],
    tune_gc: bool,
) -> int:
    """``run_service`` once the engine's call deadline is kept."""
    from sink import DeltaSink, create_spark_session, stop_spark_session  # noqa: PLC0415

    spark = create_spark_session(engine)
    if engine.mode == "connect":
        remote.append(spark)
    # The sink asks the source catalog about fast defaults, renames and primary keys;
    # the callable re-reads a password file on every (re)connect.
    catalog = PostgresCatalog(lambda: source_conninfo(config))
    sink = DeltaSink(spark, sink_settings(config), catalog=catalog)
    service = Supervisor(config, sink, metrics=metrics, endpos=endpos, stop_event=stop)
    health: HealthServer | None = None
    if config.metrics.enabled:
        max_lag = config.health.max_lag.total_seconds()
        stall = config.health.stall_timeout.total_seconds()

        ready = readiness_check(
            service.state, max_lag, sink=service.sink_progress, stall_seconds=stall
        )
        metrics.ready.set_function(lambda: 1.0 if ready()[0] else 0.0)
        health = HealthServer(
            metrics,
            host=config.metrics.host,
            port=config.metrics.port,
            alive=loop_alive_check(
                lambda: service.state.last_loop_at,
                limit_seconds=300,
                sink=service.sink_progress,
                stall_seconds=stall,
            ),
            ready=ready,
        )
        health.start()
    try:
        with collector_paced_by_time() if tune_gc else nullcontext():
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
