"""The engine overlay: a Sail Spark Connect server in Kubernetes cluster mode and a
daemon using it (``sink.spark.mode: connect``), rendered with ``kubectl kustomize``."""

from __future__ import annotations

import importlib
import json
from typing import Any

import yaml
from deploy_artefacts import of_kind, render, require_tool

from config import parse_config

NAME = "engine-cluster"
# What Sail's driver calls (worker_manager/kubernetes.rs): get its own pod for the owner
# reference, create a worker, delete its workers by label when it stops.
ALLOWED_RULES = {("", "pods"): {"get", "create", "deletecollection"}}


def _labelled(kind: str, name: str) -> list[dict[str, Any]]:
    return [
        d
        for d in of_kind(render(NAME), kind)
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == name
    ]


def _driver() -> dict[str, Any]:
    [driver] = _labelled("Deployment", "sail")
    return driver


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _worker_template() -> dict[str, Any]:
    [server] = _driver()["spec"]["template"]["spec"]["containers"]
    ref = _env(server)["SAIL_KUBERNETES__WORKER_POD_TEMPLATE"]["configMapKeyRef"]
    [config_map] = [
        d for d in of_kind(render(NAME), "ConfigMap") if d["metadata"]["name"] == ref["name"]
    ]
    template: dict[str, Any] = json.loads(config_map["data"][ref["key"]])
    return template


def _assert_locked_down(pod: dict[str, Any]) -> None:
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for shared in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(shared, False)
    for container in pod["containers"]:
        security = container["securityContext"]
        assert not security.get("privileged", False)
        assert security["readOnlyRootFilesystem"] is True
        assert security["runAsNonRoot"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert {"cpu", "memory"} <= set(container["resources"]["requests"])
        assert "memory" in container["resources"]["limits"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert "emptyDir" in volumes[mounts["/tmp"]]
        assert {"secretRef": {"name": "wal2delta-lake", "optional": True}} in container["envFrom"]


def test_engine_overlay_validates_against_the_kubernetes_schemas() -> None:
    require_tool("kubernetes-validate", "kubernetes-validate")
    kubernetes_validate = importlib.import_module("kubernetes_validate")
    kinds = set()
    for document in render(NAME):
        if document["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        for version in ("1.30.0", kubernetes_validate.latest_version()):
            kubernetes_validate.validate(document, version, strict=True)
        kinds.add(document["kind"])
    assert {"Deployment", "Service", "Role", "RoleBinding", "NetworkPolicy"} <= kinds


def test_the_role_grants_only_the_pod_calls_the_driver_makes() -> None:
    documents = render(NAME)
    assert not of_kind(documents, "ClusterRole")
    assert not of_kind(documents, "ClusterRoleBinding")
    [role] = of_kind(documents, "Role")
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no resourceNames tricks
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                allowed = ALLOWED_RULES.get((group, resource), set())
                assert set(rule["verbs"]) <= allowed, (group, resource, rule["verbs"])
    [binding] = of_kind(documents, "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    driver_account = _driver()["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": driver_account, "namespace": "wal2delta"}
    ]


def test_driver_and_worker_template_are_locked_down() -> None:
    _assert_locked_down(_driver()["spec"]["template"]["spec"])
    worker = _worker_template()["spec"]
    _assert_locked_down(worker)
    assert worker["automountServiceAccountToken"] is False


def test_driver_runs_sail_in_kubernetes_cluster_mode_with_its_workers_configured() -> None:
    driver = _driver()
    assert driver["spec"]["replicas"] == 1
    assert driver["spec"]["strategy"] == {"type": "Recreate"}
    [server] = driver["spec"]["template"]["spec"]["containers"]
    env = _env(server)
    assert env["SAIL_MODE"] == "kubernetes-cluster"
    assert env["SAIL_KUBERNETES__IMAGE"] == server["image"]
    assert env["SAIL_KUBERNETES__NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["SAIL_KUBERNETES__DRIVER_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    accounts = {a["metadata"]["name"]: a for a in of_kind(render(NAME), "ServiceAccount")}
    worker_account = accounts[env["SAIL_KUBERNETES__WORKER_SERVICE_ACCOUNT_NAME"]]
    assert worker_account["automountServiceAccountToken"] is False
    [worker] = _worker_template()["spec"]["containers"]
    assert worker["name"] == "worker"  # merged into Sail's own worker container by name
    assert _env(worker)["SAIL_CLUSTER__WORKER_LISTEN_PORT"] == "50053"


def test_daemons_use_connect_mode_pointing_at_the_engine_service() -> None:
    documents = render(NAME)
    [service] = _labelled("Service", "sail")
    [port] = service["spec"]["ports"]
    url = f"sc://{service['metadata']['name']}:{port['port']}"
    daemons = _labelled("Deployment", "wal2delta")
    assert daemons
    for daemon in daemons:
        [config_map] = [
            d
            for d in of_kind(documents, "ConfigMap")
            if d["metadata"]["name"].startswith("wal2delta-config")
        ]
        data = yaml.safe_load(config_map["data"]["config.yaml"])
        data["source"].pop("password_file")
        [main] = daemon["spec"]["template"]["spec"]["containers"]
        environ = {e["name"]: e["value"] for e in main["env"]}
        config = parse_config(data, environ=environ)
        assert config.sink.spark.mode == "connect"
        assert config.sink.spark.url == url
        [policy] = _labelled("NetworkPolicy", "wal2delta")
        egress = [
            r
            for r in policy["spec"]["egress"]
            if {"port": port["port"], "protocol": "TCP"} in r["ports"]
        ]
        assert egress, "the daemon's NetworkPolicy must allow the engine's port"
