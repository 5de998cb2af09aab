"""Every shipped alert fires when it should: ``promtool test rules`` on synthetic series.

The PrometheusRule's groups are written as a plain rules file and each alert gets a case
with the series a daemon (or Prometheus itself, for ``up``) would expose in that failure:
a stuck sink (apply lag growing while the flushed LSN is frozen), a daemon that is down or
absent, a slot about to be invalidated, and so on. A new alert without a case fails
``test_every_alert_has_a_case``. promtool comes from Debian's ``prometheus`` package, which
``make test`` installs; a missing promtool is a failure, not a skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "deploy" / "base" / "monitoring" / "prometheusrule.yaml"

TARGET = {"namespace": "w2d", "source": "orders", "pod": "w2d-orders-0", "service": "wal2delta"}


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    merged = {**TARGET, **labels}
    inner = ", ".join(f'{key}="{value}"' for key, value in sorted(merged.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


# alert -> (input series, evaluation time, labels the alert carries besides severity)
CASES: dict[str, tuple[list[dict[str, str]], str, dict[str, str]]] = {
    "Wal2DeltaDown": ([_series("up", "1 0x20")], "10m", TARGET),
    "Wal2DeltaAbsent": ([], "15m", {}),
    "Wal2DeltaRestarting": (
        [_series("wal2delta_bytes_received_total", "0 100 0 100 0 100 0 100")],
        "7m",
        TARGET,
    ),
    "Wal2DeltaNotReady": ([_series("wal2delta_ready", "1 0x20")], "15m", TARGET),
    # One batch hangs: the gauge grows a minute a minute while work is pending.
    "Wal2DeltaSinkStalled": (
        [_series("wal2delta_sink_stalled_seconds", "0+60x20")],
        "15m",
        TARGET,
    ),
    # The sink is stuck: nothing is acknowledged while the server has WAL to send.
    "Wal2DeltaSlotNotAdvancing": (
        [
            _series("wal2delta_replication_lag_bytes", "1000+1000x60"),
            _series("wal2delta_flushed_lsn", "5000x60"),
        ],
        "50m",
        TARGET,
    ),
    "Wal2DeltaSlotWalAtRisk": (
        [
            _series("wal2delta_slot_wal_status", "0x10", status="reserved"),
            _series("wal2delta_slot_wal_status", "1x10", status="unreserved"),
        ],
        "2m",
        {**TARGET, "status": "unreserved"},
    ),
    "Wal2DeltaSlotSafeWalLow": (
        [_series("wal2delta_slot_safe_wal_size_bytes", "1000000000x20")],
        "10m",
        TARGET,
    ),
    "Wal2DeltaReplicationLagBytesHigh": (
        [_series("wal2delta_replication_lag_bytes", "2000000000x30")],
        "20m",
        TARGET,
    ),
    "Wal2DeltaReplicationLagBytesCritical": (
        [_series("wal2delta_replication_lag_bytes", "20000000000x30")],
        "10m",
        TARGET,
    ),
    # A MERGE hangs: the lag grows by a minute every minute, the flushed LSN is frozen.
    "Wal2DeltaApplyLagHigh": (
        [
            _series("wal2delta_apply_lag_seconds", "0+60x120"),
            _series("wal2delta_flushed_lsn", "5000x120"),
        ],
        "20m",
        TARGET,
    ),
    "Wal2DeltaApplyLagCritical": (
        [
            _series("wal2delta_apply_lag_seconds", "0+60x120"),
            _series("wal2delta_flushed_lsn", "5000x120"),
        ],
        "110m",
        TARGET,
    ),
    "Wal2DeltaPreparedTransactionHeld": (
        [_series("wal2delta_prepared_transactions", "1x80")],
        "70m",
        TARGET,
    ),
    "Wal2DeltaErrors": (
        [_series("wal2delta_errors_total", "0+60x60", component="sink", error_type="SinkError")],
        "40m",
        {"namespace": "w2d", "source": "orders", "component": "sink", "error_type": "SinkError"},
    ),
    "Wal2DeltaReconnecting": (
        [_series("wal2delta_reconnects_total", "0+1x40")],
        "20m",
        TARGET,
    ),
    "Wal2DeltaToastAnomalies": (
        [_series("wal2delta_toast_anomalies_total", "0 0 1 1 1 1", table="public.docs")],
        "4m",
        {**TARGET, "table": "public.docs"},
    ),
    "Wal2DeltaUnrepresentableValues": (
        [
            _series(
                "wal2delta_unrepresentable_values_total",
                "0 0 3 3 3 3",
                table="public.edge",
                column="valid_to",
                reason="infinity",
            )
        ],
        "4m",
        {**TARGET, "table": "public.edge", "column": "valid_to", "reason": "infinity"},
    ),
}


def _rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in document["spec"]["groups"] for rule in group["rules"]]


# The alert's value at evaluation time as its summary prints it (``humanize*`` applied).
VALUES = {
    "Wal2DeltaRestarting": "3",
    "Wal2DeltaReplicationLagBytesHigh": "1.863Gi",
    "Wal2DeltaReplicationLagBytesCritical": "18.63Gi",
    "Wal2DeltaApplyLagHigh": "20m 0s",
    "Wal2DeltaApplyLagCritical": "1h 50m 0s",
    "Wal2DeltaReconnecting": "20",
    "Wal2DeltaSinkStalled": "15m 0s",
}


def _render(template: str, labels: dict[str, str], value: str) -> str:
    """Expand the template forms the rules use: labels, and the (humanized) value."""
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)
    return re.sub(r"\{\{ \$value( \| \w+)? \}\}", value, text)


def test_every_alert_has_a_case() -> None:
    assert {rule["alert"] for rule in _rules()} == set(CASES)


def test_promtool_fires_every_alert_as_expected(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: apt-get install prometheus (make test does)")
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": document["spec"]["groups"]}))
    tests = []
    for rule in _rules():
        series, at, labels = CASES[rule["alert"]]
        annotations = {
            key: _render(text, labels, VALUES.get(rule["alert"], ""))
            for key, text in rule["annotations"].items()
        }
        tests.append(
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": at,
                        "alertname": rule["alert"],
                        "exp_alerts": [
                            {
                                "exp_labels": {**labels, **rule["labels"]},
                                "exp_annotations": annotations,
                            }
                        ],
                    }
                ],
            }
        )
    # Before its `for` has passed, and without the failure, nothing fires.
    tests.append(
        {
            "interval": "1m",
            "input_series": [
                _series("up", "1x30"),
                _series("wal2delta_ready", "1x30"),
                _series("wal2delta_apply_lag_seconds", "0x30"),
                _series("wal2delta_flushed_lsn", "0+100x30"),
                _series("wal2delta_replication_lag_bytes", "1000x30"),
                _series("wal2delta_sink_stalled_seconds", "0 5 0 12 0 3 0x24"),
            ],
            "alert_rule_test": [
                {"eval_time": "25m", "alertname": name, "exp_alerts": []}
                for name in (
                    "Wal2DeltaDown",
                    "Wal2DeltaAbsent",
                    "Wal2DeltaNotReady",
                    "Wal2DeltaApplyLagHigh",
                    "Wal2DeltaSlotNotAdvancing",
                    "Wal2DeltaSinkStalled",
                )
            ],
        }
    )
    test_file = tmp_path / "rules_test.yaml"
    test_file.write_text(yaml.safe_dump({"rule_files": [str(rules_file)], "tests": tests}))
    result = subprocess.run(
        [promtool, "test", "rules", str(test_file)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
