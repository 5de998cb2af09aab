"""Snapshot appends through delta-rs (``sink.deltars``): who writes, and what happens when it can't.

Real Delta tables on local disk, written and read back with delta-rs; errors that local
disk cannot produce on demand (a commit conflict) are raised by a stand-in writer.
"""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from sink.base import SinkError, SinkRetryableError
from sink.lake.deltars import DeltaRsAppender
from tests.support.appends import append_from_threads

ROWS = pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", None]})


def _table(tmp_path: Path) -> str:
    path = str(tmp_path / "t")
    write_deltalake(path, ROWS.slice(0, 0))
    return path


def _engines(path: str) -> list[str]:
    return [str(c.get("engineInfo")).split(":")[0] for c in DeltaTable(path).history()]


def test_auto_appends_with_delta_rs(tmp_path: Path) -> None:
    path = _table(tmp_path)
    appender = DeltaRsAppender("auto")
    assert appender.uses_delta_rs(path)
    assert appender.append(path, ROWS, [], "appending t")
    assert DeltaTable(path).to_pyarrow_table().sort_by("id") == ROWS
    assert DeltaTable(path).version() == 1
    assert _engines(path)[0] == "delta-rs"


def test_auto_hands_a_refused_table_to_the_engine_for_good(tmp_path: Path) -> None:
    path = _table(tmp_path)
    appender = DeltaRsAppender("auto")
    wrong = pa.table({"id": ["not a number"]})
    assert not appender.append(path, wrong, [], "appending t")
    assert not appender.uses_delta_rs(path)
    assert DeltaTable(path).version() == 0  # nothing written
    assert appender.uses_delta_rs(path + "-other")


def test_delta_rs_mode_stops_on_a_refused_table(tmp_path: Path) -> None:
    path = _table(tmp_path)
    with pytest.raises(SinkError, match=r"snapshot\.writer"):
        DeltaRsAppender("delta-rs").append(path, pa.table({"id": ["x"]}), [], "appending t")


def test_spark_mode_never_uses_delta_rs(tmp_path: Path) -> None:
    assert not DeltaRsAppender("spark").uses_delta_rs(_table(tmp_path))


def test_partitioned_append_keeps_the_partitioning(tmp_path: Path) -> None:
    path = str(tmp_path / "p")
    rows = ROWS.append_column("bucket", pa.array([0, 0], pa.int64()))
    write_deltalake(path, rows.slice(0, 0), partition_by=["bucket"])
    assert DeltaRsAppender("auto").append(path, rows, ["bucket"], "appending p")
    assert DeltaTable(path).metadata().partition_columns == ["bucket"]
    assert DeltaTable(path).to_pyarrow_table().num_rows == 2


@pytest.mark.parametrize("error", [CommitFailedError("conflict"), OSError("unreachable")])
def test_commit_conflicts_and_io_errors_are_retryable(
    error: Exception, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(deltalake, "write_deltalake", failing)
    with pytest.raises(SinkRetryableError, match="appending t"):
        DeltaRsAppender("auto").append(_table(tmp_path), ROWS, [], "appending t")


def test_append_writes_nothing_when_the_engine_must(tmp_path: Path) -> None:
    path = _table(tmp_path)
    assert not DeltaRsAppender("spark").append(path, ROWS, [], "appending t")
    appender = DeltaRsAppender("auto")
    assert not appender.append(path, pa.table({"id": ["x"]}), [], "appending t")
    assert not appender.append(path, ROWS, [], "appending t")  # refused once: engine from now
    assert DeltaTable(path).version() == 0


def test_appends_to_one_table_from_several_threads_at_once_all_land(tmp_path: Path) -> None:
    # The snapshot's workers append page ranges of one table at once: every blind append
    # must commit (delta-rs retries a lost race at the next version), none lost or doubled.
    append_from_threads(str(tmp_path / "t"))
