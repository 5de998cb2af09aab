"""Put the Delta and S3A jars on pyspark's classpath at image build time.

Only used by ``docker build --build-arg WITH_JRE=true`` (``sink.spark.mode: classic``),
or by hand in an environment with the ``classic`` extra and a JRE. A classic session
never resolves packages at start (``sink.spark.classic_session_conf``): Maven Central and
an Ivy cache under ``$HOME`` are out of reach in a pod with a read-only root file system
and no egress. This script resolves, once, through a throw-away local session:

* delta-spark (and delta-storage) for the installed delta-spark and pyspark versions, as
  ``delta.configure_spark_with_delta_pip`` names them;
* hadoop-aws at the version of the Hadoop client jars pyspark ships, which brings the AWS
  SDK bundle it was built against - ``s3a://`` and ``s3://`` lakes;

and copies every resolved jar not yet there into ``pyspark/jars``, then checks that a
classic session finds what it needs there (``classic_session_conf``, the function the
daemon uses).
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

_HADOOP_CLIENT = re.compile(r"hadoop-client-api-(\d+\.\d+\.\d+)\.jar")


def hadoop_version(jars_dir: Path) -> str:
    """The Hadoop version pyspark ships (``hadoop-client-api-<version>.jar``)."""
    versions = sorted(
        {
            match[1]
            for jar in jars_dir.glob("*.jar")
            if (match := _HADOOP_CLIENT.fullmatch(jar.name))
        }
    )
    if len(versions) != 1:
        raise SystemExit(f"expected one hadoop-client-api jar in {jars_dir}, found {versions}")
    return versions[0]


def hadoop_aws_package(jars_dir: Path) -> str:
    """The Maven coordinate of the hadoop-aws matching pyspark's Hadoop client."""
    return f"org.apache.hadoop:hadoop-aws:{hadoop_version(jars_dir)}"


def check_jars(jars_dir: Path) -> str | None:
    """What a classic session (``sink.spark``) would miss in ``jars_dir``, or None."""
    from sink import SinkError  # noqa: PLC0415 - the installed wal2delta
    from sink.engine.spark import classic_session_conf  # noqa: PLC0415

    try:
        conf = classic_session_conf(jars_dir)
    except SinkError as exc:
        return str(exc)
    if "spark.hadoop.fs.s3a.impl" not in conf:
        return f"the S3A jars (hadoop-aws-*, bundle-*) are not in {jars_dir}"
    return None


def main() -> int:
    """Resolve the jars through a throw-away local session and copy the new ones."""
    import pyspark  # noqa: PLC0415 - the classic extra; not needed by the helpers above
    from delta import configure_spark_with_delta_pip  # noqa: PLC0415
    from pyspark.sql import SparkSession  # noqa: PLC0415

    jars_dir = Path(pyspark.__file__).parent / "jars"
    with tempfile.TemporaryDirectory(prefix="ivy-") as ivy:
        builder = (
            SparkSession.builder.master("local[1]")
            .appName("wal2delta-prefetch-jars")
            .config("spark.jars.ivy", ivy)
            .config("spark.ui.enabled", "false")
        )
        builder = configure_spark_with_delta_pip(
            builder, extra_packages=[hadoop_aws_package(jars_dir)]
        )
        spark = builder.getOrCreate()
        try:
            spark.range(1).count()
        finally:
            spark.stop()
        copied = []
        for jar in sorted(Path(ivy, "jars").glob("*.jar")):
            target = jars_dir / jar.name
            if not target.exists():
                shutil.copy2(jar, target)
                copied.append(jar.name)
    print("copied into pyspark/jars:", ", ".join(copied) or "nothing new")
    problem = check_jars(jars_dir)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
