"""A table created through the lake port (``sink/lake/tables.py``, ``LakeTables.load``):
its schema is not read back after it is made, so what the port remembers of a new table
must be exactly what reading the table gives, for every Delta type the sink writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sink.engine.arrow import ArrowColumn, ddl
from sink.lake.deltars import read_rows
from sink.lake.tables import LakeTables
from sink.planning.evolution import delta_type_name
from sink.values import typemap
from tests.support.oracle import read_delta_table
from tests.support.settings import sink_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SCALARS = (
    typemap.BOOLEAN,
    typemap.SMALLINT,
    typemap.INT,
    typemap.BIGINT,
    typemap.FLOAT,
    typemap.DOUBLE,
    typemap.STRING,
    typemap.BINARY,
    typemap.DATE,
    typemap.TIMESTAMP,
    typemap.TIMESTAMP_NTZ,
)
COLUMNS = [
    *(ArrowColumn(f"c_{t.spark_sql.lower()}", t.spark_sql, t.arrow) for t in SCALARS),
    ArrowColumn("price", "DECIMAL(10,2)", pa.decimal128(10, 2)),
    ArrowColumn("big", "DECIMAL(38,0)", pa.decimal128(38, 0)),
    ArrowColumn("ids", "ARRAY<BIGINT>", pa.list_(pa.int64())),
    ArrowColumn("amounts", "ARRAY<DECIMAL(12,3)>", pa.list_(pa.decimal128(12, 3))),
    ArrowColumn("stamps", "ARRAY<TIMESTAMP>", pa.list_(pa.timestamp("us", tz="UTC"))),
    ArrowColumn("grid", "ARRAY<ARRAY<INT>>", pa.list_(pa.list_(pa.int32()))),
]


def test_a_new_table_is_remembered_as_reading_it_gives(spark_session: Any, tmp_path: Path) -> None:
    lake = LakeTables(spark_session, sink_settings(tmp_path / "lake").metadata)
    path = str(tmp_path / "lake" / "t")
    created = lake.load(path, "public.t", COLUMNS, data=True)
    assert created.columns == {c.name: delta_type_name(c.spark_sql) for c in COLUMNS}
    lake.forget(path)
    read = lake.load(path, "public.t", COLUMNS, data=True)  # exists now: read, not made
    assert read.columns == created.columns
    assert list(read.columns) == [c.name for c in COLUMNS]
    assert read_rows(path) == []  # made empty; delta-rs reads it


def test_frames_get_the_schema_a_parsed_ddl_string_gives(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = LakeTables(spark_session, sink_settings(tmp_path / "lake").metadata)
    empty = pa.schema([pa.field(c.name, c.arrow) for c in COLUMNS]).empty_table()
    parsed = spark_session.createDataFrame(empty, schema=ddl(COLUMNS)).schema
    assert lake.empty_frame(COLUMNS).schema == parsed
    # A column whose Arrow type maps to another Spark type keeps its DDL type: the frame
    # is built from the DDL string then.
    odd = [ArrowColumn("n", "DOUBLE", pa.int64())]
    assert lake.empty_frame(odd).schema.simpleString() == "struct<n:double>"


@pytest.mark.parametrize("rows", [0, 3], ids=["made-empty-when-no-row-comes", "with-its-rows"])
def test_a_table_made_by_its_first_append_is_the_table_load_makes(
    spark_session: Any, tmp_path: Path, rows: int
) -> None:
    # ``made_by_first_append``: the table is made by the first append, in one engine call
    # and one commit with its rows; it must be made exactly as ``load`` makes it - the same
    # schema, partitioning, table properties and features - whatever columns the rows carry.
    lake = LakeTables(spark_session, sink_settings(tmp_path / "lake").metadata)
    bucket = ArrowColumn("bucket", "BIGINT", pa.int64())
    made = {
        "partition": "bucket",
        "properties": {"delta.enableDeletionVectors": "true"},
        "data": True,
    }
    eager_path, deferred_path = str(tmp_path / "lake" / "eager"), str(tmp_path / "lake" / "late")
    lake.load(eager_path, "public.eager", [*COLUMNS, bucket], **made)  # type: ignore[arg-type]
    state = lake.load(
        deferred_path,
        "public.late",
        [*COLUMNS, bucket],
        made_by_first_append=True,
        **made,  # type: ignore[arg-type]
    )
    assert state.creation is not None
    assert not DeltaTable.is_deltatable(deferred_path)  # nothing made yet
    carried = [COLUMNS[2], COLUMNS[6], bucket]  # INT, STRING and the partition column
    table = pa.table(
        {
            "c_int": pa.array(range(rows), pa.int32()),
            "c_string": pa.array([f"r{i}" for i in range(rows)], pa.string()),
            "bucket": pa.array([i % 2 for i in range(rows)], pa.int64()),
        }
    )
    if rows:
        lake.append_rows(deferred_path, table, carried, partitions=["bucket"])
    else:
        lake.create(state)
    assert state.creation is None
    eager, deferred = DeltaTable(eager_path), DeltaTable(deferred_path)
    assert deferred.schema() == eager.schema()
    assert deferred.metadata().partition_columns == eager.metadata().partition_columns
    assert deferred.metadata().configuration == eager.metadata().configuration
    assert deferred.protocol() == eager.protocol()
    assert deferred.version() == 0  # one commit
    written = read_delta_table(deferred_path).to_pylist()
    assert sorted((r["c_int"], r["c_string"], r["bucket"]) for r in written) == [
        (i, f"r{i}", i % 2) for i in range(rows)
    ]
    assert all(r["price"] is None and r["grid"] is None for r in written)
