"""Kubernetes manifests: they parse, render, validate, and fit together.

The checks run on what ``kubectl kustomize`` renders (base and the two-source overlay),
so name suffixes, label transformers and generated ConfigMap names are the real ones.
"""

from __future__ import annotations

import functools
import importlib
import re
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from deploy_artefacts import DEPLOY, KUSTOMIZATIONS, of_kind, render, require_tool
from psycopg.conninfo import conninfo_to_dict

from config import AppConfig, parse_config

# The daemon-only renderings; engine-cluster (Sail driver, Role...) is test_deploy_engine.py's.
RENDERINGS = [name for name in KUSTOMIZATIONS if name != "engine-cluster"]
PASSWORD_PLACEHOLDER = "from-a-secret"
# An image reference pinned by a tag other than latest, by a digest, or both.
PINNED_IMAGE = re.compile(
    r"(?P<repository>[a-z0-9.\-/:]+?)(?::(?P<tag>[\w][\w.\-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?"
)


@functools.cache
def _placeholder_password_file() -> str:
    """A file standing in for the mounted Secret's, so the config validates here."""
    path = Path(tempfile.mkdtemp(prefix="wal2delta-deploy-test-")) / "password"
    path.write_text(PASSWORD_PLACEHOLDER + "\n", encoding="utf-8")
    return str(path)


def all_yaml_files() -> list[Path]:
    return sorted(DEPLOY.rglob("*.yaml"))


