"""Operating the daemon: metrics, health endpoints, status, logs, exit codes.

The metric names a running daemon exposes are compared with deploy/metrics-names.txt,
the single list the Prometheus rules and the Grafana dashboard are tested against.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from prometheus_client import generate_latest

from capture.slots import current_wal_lsn
from daemon.health import HealthServer, loop_alive_check, readiness_check
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source
from decoder import format_lsn
from tests.support.configs import make_config
from tests.support.harness import run_cli, wait_until
from tests.support.model_sink import ModelSink

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def _listed_metrics() -> dict[str, str]:
    listed = {}
    for raw in (DEPLOY / "metrics-names.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, kind, _labels = line.split()
            listed[name] = kind
    return listed


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _exposed(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE))


def _promql_names(expression: str) -> set[str]:
    names = set()
    for found in re.findall(r"\bwal2delta_[a-z0-9_]+", expression):
        name = found
        for suffix in HISTOGRAM_SUFFIXES:
            if name.endswith(suffix):
                name = name.removesuffix(suffix)
                break
        names.add(name)
    return names


def _dashboard_and_rule_expressions() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "wal2delta.json").read_text())
    expressions = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ]
    for path in DEPLOY.rglob("*.yaml"):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "PrometheusRule":
                for group in document["spec"]["groups"]:
                    expressions += [rule["expr"] for rule in group["rules"]]
    assert expressions
    return expressions


def test_running_daemon_exposes_exactly_the_listed_metrics_and_health(
    pg18_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
    config = make_config(pg18_dsn, tmp_path / "lake", ["public.items"])
    prepare_configured_source(config)
    stop = threading.Event()
    service = Supervisor(config, ModelSink(), stop_event=stop)
    server = HealthServer(
        service.metrics,
        host="127.0.0.1",
        port=0,
        alive=loop_alive_check(lambda: service.state.last_loop_at, limit_seconds=30),
        ready=lambda: (service.state.connected, "ok" if service.state.connected else "down"),
    )
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    assert _get(base + "/readyz")[0] == 503
    runner = threading.Thread(target=service.run)
    runner.start()
    try:
        wait_until(lambda: service.state.connected, 10, "the daemon to connect")
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO items VALUES (1, 'x')")
        time.sleep(1.5)
        assert _get(base + "/healthz")[0] == 200
        assert _get(base + "/readyz")[0] == 200
        status, text = _get(base + "/metrics")
        assert status == 200
    finally:
        stop.set()
        runner.join(30)
        server.stop()
    exposed = _exposed(text)
    assert exposed == _listed_metrics()
    assert 'wal2delta_changes_total{operation="insert",table="public.items"} 1.0' in text
    # Slot safety, from the server: reserved, an unlimited cap, WAL kept from restart_lsn.
    assert 'wal2delta_slot_wal_status{status="reserved"} 1.0' in text
    assert 'wal2delta_slot_wal_status{status="lost"} 0.0' in text
    assert _metric(text, "wal2delta_slot_safe_wal_size_bytes") == float("inf")
    assert _metric(text, "wal2delta_slot_retained_wal_bytes") > 0
    # source.failover: auto on PostgreSQL 18; the test server names no standby slots.
    assert _metric(text, "wal2delta_slot_failover") == 1
    assert 'wal2delta_failover_standby_slots{state="ready"} 0.0' in text
    used = set().union(*(_promql_names(e) for e in _dashboard_and_rule_expressions()))
    assert used <= set(exposed), f"dashboards/alerts use unknown metrics: {used - set(exposed)}"


def _config_file(tmp_path: Path, dsn: str, **source: Any) -> Path:
    path = tmp_path / "source.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": dsn,
                    "slot": "w2d_ops",
                    "publication": "w2d_ops",
                    "tables": ["public.items"],
                    **source,
                },
                "sink": {"path": str(tmp_path / "lake")},
                "metrics": {"enabled": False},
                "logging": {"format": "json", "level": "info"},
            }
        )
    )
    return path


def test_logs_are_json_and_never_show_the_password(pg18_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
        endpos = format_lsn(current_wal_lsn(conn))
    secret = "S3cret-Pa55word"
    config = _config_file(tmp_path, pg18_dsn, password="${W2D_TEST_PASSWORD}")
    result = run_cli(
        "capture",
        "-c",
        str(config),
        "-o",
        str(tmp_path / "rec"),
        "--endpos",
        endpos,
        W2D_TEST_PASSWORD=secret,
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines
    events = [json.loads(line) for line in lines]
    assert any(e["event"] == "replication started" for e in events)
    assert secret not in result.stderr
    assert secret not in result.stdout

    bad = _config_file(
        tmp_path, pg18_dsn.replace("host=127.0.0.1", "host=127.0.0.1 password=" + secret)
    )
    check = run_cli("check-config", str(bad))
    assert secret not in check.stdout + check.stderr


def test_status_reports_slot_lag_and_tables(pg18_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
    config = _config_file(tmp_path, pg18_dsn)
    human = run_cli("status", "-c", str(config))
    assert human.returncode == 0, human.stderr
    assert "does not exist" in human.stdout
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        endpos = format_lsn(current_wal_lsn(conn))
    assert (
        run_cli(
            "capture", "-c", str(config), "-o", str(tmp_path / "r"), "--endpos", endpos
        ).returncode
        == 0
    )
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO items SELECT g, 'x' FROM generate_series(1, 1000) g")
    result = run_cli("status", "-c", str(config), "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["slot"] == "w2d_ops"
    assert status["slot_exists"] is True
    assert status["active_pid"] is None
    assert status["lag_bytes"] > 0
    assert status["retained_wal_bytes"] >= status["lag_bytes"]
    assert [t["table"] for t in status["tables"]] == ["public.items"]
    assert (status["failover"], status["synced"], status["standby_slots"]) == (True, False, [])


def test_second_daemon_on_the_same_slot_exits_with_code_3(pg18_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
    config_path = _config_file(tmp_path, pg18_dsn)
    config = make_config(pg18_dsn, tmp_path / "lake2", ["public.items"], slot="w2d_ops")
    prepare_configured_source(config)
    stop = threading.Event()
    first = Supervisor(config, ModelSink(), stop_event=stop)
    runner = threading.Thread(target=first.run)
    runner.start()
    try:
        wait_until(lambda: first.state.connected, 10, "the first daemon to connect")
        second = run_cli("capture", "-c", str(config_path), "-o", str(tmp_path / "rec"))
    finally:
        stop.set()
        runner.join(30)
    assert second.returncode == 3, second.stderr
    assert "is active for PID" in second.stderr


def test_version_and_every_config_command_taking_dash_c(tmp_path: Path) -> None:
    version = run_cli("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("wal2delta ")
    config = _config_file(tmp_path, "host=127.0.0.1 dbname=app user=r")
    for args in (("check-config", str(config)), ("check-config", "-c", str(config))):
        checked = run_cli(*args)
        assert checked.returncode == 0, checked.stderr
        assert checked.stdout.startswith(f"{config}: ok")
    neither = run_cli("check-config")
    assert neither.returncode == 2
    assert "FILE or -c FILE" in neither.stderr


class _HangingSink(ModelSink):
    """A sink whose MERGE hangs until released: the lake is unreachable, say."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.applying = threading.Event()

    def apply(self, batch: Any) -> Any:
        self.applying.set()
        self.release.wait(60)
        return super().apply(batch)


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, flags=re.MULTILINE)
    assert match is not None, f"{name} not exposed"
    return float(match.group(1))


