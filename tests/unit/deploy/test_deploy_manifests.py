"""Kubernetes manifests: they parse, render, validate, and fit together.

The checks run on what ``kubectl kustomize`` renders (base and the two-source overlay),
so name suffixes, label transformers and generated ConfigMap names are the real ones.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_artefacts import DEPLOY, of_kind, render, require_tool

from config import AppConfig, parse_config

RENDERINGS = ["base", "example-two-sources"]
PASSWORD_PLACEHOLDER = "from-a-secret"


def all_yaml_files() -> list[Path]:
    return sorted(DEPLOY.rglob("*.yaml"))


@pytest.mark.parametrize("path", all_yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses(path: Path) -> None:
    documents = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    assert documents


def deployments(name: str) -> list[dict[str, Any]]:
    return of_kind(render(name), "Deployment")


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    [only] = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def pod_labels(deployment: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def config_of(documents: list[dict[str, Any]], deployment: dict[str, Any]) -> AppConfig:
    """The deployment's mounted config.yaml, validated with its container environment."""
    spec = deployment["spec"]["template"]["spec"]
    [volume] = [v for v in spec["volumes"] if v["name"] == "config"]
    [config_map] = [
        doc
        for doc in of_kind(documents, "ConfigMap")
        if doc["metadata"]["name"] == volume["configMap"]["name"]
    ]
    environ = {
        item["name"]: item.get("value", PASSWORD_PLACEHOLDER)
        for item in container(deployment)["env"]
    }
    # Only variables the container really has: an unset ${VAR} fails validation.
    return parse_config(yaml.safe_load(config_map["data"]["config.yaml"]), environ=environ)