@pytest.mark.parametrize("path", all_yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses(path: Path) -> None:
    documents = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    assert documents


def test_every_overlay_is_rendered_by_these_tests() -> None:
    """A new overlay is held to the same checks (ServiceAccount, NetworkPolicy, budget...)."""
    overlays = {path.parent for path in (DEPLOY / "overlays").glob("*/kustomization.yaml")}
    assert overlays
    assert overlays <= set(KUSTOMIZATIONS.values())


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


def config_text(documents: list[dict[str, Any]], deployment: dict[str, Any]) -> str:
    """The config.yaml of the ConfigMap the deployment's ``config`` volume projects (the
    other ConfigMap it projects, the CA's, is created by the operator, not rendered)."""
    sources = _volume(deployment, "config")["projected"]["sources"]
    names = {s["configMap"]["name"] for s in sources if "configMap" in s}
    [config_map] = [
        doc
        for doc in of_kind(documents, "ConfigMap")
        if doc["metadata"]["name"] in names and "config.yaml" in doc["data"]
    ]
    text: str = config_map["data"]["config.yaml"]
    return text


def config_of(documents: list[dict[str, Any]], deployment: dict[str, Any]) -> AppConfig:
    """The deployment's mounted config.yaml, validated with its container environment.

    ``source.password_file`` names a file of the pod; a local stand-in replaces it (the
    tests below check the pod really has it).
    """
    data = yaml.safe_load(config_text(documents, deployment))
    if "password_file" in data["source"]:
        data["source"]["password_file"] = _placeholder_password_file()
    environ = {item["name"]: item["value"] for item in container(deployment).get("env", [])}
    # Only variables the container really has: an unset ${VAR} fails validation.
    return parse_config(data, environ=environ)


def mounted_files(deployment: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """Each file a projected volume puts in the container, by its path: (kind, object
    name, key) of the Secret or ConfigMap item it comes from."""
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    files = {}
    for mount in container(deployment)["volumeMounts"]:
        projected = volumes[mount["name"]].get("projected")
        if projected is None:
            continue
        for source in projected["sources"]:
            [(kind, ref)] = [(k, v) for k, v in source.items() if k in ("secret", "configMap")]
            for item in ref.get("items", []):
                path = str(PurePosixPath(mount["mountPath"]) / item["path"])
                files[path] = (kind, ref["name"], item["key"])
    return files


@pytest.mark.parametrize("name", RENDERINGS)
def test_core_resources_validate_against_the_kubernetes_schemas(name: str) -> None:
    require_tool("kubernetes-validate", "kubernetes-validate")
    # Imported by name: the package ships no type information.
    kubernetes_validate = importlib.import_module("kubernetes_validate")

    checked = set()
    for document in render(name):
        if document["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # CRDs: structural checks in test_deploy_monitoring.py.
        for version in ("1.30.0", kubernetes_validate.latest_version()):
            kubernetes_validate.validate(document, version, strict=True)
        checked.add(document["kind"])
    assert checked == {
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    }


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
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for shared in ("hostNetwork", "hostPID", "hostIPC"):
            assert not pod.get(shared, False)
        security = container(deployment)["securityContext"]
        assert not security.get("privileged", False)
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
def test_password_is_a_mounted_secret_file_never_an_environment_variable(name: str) -> None:
    documents = render(name)
    for deployment in deployments(name):
        main = container(deployment)
        for item in main.get("env", []):
            assert "valueFrom" not in item, item  # no secret in the environment
            assert "PASSWORD" not in item["name"].upper()
        source = yaml.safe_load(config_text(documents, deployment))["source"]
        assert "password" not in source
        assert "password" not in conninfo_to_dict(source["dsn"].replace("${PGHOST}", "h"))
        kind, secret_name, key = mounted_files(deployment)[source["password_file"]]
        assert (kind, key) == ("secret", "password")
        assert secret_name.startswith("wal2delta-")
        [mount] = [m for m in main["volumeMounts"] if m["mountPath"] == "/etc/wal2delta"]
        assert mount["readOnly"] is True
        assert _volume(deployment, mount["name"])["projected"]["defaultMode"] == 0o440
        config = config_of(documents, deployment)
        assert config.source.password is None
        resolved = config.source.resolved_password()
        assert resolved is not None
        assert resolved.get_secret_value() == PASSWORD_PLACEHOLDER


@pytest.mark.parametrize("name", RENDERINGS)
def test_source_certificate_is_verified_with_the_mounted_ca(name: str) -> None:
    documents = render(name)
    for deployment in deployments(name):
        dsn = conninfo_to_dict(config_of(documents, deployment).source.dsn)
        assert dsn["sslmode"] == "verify-full"
        kind, _, key = mounted_files(deployment)[str(dsn["sslrootcert"])]
        assert (kind, key) == ("configMap", "ca.crt")


def _selecting(documents: list[dict[str, Any]], kind: str, pod: dict[str, str]) -> list[Any]:
    """The objects of ``kind`` whose pod selector selects pods labelled ``pod``."""
    found = []
    for document in of_kind(documents, kind):
        spec = document["spec"]
        selector = spec["podSelector" if kind == "NetworkPolicy" else "selector"]
        assert set(selector) == {"matchLabels"}, "selectors are plain label matches"
        if selects(selector["matchLabels"], pod):
            found.append(document)
    return found


@pytest.mark.parametrize("name", RENDERINGS)
def test_each_daemon_has_its_own_service_account_network_policy_and_budget(name: str) -> None:
    documents = render(name)
    pods = deployments(name)
    accounts = {a["metadata"]["name"]: a for a in of_kind(documents, "ServiceAccount")}
    assert len(accounts) == len(pods)
    assert len(of_kind(documents, "NetworkPolicy")) == len(pods)
    assert len(of_kind(documents, "PodDisruptionBudget")) == len(pods)
    for deployment in pods:
        spec = deployment["spec"]["template"]["spec"]
        account = accounts[spec["serviceAccountName"]]
        assert account["automountServiceAccountToken"] is False
        assert spec["automountServiceAccountToken"] is False
        assert len(_selecting(documents, "NetworkPolicy", pod_labels(deployment))) == 1
        assert len(_selecting(documents, "PodDisruptionBudget", pod_labels(deployment))) == 1


def _ports(rules: list[dict[str, Any]]) -> set[tuple[int, str]]:
    ports = set()
    for rule in rules:
        # A rule without ports allows every port; none is written here.
        assert rule.get("ports"), rule
        for port in rule["ports"]:
            assert "endPort" not in port
            ports.add((port["port"], port.get("protocol", "TCP")))
    return ports


@pytest.mark.parametrize("name", RENDERINGS)
def test_network_policy_allows_only_what_the_daemon_uses(name: str) -> None:
    """Ingress: the metrics port. Egress: DNS, the source's port, HTTPS for the object
    store and, with a ``connect`` engine, its Spark Connect port - read from the config."""
    documents = render(name)
    for deployment in deployments(name):
        [policy] = _selecting(documents, "NetworkPolicy", pod_labels(deployment))
        config = config_of(documents, deployment)
        assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
        assert _ports(policy["spec"]["ingress"]) == {(config.metrics.port, "TCP")}
        source_port = int(conninfo_to_dict(config.source.dsn).get("port") or 5432)
        allowed = {(53, "UDP"), (53, "TCP"), (source_port, "TCP"), (443, "TCP")}
        spark = config.sink.spark
        if spark.mode == "connect":
            assert spark.url is not None
            match = re.match(r"sc://[^/:]+:(\d+)", spark.url)
            allowed.add((int(match[1]) if match else 15002, "TCP"))
        assert _ports(policy["spec"]["egress"]) == allowed


@pytest.mark.parametrize("name", RENDERINGS)
def test_disruption_budget_lets_the_singleton_be_evicted_never_blocks_a_drain(
    name: str,
) -> None:
    """One replica: a budget keeping it available would block node drains for ever; the
    slot, not the budget, keeps two daemons from streaming (decision 0118)."""
    documents = render(name)
    for deployment in deployments(name):
        [budget] = _selecting(documents, "PodDisruptionBudget", pod_labels(deployment))
        spec = budget["spec"]
        assert "minAvailable" not in spec
        assert spec["maxUnavailable"] == deployment["spec"]["replicas"] == 1
        assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def pinned(image: str) -> bool:
    """Whether an image reference names one image: a tag other than latest, or a digest."""
    match = PINNED_IMAGE.fullmatch(image)
    if match is None:
        return False
    tag, digest = match["tag"], match["digest"]
    return digest is not None or (tag is not None and tag != "latest")


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("registry.example.com/wal2delta:0.1.0", True),
        ("registry.example.com/wal2delta@sha256:" + "ab" * 32, True),
        ("registry.example.com:5000/team/wal2delta:0.1.0@sha256:" + "0f" * 32, True),
        ("registry.example.com/wal2delta", False),
        ("registry.example.com/wal2delta:latest", False),
        ("registry.example.com/wal2delta@sha256:abc", False),
    ],
)
def test_an_image_is_pinned_by_tag_or_digest(image: str, expected: bool) -> None:
    assert pinned(image) is expected


@pytest.mark.parametrize("name", RENDERINGS)
def test_images_are_pinned(name: str) -> None:
    for deployment in deployments(name):
        image = container(deployment)["image"]
        assert pinned(image), image


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
    distinct(lambda d: config_text(documents, d))
    distinct(lambda d: d["spec"]["template"]["spec"]["serviceAccountName"])
    for kind in ("secret", "configMap"):  # the password Secret, the CA's ConfigMap
        distinct(
            lambda d, kind=kind: tuple(
                sorted(name for k, name, _ in mounted_files(d).values() if k == kind)
            )
        )
    assert all(doc["metadata"].get("namespace") == "wal2delta" for doc in documents)


def test_two_source_overlay_includes_monitoring_once() -> None:
    documents = render("example-two-sources")
    assert len(of_kind(documents, "ServiceMonitor")) == 1
    assert len(of_kind(documents, "PrometheusRule")) == 1


def _volume(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    [volume] = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == name]
    return dict(volume)
