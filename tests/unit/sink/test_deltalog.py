"""``sink.deltalog``: the Delta log's file actions, replayed from hand-written logs.

Deletion-vector descriptors resolve to the files the protocol names (its own example, and
one Sail wrote); a replay keys file actions by path and vector, so a MERGE's remove and
add of the same path leaves the path live and the old vector a tombstone; a checkpoint
stands in for the commits before it; a log missing a commit is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sink.lake.deltalog import (
    LogUnreadableError,
    deletion_vector_file,
    read_table_files,
    z85_decode,
)

PROTOCOL = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7}}


def dv(where: str, cardinality: int) -> dict[str, Any]:
    return {
        "storageType": "u",
        "pathOrInlineDv": where,
        "offset": 1,
        "sizeInBytes": 40,
        "cardinality": cardinality,
    }


DV1 = dv("ab^-aqEH.-t@S}K{vb[*k^", 3)  # the protocol's example
DV2 = dv("062abuQ5y0+pUWbX4!zteA", 5)  # written by Sail 0.7.2
DV1_FILE = "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
DV2_FILE = "06/deletion_vector_0697ff41-10cd-489d-b05d-d278d4de70aa.bin"


def add(path: str, rows: int, vector: dict[str, Any] | None = None) -> dict[str, Any]:
    action: dict[str, Any] = {
        "path": path,
        "size": 100,
        "modificationTime": 0,
        "dataChange": True,
        "partitionValues": {},
        "stats": json.dumps({"numRecords": rows}),
    }
    if vector is not None:
        action["deletionVector"] = vector
    return {"add": action}


def remove(path: str, at: int, vector: dict[str, Any] | None = None) -> dict[str, Any]:
    action: dict[str, Any] = {"path": path, "deletionTimestamp": at, "dataChange": True}
    if vector is not None:
        action["deletionVector"] = vector
    return {"remove": action}


def write_commit(table: Path, version: int, *actions: dict[str, Any]) -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"commitInfo": {"timestamp": version}}), *map(json.dumps, actions)]
    (log / f"{version:020}.json").write_text("\n".join(lines) + "\n")


def test_z85_and_deletion_vector_files_are_decoded_as_the_protocol_says() -> None:
    assert z85_decode("HelloWorld").hex() == "864fd26fb559f75b"  # the Z85 specification's
    assert deletion_vector_file(DV1) == DV1_FILE
    assert deletion_vector_file(DV2) == DV2_FILE
    assert deletion_vector_file({"storageType": "i", "pathOrInlineDv": "xyz"}) is None
    absolute = {"storageType": "p", "pathOrInlineDv": "s3://b/t/dv.bin"}
    assert deletion_vector_file(absolute) == "s3://b/t/dv.bin"
    with pytest.raises(ValueError, match="Z85"):
        z85_decode("abcd")


def _log(table: Path) -> None:
    write_commit(table, 0, PROTOCOL, add("a.parquet", 10), add("b%20c.parquet", 20))
    # A MERGE marks rows of b deleted: remove (b, no vector), add (b, vector 1); adds c.
    write_commit(
        table, 1, remove("b%20c.parquet", 1000), add("b%20c.parquet", 20, DV1), add("c", 4)
    )
    # Another marks more: the old vector is replaced; a is compacted away.
    write_commit(
        table,
        2,
        remove("b%20c.parquet", 2000, DV1),
        add("b%20c.parquet", 20, DV2),
        remove("a.parquet", 2000),
    )


def test_a_replay_keeps_a_path_live_when_only_its_vector_changes(tmp_path: Path) -> None:
    _log(tmp_path)
    files = read_table_files(str(tmp_path))
    assert files.version == 2
    assert files.live_paths == {"b c.parquet", "c"}
    assert files.live_vectors == {DV2_FILE}
    assert files.deleted_fraction() == 5 / 24
    tombstones = {(t.path, t.vector, t.removed_at, t.version) for t in files.tombstones.values()}
    assert tombstones == {
        ("a.parquet", None, 2000, 2),
        ("b c.parquet", DV1_FILE, 2000, 2),
        ("b c.parquet", None, 1000, 1),
    }


def test_a_checkpoint_stands_in_for_the_commits_before_it(tmp_path: Path) -> None:
    _log(tmp_path)
    vector = pa.struct(
        [
            ("storageType", pa.string()),
            ("pathOrInlineDv", pa.string()),
            ("offset", pa.int32()),
            ("sizeInBytes", pa.int32()),
            ("cardinality", pa.int64()),
        ]
    )
    adds = pa.struct([("path", pa.string()), ("stats", pa.string()), ("deletionVector", vector)])
    removes = pa.struct(
        [("path", pa.string()), ("deletionTimestamp", pa.int64()), ("deletionVector", vector)]
    )
    # The checkpoint at version 1 (what versions 0 and 1 leave), then version 0 is gone.
    checkpoint = pa.table(
        {
            "add": pa.array(
                [
                    {"path": "a.parquet", "stats": '{"numRecords": 10}', "deletionVector": None},
                    {"path": "b%20c.parquet", "stats": '{"numRecords": 20}', "deletionVector": DV1},
                    {"path": "c", "stats": '{"numRecords": 4}', "deletionVector": None},
                    None,
                ],
                adds,
            ),
            "remove": pa.array(
                [None, None, None, {"path": "b%20c.parquet", "deletionTimestamp": 1000}],
                removes,
            ),
        }
    )
    pq.write_table(checkpoint, tmp_path / "_delta_log" / f"{1:020}.checkpoint.parquet")
    (tmp_path / "_delta_log" / f"{0:020}.json").unlink()
    files = read_table_files(str(tmp_path))
    assert files.live_paths == {"b c.parquet", "c"}
    assert files.live_vectors == {DV2_FILE}
    # A tombstone read from the checkpoint was removed at or before its version.
    assert {(t.path, t.vector, t.version) for t in files.tombstones.values()} == {
        ("a.parquet", None, 2),
        ("b c.parquet", DV1_FILE, 2),
        ("b c.parquet", None, 1),
    }


def test_a_log_missing_a_commit_no_checkpoint_covers_is_refused(tmp_path: Path) -> None:
    _log(tmp_path)
    (tmp_path / "_delta_log" / f"{1:020}.json").unlink()
    with pytest.raises(LogUnreadableError, match="misses commits"):
        read_table_files(str(tmp_path))
    with pytest.raises(LogUnreadableError, match="no Delta log"):
        read_table_files(str(tmp_path / "nothing"))