@pytest.mark.parametrize("name", RENDERINGS)
def test_core_resources_validate_against_the_kubernetes_schemas(name: str) -> None:
    require_tool("kubernetes-validate", "kubernetes-validate")
    # Imported by name: the package ships no type information.
    kubernetes_validate = importlib.import_module("kubernetes_validate")

    checked = 0
    for document in render(name):
        if document["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # CRDs: structural checks in test_deploy_monitoring.py.
        for version in ("1.30.0", kubernetes_validate.latest_version()):
            kubernetes_validate.validate(document, version, strict=True)
        checked += 1
    assert checked >= 4


@pytest.mark.parametrize("name", RENDERINGS)
def test_each_deployment_runs_one_pod_and_recreates_it(name: str) -> None:
    for deployment in deployments(name):
        assert deployment["spec"]["replicas"] == 1
        assert deployment["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("name", RENDERINGS)
def test_deployment_selector_matches_its_own_pods_only(name: str) -> None:
    all_deployments = deployments(name)
    for deployment in all_deployments:
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selects(selector, pod_labels(deployment))
        for other in all_deployments:
            if other is not deployment:
                assert not selects(selector, pod_labels(other))


@pytest.mark.parametrize("name", RENDERINGS)
def test_each_service_targets_exactly_one_deployment_on_its_metrics_port(name: str) -> None:
    documents = render(name)
    for service in of_kind(documents, "Service"):
        selector = service["spec"]["selector"]
        targets = [d for d in deployments(name) if selects(selector, pod_labels(d))]
        assert len(targets) == 1, service["metadata"]["name"]
        [port] = service["spec"]["ports"]
        ports = {p["name"]: p["containerPort"] for p in container(targets[0])["ports"]}
        assert port["name"] == "metrics"
        assert port["targetPort"] in ports
        config = config_of(documents, targets[0])
        assert ports[port["targetPort"]] == config.metrics.port == port["port"]
        assert service["spec"]["publishNotReadyAddresses"] is True


@pytest.mark.parametrize("name", RENDERINGS)
def test_probes_use_healthz_and_readyz_on_the_metrics_port(name: str) -> None:
    for deployment in deployments(name):
        main = container(deployment)
        assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert main["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


@pytest.mark.parametrize("name", RENDERINGS)
def test_containers_are_locked_down(name: str) -> None:
    for deployment in deployments(name):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001
        assert pod["automountServiceAccountToken"] is False
        security = container(deployment)["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["runAsNonRoot"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize("name", RENDERINGS)
def test_resources_have_requests_and_limits(name: str) -> None:
    for deployment in deployments(name):
        resources = container(deployment)["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"])
        assert "memory" in resources["limits"]


@pytest.mark.parametrize("name", RENDERINGS)
def test_writable_paths_are_volumes(name: str) -> None:
    """With a read-only root, /tmp and the spool must be mounts; the spool is a PVC."""
    documents = render(name)
    claims = {doc["metadata"]["name"] for doc in of_kind(documents, "PersistentVolumeClaim")}
    for deployment in deployments(name):
        pod = deployment["spec"]["template"]["spec"]
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container(deployment)["volumeMounts"]}
        assert "emptyDir" in volumes[mounts["/tmp"]]
        config = config_of(documents, deployment)
        assert config.spool.dir is not None
        spool = volumes[mounts[str(config.spool.dir)]]
        assert spool["persistentVolumeClaim"]["claimName"] in claims


@pytest.mark.parametrize("name", RENDERINGS)
def test_config_is_mounted_where_the_entrypoint_reads_it(name: str) -> None:
    documents = render(name)
    for deployment in deployments(name):
        main = container(deployment)
        assert main["args"] == ["run", "-c", "/etc/wal2delta/config.yaml"]
        [mount] = [m for m in main["volumeMounts"] if m["name"] == "config"]
        assert mount["mountPath"] == "/etc/wal2delta"
        assert mount["readOnly"] is True
        assert isinstance(config_of(documents, deployment), AppConfig)


@pytest.mark.parametrize("name", RENDERINGS)
def test_password_comes_from_a_secret_never_from_the_config_map(name: str) -> None:
    documents = render(name)
    for deployment in deployments(name):
        env = {item["name"]: item for item in container(deployment)["env"]}
        assert "secretKeyRef" in env["PGPASSWORD"]["valueFrom"]
        config = config_of(documents, deployment)
        assert config.source.password is not None
        assert config.source.password.get_secret_value() == PASSWORD_PLACEHOLDER
    for config_map in of_kind(documents, "ConfigMap"):
        text = config_map["data"]["config.yaml"]
        assert re.search(r"password:\s*\$\{PGPASSWORD\}", text)


def test_grace_period_outlasts_the_configured_shutdown() -> None:
    for name in RENDERINGS:
        documents = render(name)
        for deployment in deployments(name):
            config = config_of(documents, deployment)
            grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            assert grace > config.shutdown.grace_period.total_seconds() + 10


def test_two_source_overlay_runs_two_independent_daemons() -> None:
    documents = render("example-two-sources")
    pair = deployments("example-two-sources")
    assert sorted(d["metadata"]["name"] for d in pair) == ["wal2delta-billing", "wal2delta-orders"]
    configs = [config_of(documents, d) for d in pair]
    assert len({c.source.slot for c in configs}) == 2
    assert len({c.source.publication for c in configs}) == 2
    assert len({c.sink.path for c in configs}) == 2, "two sources must not share a lake path"

    def distinct(extract: Any) -> None:
        assert len({extract(d) for d in pair}) == 2

    distinct(lambda d: pod_labels(d)["app.kubernetes.io/instance"])
    distinct(lambda d: _volume(d, "spool")["persistentVolumeClaim"]["claimName"])
    distinct(lambda d: _volume(d, "config")["configMap"]["name"])
    distinct(
        lambda d: next(e for e in container(d)["env"] if e["name"] == "PGPASSWORD")["valueFrom"][
            "secretKeyRef"
        ]["name"]
    )
    assert all(doc["metadata"].get("namespace") == "wal2delta" for doc in documents)


def test_two_source_overlay_includes_monitoring_once() -> None:
    documents = render("example-two-sources")
    assert len(of_kind(documents, "ServiceMonitor")) == 1
    assert len(of_kind(documents, "PrometheusRule")) == 1


def _volume(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    [volume] = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == name]
    return dict(volume)