def test_apply_lag_grows_and_readiness_drops_while_a_merge_hangs(
    pg18_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
    config = make_config(pg18_dsn, tmp_path / "lake", ["public.items"])
    prepare_configured_source(config)
    stop = threading.Event()
    sink = _HangingSink()
    service = Supervisor(config, sink, stop_event=stop)
    ready = readiness_check(service.state, max_lag_seconds=1.0)
    service.metrics.ready.set_function(lambda: 1.0 if ready()[0] else 0.0)
    server = HealthServer(
        service.metrics,
        host="127.0.0.1",
        port=0,
        alive=loop_alive_check(lambda: service.state.last_loop_at, limit_seconds=30),
        ready=ready,
    )
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    runner = threading.Thread(target=service.run)
    runner.start()
    try:
        wait_until(lambda: service.state.connected, 10, "the daemon to connect")
        assert _metric(_get(base + "/metrics")[1], "wal2delta_apply_lag_seconds") == 0
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO items VALUES (1, 'x')")
        assert sink.applying.wait(10)
        # Nobody polls /readyz: the scrape alone must show the stuck sink.
        wait_until(
            lambda: _metric(_get(base + "/metrics")[1], "wal2delta_apply_lag_seconds") > 1.5,
            20,
            "the apply lag to grow past 1.5 s while the MERGE hangs",
        )
        text = _get(base + "/metrics")[1]
        assert _metric(text, "wal2delta_ready") == 0
        assert _get(base + "/readyz")[0] == 503
        sink.release.set()
        wait_until(
            lambda: _metric(_get(base + "/metrics")[1], "wal2delta_apply_lag_seconds") == 0,
            20,
            "the lag to drop to 0 once the batch is durable",
        )
        assert _metric(_get(base + "/metrics")[1], "wal2delta_ready") == 1
    finally:
        sink.release.set()
        stop.set()
        runner.join(30)
        server.stop()


def test_a_refused_slot_is_reported_with_the_servers_reason_and_retried(
    pg18_dsn: str, tmp_path: Path
) -> None:
    """ "All replication slots are in use" is the server's words, not "connection lost"."""
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
        (limit,) = conn.execute("SELECT current_setting('max_replication_slots')::int").fetchone()
        (used,) = conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()
        fillers = [f"w2d_filler_{i}" for i in range(limit - used)]
        for name in fillers:
            conn.execute("SELECT pg_create_physical_replication_slot(%s)", (name,))
    config = make_config(
        pg18_dsn,
        tmp_path / "lake",
        ["public.items"],
        source={"reconnect": {"initial_delay": "100ms", "max_delay": "200ms"}},
    )
    stop = threading.Event()
    service = Supervisor(config, ModelSink(), stop_event=stop)
    ready = readiness_check(service.state, max_lag_seconds=60)
    runner = threading.Thread(target=service.run)
    runner.start()
    try:
        wait_until(lambda: service.state.not_streaming is not None, 30, "the refusal")
        ok, why = ready()
        assert not ok
        assert "all replication slots are in use" in why
        assert "max_replication_slots" in why  # the server's hint
        assert "SQLSTATE 53400" in why
        text = generate_latest(service.metrics.registry).decode()
        assert 'wal2delta_not_streaming{reason="configuration_limit_exceeded"} 1.0' in text
        # Retried: once a slot is free again, the daemon streams and says so.
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            for name in fillers:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
        wait_until(lambda: service.state.connected, 30, "the daemon to stream")
        assert ready()[0]
        text = generate_latest(service.metrics.registry).decode()
        assert 'wal2delta_not_streaming{reason="configuration_limit_exceeded"} 0.0' in text
    finally:
        stop.set()
        runner.join(30)
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            for name in fillers:
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    (name,),
                )


def test_a_json_run_writes_only_json_lines_including_the_engines(
    pg18_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
        conn.execute("INSERT INTO items VALUES (1, 'x')")
        endpos = format_lsn(current_wal_lsn(conn))
    config = _config_file(tmp_path, pg18_dsn)  # logging: json, info
    result = run_cli("run", "-c", str(config), "--endpos", endpos)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # every line, or this raises
    loggers = {event.get("logger") for event in events}
    # Sail's own (Rust) log lines came through, as JSON, at the configured level.
    assert any(str(name).startswith("sail") for name in loggers), loggers
    assert any(e["event"] == "replication started" for e in events)
    assert all("level" in e and "timestamp" in e for e in events)
