"""The -jre image's jar prefetch: hadoop-aws matches pyspark's Hadoop; the result is checked.

The script itself needs a JVM and Maven Central (image build time); these tests cover the
choices it makes and the check it ends with, which is the daemon's own
``classic_session_conf``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from deploy_artefacts import DEPLOY


def prefetch() -> ModuleType:
    path = DEPLOY / "docker" / "prefetch_delta_jars.py"
    spec = importlib.util.spec_from_file_location("prefetch_delta_jars", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def jars(tmp_path: Path, *names: str) -> Path:
    for name in names:
        (tmp_path / name).write_bytes(b"")
    return tmp_path


def test_hadoop_aws_is_the_version_of_pyspark_hadoop_client(tmp_path: Path) -> None:
    directory = jars(
        tmp_path, "hadoop-client-api-3.5.0.jar", "hadoop-client-runtime-3.5.0.jar", "x-1.jar"
    )
    assert prefetch().hadoop_aws_package(directory) == "org.apache.hadoop:hadoop-aws:3.5.0"


@pytest.mark.parametrize(
    "names",
    [(), ("hadoop-client-api-3.4.1.jar", "hadoop-client-api-3.5.0.jar")],
)
def test_no_single_hadoop_client_version_stops_the_build(
    tmp_path: Path, names: tuple[str, ...]
) -> None:
    with pytest.raises(SystemExit, match="expected one hadoop-client-api jar"):
        prefetch().hadoop_aws_package(jars(tmp_path, *names))


def test_the_final_check_accepts_delta_and_s3a_jars(tmp_path: Path) -> None:
    directory = jars(
        tmp_path,
        "delta-spark_4.2_2.13-4.4.1.jar",
        "delta-storage-4.4.1.jar",
        "hadoop-aws-3.5.0.jar",
        "bundle-2.29.52.jar",
    )
    assert prefetch().check_jars(directory) is None


def test_the_final_check_names_missing_s3a_jars(tmp_path: Path) -> None:
    directory = jars(tmp_path, "delta-spark_4.2_2.13-4.4.1.jar", "delta-storage-4.4.1.jar")
    assert prefetch().check_jars(directory) == (
        f"the S3A jars (hadoop-aws-*, bundle-*) are not in {directory}"
    )


def test_the_final_check_names_missing_delta_jars(tmp_path: Path) -> None:
    problem = prefetch().check_jars(jars(tmp_path, "hadoop-aws-3.5.0.jar", "bundle-2.29.52.jar"))
    assert problem is not None
    assert "needs the Delta jars (delta-spark_*, delta-storage-*)" in problem
