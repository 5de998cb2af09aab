"""The embedded engine runs a MERGE with the configured parallelism.

Sail reads its ``execution.default_parallelism`` from the environment when its server
starts, so each case runs in a child process: a MERGE writes one file per partition of its
output, which shows the parallelism the engine used.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sink.engine.spark import SAIL_PARALLELISM_ENV

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import glob, sys
from sink.engine.spark import create_spark_session, stop_spark_session
from tests.support.settings import spark_settings

lake, parallelism = sys.argv[1], sys.argv[2]
spark = create_spark_session(
    spark_settings(parallelism=parallelism if parallelism == "auto" else int(parallelism))
)
try:
    spark.sql(
        f"CREATE TABLE t USING delta LOCATION '{lake}' "
        "AS SELECT id, CAST(id AS STRING) AS x FROM range(100000)"
    ).collect()
    before = set(glob.glob(f"{lake}/*.parquet"))
    spark.sql(
        f"MERGE INTO delta.`{lake}` AS t USING (SELECT id, 'y' AS x FROM range(100000)) AS s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET x = s.x"
    ).collect()
    print(len(set(glob.glob(f"{lake}/*.parquet")) - before))
finally:
    stop_spark_session(spark)
"""


def _files_written_by_a_merge(tmp_path: Path, parallelism: str, env: dict[str, str]) -> int:
    # A script file: under ``python -c`` the pyspark client went looking for a local
    # Spark installation (SPARK_HOME) and the child failed.
    child = tmp_path / "merge_once.py"
    child.write_text(CHILD, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(child), str(tmp_path / "t"), parallelism],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.strip().splitlines()[-1])


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != SAIL_PARALLELISM_ENV}
    env["PYTHONPATH"] = str(ROOT)
    return env | extra


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_configured_parallelism_reaches_the_engine(tmp_path: Path, parallelism: int) -> None:
    assert _files_written_by_a_merge(tmp_path, str(parallelism), _environment()) == parallelism


def test_the_environment_wins_over_auto(tmp_path: Path) -> None:
    env = _environment(**{SAIL_PARALLELISM_ENV: "2"})
    assert _files_written_by_a_merge(tmp_path, "auto", env) == 2


def test_a_configured_parallelism_wins_over_the_environment(tmp_path: Path) -> None:
    env = _environment(**{SAIL_PARALLELISM_ENV: "2"})
    assert _files_written_by_a_merge(tmp_path, "1", env) == 1
