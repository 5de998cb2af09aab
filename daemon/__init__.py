"""The wal2delta process: CLI, wiring configuration into capture and sink, supervision,
health and metrics endpoints, logging, status, verify, cut and stream recording.

Imports run one way: decoder <- sink <- capture <- daemon <- devtools. ``daemon`` is the
only layer that reads ``config``; it hands ``capture`` and ``sink`` plain settings.
"""

from daemon.cut import Cut, CutError, render_cut, take_cut
from daemon.gc_tuning import collector_paced_by_time
from daemon.logging import configure_engine_logging, configure_logging
from daemon.process import install_stop_signals, run_service
from daemon.supervisor import Supervisor
from daemon.verify import VerifyReport, render_report, verify_source
from daemon.wiring import (
    capture_settings,
    configured_keys,
    prepare_configured_source,
    published_tables,
    reconnect_settings,
    relation_name,
    sink_settings,
    spark_settings,
)

__all__ = [
    "Cut",
    "CutError",
    "Supervisor",
    "VerifyReport",
    "capture_settings",
    "collector_paced_by_time",
    "configure_engine_logging",
    "configure_logging",
    "configured_keys",
    "install_stop_signals",
    "prepare_configured_source",
    "published_tables",
    "reconnect_settings",
    "relation_name",
    "render_cut",
    "render_report",
    "run_service",
    "sink_settings",
    "spark_settings",
    "take_cut",
    "verify_source",
]
