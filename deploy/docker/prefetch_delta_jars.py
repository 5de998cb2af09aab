"""Put the delta-spark jars on pyspark's classpath at image build time.

Only used by ``docker build --build-arg WITH_JRE=true`` (``sink.spark.mode: classic``).
A classic Spark session normally resolves Delta through ``spark.jars.packages``, which
downloads from Maven Central on every cold start and writes an Ivy cache under ``$HOME``:
neither works in a pod with a read-only root file system and no egress. This script
resolves the jars once, for the delta-spark version pip installed, and copies them into
``pyspark/jars`` so every later session finds them on the default classpath; the session
then only needs the Delta SQL extension and catalog settings.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pyspark
from delta import configure_spark_with_delta_pip
from pyspark.sql import SparkSession


def main() -> int:
    """Resolve the jars through a throw-away local session and copy the new ones."""
    jars_dir = Path(pyspark.__file__).parent / "jars"
    with tempfile.TemporaryDirectory(prefix="ivy-") as ivy:
        builder = (
            SparkSession.builder.master("local[1]")
            .appName("wal2delta-prefetch-delta-jars")
            .config("spark.jars.ivy", ivy)
            .config("spark.ui.enabled", "false")
        )
        spark = configure_spark_with_delta_pip(builder).getOrCreate()
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
    if not any(name.startswith("delta-spark") for name in copied + _present(jars_dir)):
        print("no delta-spark jar was resolved", file=sys.stderr)
        return 1
    print("copied into pyspark/jars:", ", ".join(copied) or "nothing new")
    return 0


def _present(jars_dir: Path) -> list[str]:
    return [jar.name for jar in jars_dir.glob("delta-*.jar")]


if __name__ == "__main__":
    raise SystemExit(main())
