"""A compaction rewrites only the partitions crowded with small files (``sink.compaction``).

delta-rs alone rewrites every partition holding two files below the target size: the first
compaction of a table filled by a parallel copy rewrote nearly all of it, in front of the
next batch (issue 40). Tables written with delta-rs, compacted by ``Compactor``, read back.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from structlog.testing import capture_logs

from sink.upkeep.compaction import MIN_SMALL_FILES, Compactor, _filters

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _append(path: str, bucket: int, ids: list[int]) -> None:
    write_deltalake(
        path,
        pa.table({"id": ids, "bucket": [bucket] * len(ids)}),
        mode="append",
        partition_by=["bucket"],
    )


def _files_per_bucket(path: str) -> dict[int, int]:
    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    counts: dict[int, int] = {}
    for bucket in actions.column("partition.bucket").to_pylist():
        counts[int(bucket)] = counts.get(int(bucket), 0) + 1
    return counts


def _ids(path: str) -> list[int]:
    return sorted(DeltaTable(path).to_pyarrow_table().column("id").to_pylist())


def test_only_the_partitions_crowded_with_small_files_are_rewritten(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _append(path, -1, [-2, -1])  # a copied partition: two files, no longer written
    _append(path, -1, [-4, -3])
    for n in range(MIN_SMALL_FILES):  # the partition the batches write
        _append(path, 0, [n])
    compactor = Compactor(MIN_SMALL_FILES + 2)
    compactor.wrote([path])  # its commits since the last compaction: due at once
    compactor.compact_due()
    assert DeltaTable(path).history(limit=1)[0]["operation"] == "OPTIMIZE"
    assert _files_per_bucket(path) == {-1: 2, 0: 1}
    assert _ids(path) == [-4, -3, -2, -1, *range(MIN_SMALL_FILES)]


def test_a_table_whose_partitions_hold_few_small_files_gets_no_compaction_commit(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "t")
    for bucket in (-2, -1, 0):
        _append(path, bucket, [bucket * 10])
        _append(path, bucket, [bucket * 10 + 1])
    compactor = Compactor(6)
    compactor.wrote([path])
    compactor.compact_due()
    assert DeltaTable(path).history(limit=1)[0]["operation"] == "WRITE"
    assert _files_per_bucket(path) == {-2: 2, -1: 2, 0: 2}


def test_an_unpartitioned_table_is_compacted_once_it_holds_enough_small_files(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "t")
    for n in range(3):
        write_deltalake(path, pa.table({"id": [n]}), mode="append")
    compactor = Compactor(3)  # after three writes: three small files are enough
    compactor.wrote([path])
    compactor.compact_due()
    assert DeltaTable(path).history(limit=1)[0]["operation"] == "OPTIMIZE"
    assert len(DeltaTable(path).file_uris()) == 1
    assert _ids(path) == [0, 1, 2]


def test_a_table_without_files_is_not_compacted_and_not_warned_about(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _append(path, 0, [1])
    _append(path, 0, [2])
    write_deltalake(
        path,
        pa.table({"id": pa.array([], pa.int64()), "bucket": pa.array([], pa.int64())}),
        mode="overwrite",
        partition_by=["bucket"],
    )
    compactor = Compactor(2)
    with capture_logs() as logs:
        compactor.wrote([path])
        compactor.compact_due()
    assert [e for e in logs if e["log_level"] == "warning"] == []
    assert DeltaTable(path).history(limit=1)[0]["operation"] == "WRITE"
    assert _ids(path) == []


@pytest.mark.parametrize(
    ("partitions", "expected"),
    [
        ([(("bucket", -1),), (("bucket", 0),)], [("bucket", "in", ["-1", "0"])]),
        ([()], None),  # unpartitioned: the whole table
        ([(("bucket", None),)], None),  # a null partition: no filter names it
        ([(("a", 1), ("b", 2))], None),  # several partition columns: the whole table
    ],
)
def test_the_filter_names_exactly_the_crowded_partitions_or_the_whole_table(
    partitions: list[tuple[tuple[str, object], ...]],
    expected: list[tuple[str, str, object]] | None,
) -> None:
    assert _filters(partitions) == expected
