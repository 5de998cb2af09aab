"""Monitoring: metric list, ServiceMonitor, PrometheusRule, Grafana dashboard, docs."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from deploy_artefacts import DEPLOY, ROOT, metric_list, of_kind, render, unknown_metrics

RULES = DEPLOY / "base" / "monitoring" / "prometheusrule.yaml"
DASHBOARD = DEPLOY / "grafana" / "wal2delta.json"


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in document["spec"]["groups"] for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    expressions = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            expressions.append(variable["definition"])
    return expressions


def test_metric_list_follows_prometheus_naming() -> None:
    specs = metric_list()
    assert len(specs) == 42
    for spec in specs.values():
        assert spec.name.startswith("wal2delta_")
        assert spec.kind in {"counter", "gauge", "histogram"}
        assert spec.name.endswith("_total") == (spec.kind == "counter"), spec.name
        assert re.fullmatch(r"[a-z_]*", "".join(spec.labels))


def test_unknown_metric_detection_catches_typos_and_foreign_series() -> None:
    assert unknown_metrics('rate(wal2delta_changes_total{table="x"}[5m])') == set()
    assert unknown_metrics("wal2delta_merge_duration_seconds_bucket") == set()
    assert unknown_metrics("wal2delta_change_total") == {"wal2delta_change_total"}
    assert unknown_metrics("wal2delta_ready_bucket") == {"wal2delta_ready_bucket"}
    assert unknown_metrics('pg_replication_slots_active{slot="x"} == 0') == {
        "pg_replication_slots_active"
    }
    assert unknown_metrics('up{service=~"wal2delta.*"} == 0') == set()


def test_rules_are_complete_and_link_to_a_runbook_section() -> None:
    operations = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in operations.splitlines()
        if line.startswith("#")
    }
    for rule in rules():
        assert {"alert", "expr", "labels", "annotations"} <= set(rule), rule
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]
        page, _, anchor = rule["annotations"]["runbook"].partition("#")
        assert page == "docs/operations.md"
        assert anchor in headings, f"{rule['alert']}: no section #{anchor} in {page}"


def test_rules_cover_lag_readiness_down_and_errors() -> None:
    expressions = " ".join(rule["expr"] for rule in rules())
    for needle in (
        "wal2delta_replication_lag_bytes",
        "wal2delta_apply_lag_seconds",
        "wal2delta_ready",
        "wal2delta_flushed_lsn",
        "absent(up",
        "== 0",
        "wal2delta_errors_total",
    ):
        assert needle in expressions, needle


@pytest.mark.parametrize("rule", rules(), ids=lambda rule: rule["alert"])
def test_rule_expressions_use_only_listed_metrics(rule: dict[str, Any]) -> None:
    assert unknown_metrics(rule["expr"]) == set()


def test_dashboard_uses_only_listed_metrics() -> None:
    expressions = dashboard_expressions()
    assert expressions
    for expression in expressions:
        assert unknown_metrics(expression) == set(), expression


def test_dashboard_shows_what_operators_need() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"] == "wal2delta"
    text = "\n".join(dashboard_expressions())
    for needle in (
        "max by (source) (wal2delta_replication_lag_bytes",
        "max by (source) (wal2delta_apply_lag_seconds",
        "sum by (source, table) (rate(wal2delta_changes_total",
        "histogram_quantile(0.5, sum by (source, le) (rate(wal2delta_merge_duration_seconds_bucket",
        "histogram_quantile(0.95, sum by (source, le) "
        "(rate(wal2delta_merge_duration_seconds_bucket",
        "histogram_quantile(0.99, sum by (source, le) "
        "(rate(wal2delta_merge_duration_seconds_bucket",
        "wal2delta_reconnects_total",
        "wal2delta_errors_total",
        "wal2delta_snapshot_tables_remaining",
        "wal2delta_snapshot_rows_total",
    ):
        assert needle in text, needle
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_filters_by_the_source_label_the_service_monitor_adds() -> None:
    [monitor] = of_kind(render("base"), "ServiceMonitor")
    [endpoint] = monitor["spec"]["endpoints"]
    targets = {r["targetLabel"] for r in endpoint.get("relabelings", [])}
    assert "source" in targets
    for expression in dashboard_expressions():
        if "wal2delta_" in expression and "label_values" not in expression:
            assert 'source=~"$source"' in expression, expression


@pytest.mark.parametrize("name", ["base", "example-two-sources"])
def test_service_monitor_scrapes_every_wal2delta_service_by_port_name(name: str) -> None:
    documents = render(name)
    [monitor] = of_kind(documents, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    [endpoint] = monitor["spec"]["endpoints"]
    services = of_kind(documents, "Service")
    assert services
    for service in services:
        labels = service["metadata"]["labels"]
        assert all(labels.get(key) == value for key, value in selector.items())
        assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"


def test_prometheus_rule_renders_as_a_prometheus_operator_resource() -> None:
    [rule] = of_kind(render("base"), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"]


def test_metrics_reference_documents_exactly_the_listed_metrics() -> None:
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(wal2delta_[a-z0-9_]+)` \|", text, re.MULTILINE))
    assert documented == set(metric_list())
    for spec in metric_list().values():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{spec.name}` |"))
        assert f"| {spec.kind} |" in row, spec.name
        for label in spec.labels:
            assert f"`{label}`" in row, (spec.name, label)


def test_dashboard_quantiles_are_per_source_and_panels_have_one_unit() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for panel in dashboard["panels"]:
        exprs = [target["expr"] for target in panel.get("targets", [])]
        for expr in exprs:
            if "histogram_quantile(" in expr:
                # Quantiles of several daemons summed together describe none of them.
                assert re.search(r"sum by \(source, le[,)]", expr), expr
        if panel["type"] != "row":
            assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
    # One unit per panel: no panel mixes bytes with messages or changes.
    for panel in dashboard["panels"]:
        exprs = " ".join(target["expr"] for target in panel.get("targets", []))
        assert not ("bytes_received" in exprs and "messages_received" in exprs), panel["title"]


def test_since_last_error_shows_nothing_rather_than_the_epoch_when_there_was_none() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    [panel] = [p for p in dashboard["panels"] if p.get("title") == "Since last error"]
    [target] = panel["targets"]
    # The timestamp is 0 until the first error: time() - 0 would read "56 years".
    assert "wal2delta_last_error_timestamp_seconds" in target["expr"]
    assert "> 0)" in target["expr"]
