"""Classic mode builds its session from the jars already present; nothing comes from Maven.

No JVM here: the session builder is replaced by a recorder, so these tests check the
settings a classic session is given and that nothing asks for package resolution
(``spark.jars.packages``, delta's ``configure_spark_with_delta_pip``) when the jars exist.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

import sink.engine.spark
from sink import SinkError
from sink.engine.spark import classic_session_conf, create_spark_session
from tests.support.settings import spark_settings

DELTA_JARS = ("delta-spark_4.2_2.13-4.4.1.jar", "delta-storage-4.4.1.jar")
S3_JARS = ("hadoop-aws-3.5.0.jar", "bundle-2.29.52.jar")
EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"


def jars_dir(tmp_path: Path, *names: str) -> Path:
    directory = tmp_path / "jars"
    directory.mkdir(exist_ok=True)
    for name in ("spark-core_2.13-4.2.0.jar", "hadoop-client-api-3.5.0.jar", *names):
        (directory / name).write_bytes(b"PK\x05\x06" + bytes(18))
    return directory


class RecordingBuilder:
    """Stands in for ``SparkSession.builder``: records settings, returns a marker session."""

    def __init__(self) -> None:
        self.settings: dict[str, str] = {}
        self.sessions: list[object] = []

    def config(self, key: str, value: str) -> RecordingBuilder:
        self.settings[key] = value
        return self

    def getOrCreate(self) -> object:  # noqa: N802 - pyspark's name
        session = object()
        self.sessions.append(session)
        return session


@pytest.fixture
def builder(monkeypatch: pytest.MonkeyPatch) -> RecordingBuilder:
    recorder = RecordingBuilder()
    monkeypatch.setattr(sink.engine.spark, "_classic_builder", lambda: recorder)
    return recorder


@pytest.fixture
def delta_pip_calls(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """A stand-in ``delta`` module whose configure_spark_with_delta_pip records its calls."""
    calls: list[object] = []
    fake = types.ModuleType("delta")

    def configure_spark_with_delta_pip(spark_builder: Any, extra_packages: Any = None) -> Any:
        calls.append(spark_builder)
        return spark_builder.config("spark.jars.packages", "io.delta:delta-spark_2.13:4.4.1")

    fake.configure_spark_with_delta_pip = configure_spark_with_delta_pip  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "delta", fake)
    return calls


def test_present_delta_jars_give_the_delta_extension_and_catalog_and_no_packages(
    tmp_path: Path,
) -> None:
    conf = classic_session_conf(jars_dir(tmp_path, *DELTA_JARS))
    assert conf == {"spark.sql.extensions": EXTENSION, "spark.sql.catalog.spark_catalog": CATALOG}


def test_present_s3_jars_route_s3a_and_s3_uris_to_the_s3a_file_system(tmp_path: Path) -> None:
    conf = classic_session_conf(jars_dir(tmp_path, *DELTA_JARS, *S3_JARS))
    assert conf["spark.hadoop.fs.s3a.impl"] == S3A
    assert conf["spark.hadoop.fs.s3.impl"] == S3A
    assert conf["spark.hadoop.fs.AbstractFileSystem.s3.impl"] == "org.apache.hadoop.fs.s3a.S3A"
    assert conf["spark.sql.extensions"] == EXTENSION
    assert "spark.jars.packages" not in conf


def test_hadoop_aws_without_the_sdk_bundle_sets_no_s3a_settings(tmp_path: Path) -> None:
    conf = classic_session_conf(jars_dir(tmp_path, *DELTA_JARS, "hadoop-aws-3.5.0.jar"))
    assert not [key for key in conf if key.startswith("spark.hadoop.fs.")]


def test_configured_settings_win_over_the_defaults(tmp_path: Path) -> None:
    conf = classic_session_conf(
        jars_dir(tmp_path, *DELTA_JARS, *S3_JARS),
        {"spark.hadoop.fs.s3a.endpoint": "http://minio:9000", "spark.hadoop.fs.s3.impl": "x.Y"},
    )
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://minio:9000"
    assert conf["spark.hadoop.fs.s3.impl"] == "x.Y"
    assert conf["spark.hadoop.fs.s3a.impl"] == S3A


@pytest.mark.parametrize(
    ("present", "named"),
    [
        ((), "delta-spark_*, delta-storage-*"),
        (("delta-spark_4.2_2.13-4.4.1.jar",), "delta-storage-*"),
        (("delta-storage-4.4.1.jar",), "delta-spark_*"),
    ],
)
def test_missing_delta_jars_fail_saying_which_and_how_to_get_them(
    tmp_path: Path, present: tuple[str, ...], named: str
) -> None:
    directory = jars_dir(tmp_path, *present)
    with pytest.raises(SinkError) as raised:
        classic_session_conf(directory)
    message = str(raised.value)
    assert f"({named}) in {directory}" in message
    assert "WITH_JRE=true" in message
    assert "wal2delta[classic]" in message
    assert "prefetch_delta_jars.py" in message


def test_a_missing_jar_directory_fails_like_missing_jars(tmp_path: Path) -> None:
    """pyspark-client (the runtime dependency) has no jars directory at all."""
    with pytest.raises(
        SinkError, match=r"needs the Delta jars \(delta-spark_\*, delta-storage-\*\)"
    ):
        classic_session_conf(tmp_path / "absent")


def test_packages_named_in_the_configuration_are_the_explicit_way_to_resolve(
    tmp_path: Path,
) -> None:
    packages = "io.delta:delta-spark_4.2_2.13:4.4.1"
    conf = classic_session_conf(tmp_path / "absent", {"spark.jars.packages": packages})
    assert conf["spark.jars.packages"] == packages
    assert conf["spark.sql.catalog.spark_catalog"] == CATALOG


def test_classic_session_uses_the_present_jars_and_never_asks_delta_pip(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    builder: RecordingBuilder,
    delta_pip_calls: list[object],
) -> None:
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    jars_dir(tmp_path, *DELTA_JARS, *S3_JARS)
    session = create_spark_session(
        spark_settings(mode="classic", conf={"spark.sql.shuffle.partitions": "4"})
    )
    assert builder.sessions == [session]
    assert delta_pip_calls == []
    assert "spark.jars.packages" not in builder.settings
    assert builder.settings["spark.sql.extensions"] == EXTENSION
    assert builder.settings["spark.sql.catalog.spark_catalog"] == CATALOG
    assert builder.settings["spark.hadoop.fs.s3.impl"] == S3A
    assert builder.settings["spark.sql.shuffle.partitions"] == "4"
    assert builder.settings["spark.sql.session.timeZone"] == "UTC"


def test_classic_session_without_jars_fails_before_building(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    builder: RecordingBuilder,
    delta_pip_calls: list[object],
) -> None:
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    with pytest.raises(SinkError, match="does not download them at start"):
        create_spark_session(spark_settings(mode="classic"))
    assert builder.sessions == []
    assert builder.settings == {}
    assert delta_pip_calls == []


def test_the_jar_directory_is_spark_home_or_the_installed_pyspark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyspark

    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert sink.engine.spark._spark_jars_dir() == tmp_path / "jars"
    monkeypatch.delenv("SPARK_HOME")
    assert sink.engine.spark._spark_jars_dir() == Path(pyspark.__file__).parent / "jars"
