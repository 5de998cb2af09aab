"""A MERGE source's view on the embedded engine: read from a local Parquet file
(``sink/lake/sources.py``) or sent inline, it has the types of the sink's columns, and leaves
no file behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sink.engine.arrow import ArrowColumn
from sink.lake.sources import LOCK_NAME, SourceFiles
from sink.lake.tables import LakeTables
from sink.values.typemap import BIGINT, STRING
from tests.support.settings import sink_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.mark.parametrize("inline", [False, True], ids=["source-file", "inline-source"])
def test_a_view_has_the_types_of_the_columns_and_leaves_no_file(
    spark_session: Any, tmp_path: Path, *, inline: bool
) -> None:
    files = None if inline else SourceFiles(tmp_path)
    meta = sink_settings(tmp_path / "lake").metadata
    lake = LakeTables(spark_session, meta, files)
    # A narrower integer type than the columns say.
    table = pa.table({"id": pa.array([2, 1], pa.int32()), "note": pa.array([None, "ü"])})
    columns = [
        ArrowColumn("id", BIGINT.spark_sql, BIGINT.arrow),
        ArrowColumn("note", STRING.spark_sql, STRING.arrow),
    ]
    with lake.view(table, columns) as name:
        schema = spark_session.table(name).schema.simpleString()
        rows = [tuple(r) for r in spark_session.sql(f"SELECT * FROM {name} ORDER BY id").collect()]
        if files is not None:
            assert files.directory is not None
            assert len(list(files.directory.glob("*.parquet"))) == 1
    assert schema == "struct<id:bigint,note:string>"
    assert rows == [(1, "ü"), (2, None)]
    if files is not None:
        assert files.directory is not None
        assert [p.name for p in files.directory.iterdir()] == [LOCK_NAME]
        files.close()
