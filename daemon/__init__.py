"""The wal2delta process: CLI, wiring configuration into capture and sink, supervision,
health and metrics endpoints, logging, status, verify, cut and stream recording.

Imports run one way: decoder <- sink <- capture <- daemon <- devtools. ``daemon`` is the
only layer that reads ``config``; it hands ``capture`` and ``sink`` plain settings.
"""

from typing import TYPE_CHECKING, Final

from decoder import lazy_exports

if TYPE_CHECKING:
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

_EXPORTS: Final[dict[str, str]] = {
    "Cut": "daemon.cut",
    "CutError": "daemon.cut",
    "render_cut": "daemon.cut",
    "take_cut": "daemon.cut",
    "collector_paced_by_time": "daemon.gc_tuning",
    "configure_engine_logging": "daemon.logging",
    "configure_logging": "daemon.logging",
    "install_stop_signals": "daemon.process",
    "run_service": "daemon.process",
    "Supervisor": "daemon.supervisor",
    "VerifyReport": "daemon.verify",
    "render_report": "daemon.verify",
    "verify_source": "daemon.verify",
    "capture_settings": "daemon.wiring",
    "configured_keys": "daemon.wiring",
    "prepare_configured_source": "daemon.wiring",
    "published_tables": "daemon.wiring",
    "reconnect_settings": "daemon.wiring",
    "relation_name": "daemon.wiring",
    "sink_settings": "daemon.wiring",
    "spark_settings": "daemon.wiring",
}
"""Each public name and the module that defines it (``module:name`` when renamed): the root
imports a module on the first use of one of its names (PEP 562), so a command imports only
what it uses (docs/decisions/0119)."""

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
