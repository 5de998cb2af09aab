"""The process around one supervisor: Spark session, sink, catalog, health server, signals.

``run_service`` is what ``wal2delta run`` (and the demo) runs: it wires the configuration
into a Delta sink on a Spark session and a ``Supervisor``, serves ``/metrics``,
``/healthz`` and ``/readyz``, and turns SIGTERM/SIGINT into a graceful stop. It returns the
process exit code.
"""

from __future__ import annotations

import signal
import threading
from contextlib import nullcontext
from types import FrameType

import structlog

from capture import EXIT_CONFIG, EXIT_FATAL, EXIT_OK, CaptureError, Metrics, PostgresCatalog
from config import AppConfig, ConfigError, redact_dsn
from daemon.gc_tuning import collector_paced_by_time
from daemon.health import HealthServer, loop_alive_check, readiness_check
from daemon.supervisor import Supervisor
from daemon.wiring import sink_settings, source_conninfo, spark_settings
from decoder import DECODER_KERNEL, Lsn, Wal2DeltaError

log = structlog.get_logger("wal2delta.process")


def install_stop_signals(stop: threading.Event) -> None:
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
    from sink import DeltaSink, create_spark_session, stop_spark_session  # noqa: PLC0415

    spark = create_spark_session(spark_settings(config))
    # The sink asks the source catalog about fast defaults, renames and primary keys;
    # the callable re-reads a password file on every (re)connect.
    catalog = PostgresCatalog(lambda: source_conninfo(config))
    sink = DeltaSink(spark, sink_settings(config), catalog=catalog)
    service = Supervisor(config, sink, metrics=metrics, endpos=endpos, stop_event=stop)
    health: HealthServer | None = None
    if config.metrics.enabled:
        max_lag = config.health.max_lag.total_seconds()

        ready = readiness_check(service.state, max_lag)
        metrics.ready.set_function(lambda: 1.0 if ready()[0] else 0.0)
        health = HealthServer(
            metrics,
            host=config.metrics.host,
            port=config.metrics.port,
            alive=loop_alive_check(lambda: service.state.last_loop_at, limit_seconds=300),
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
