"""Tables without a key keep identical rows: ``DeltaSink`` on Sail, read back with delta-rs.

The reference is PostgreSQL's apply worker: every INSERT adds a row, every UPDATE or DELETE
(old tuple = the whole row) changes or removes exactly one equal row, NULLs matching NULLs;
and replaying what Delta already holds changes nothing (``sink/planning/keyless.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from sink import DeltaSink, table_path
from tests.support.oracle import assert_delta_matches, delta_rows
from tests.support.settings import sink_settings
from tests.support.sink_changes import INT4, batch, col, delete, insert, rel, truncate, update

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

LOG = rel("public.log", col("a", INT4), col("b"), identity="f")
KEYED = rel("public.log", col("a", INT4, key=True), col("b"))


def log_path(lake: Path) -> str:
    return table_path(str(lake), "public", "log")


def rows(*pairs: tuple[int | None, str | None]) -> list[dict[str, object]]:
    return [{"a": a, "b": b} for a, b in pairs]


@pytest.fixture
def sink(spark_session: Any, tmp_path: Path) -> DeltaSink:
    return DeltaSink(spark_session, sink_settings(tmp_path / "lake"))


def test_identical_rows_are_kept_and_each_delete_removes_one_of_them(
    sink: DeltaSink, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    # INSERT ... generate_series(1, 5) twice, then DELETE WHERE a = 3: two DELETE messages.
    sink.apply(batch(*(insert(LOG, str(a), "x", lsn=10, ordinal=a) for a in range(1, 6))))
    sink.apply(batch(*(insert(LOG, str(a), "x", lsn=20, ordinal=a) for a in range(1, 6))))
    sink.apply(
        batch(
            delete(LOG, "3", "x", lsn=30, old_kind="O"),
            delete(LOG, "3", "x", lsn=30, ordinal=1, old_kind="O"),
        )
    )
    expected = rows(*[(a, "x") for a in (1, 2, 4, 5) for _ in range(2)])
    assert_delta_matches(log_path(lake), expected)
    # One of two equal rows changes; the other keeps its value (and NULLs match NULLs).
    sink.apply(
        batch(
            update(LOG, "1", "y", old=["1", "x"], old_kind="O", lsn=40),
            insert(LOG, None, None, lsn=40, ordinal=1),
            insert(LOG, None, None, lsn=40, ordinal=2),
        )
    )
    sink.apply(batch(delete(LOG, None, None, lsn=50, old_kind="O")))
    expected = rows((1, "x"), (1, "y"), (None, None), *[(a, "x") for a in (2, 4, 5) for _ in "12"])
    assert_delta_matches(log_path(lake), expected)
    identities = {
        (r["_wal2delta_row_lsn"], r["_wal2delta_row_ordinal"])
        for r in delta_rows(log_path(lake), include_metadata=True)
    }
    assert len(identities) == len(expected), "every row has its own hidden identity"


def test_replaying_batches_after_a_crash_changes_nothing(
    sink: DeltaSink, spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    batches = [
        batch(
            insert(LOG, "1", "x", lsn=10),
            insert(LOG, "1", "x", lsn=10, ordinal=1),
            insert(LOG, "1", "x", lsn=10, ordinal=2),
        ),
        batch(delete(LOG, "1", "x", lsn=20, old_kind="O")),
        batch(update(LOG, "1", "z", old=["1", "x"], old_kind="O", lsn=30)),
        # A transaction split across batches: its second take must still find a row.
        batch(delete(LOG, "1", "x", lsn=40, old_kind="O")),
        batch(insert(LOG, "1", "x", lsn=40, ordinal=1), delete(LOG, "1", "z", lsn=50)),
    ]
    for changes in batches:
        sink.apply(changes)
    expected = rows((1, "x"))
    assert_delta_matches(log_path(lake), expected)
    # After a restart the server re-sends everything after the acknowledged position, which
    # the new process may batch differently; the same process may also be sent it again.
    replayed = [change for changes in batches for change in changes.changes]
    restarted = DeltaSink(spark_session, sink_settings(lake))
    restarted.apply(batch(*replayed))
    assert_delta_matches(log_path(lake), expected)
    for start in range(len(batches)):
        restarted = DeltaSink(spark_session, sink_settings(lake))
        for changes in batches[start:]:
            restarted.apply(changes)
            sink.apply(changes)
        assert_delta_matches(log_path(lake), expected)


def test_changes_folded_within_one_batch_match_applying_them_one_by_one(
    spark_session: Any, tmp_path: Path
) -> None:
    changes = [
        insert(LOG, "1", "x", lsn=10),
        insert(LOG, "1", "x", lsn=10, ordinal=1),
        insert(LOG, "2", "x", lsn=10, ordinal=2),
        update(LOG, "1", "y", old=["1", "x"], old_kind="O", lsn=20),
        update(LOG, "1", "x", old=["1", "y"], old_kind="O", lsn=20, ordinal=1),
        update(LOG, "2", "x", old=["1", "x"], old_kind="O", lsn=30),
        delete(LOG, "2", "x", lsn=40, old_kind="O"),
        insert(LOG, "3", None, lsn=50),
    ]
    one_by_one = DeltaSink(spark_session, sink_settings(tmp_path / "a"))
    folded = DeltaSink(spark_session, sink_settings(tmp_path / "b"))
    for change in changes:
        one_by_one.apply(batch(change))
    folded.apply(batch(*changes[:2]))
    folded.apply(batch(*changes[2:]))
    expected = rows((1, "x"), (2, "x"), (3, None))
    assert_delta_matches(table_path(str(tmp_path / "a"), "public", "log"), expected)
    assert_delta_matches(table_path(str(tmp_path / "b"), "public", "log"), expected)


def test_a_change_of_a_row_delta_never_held_is_skipped_and_logged(
    sink: DeltaSink, tmp_path: Path
) -> None:
    sink.apply(batch(insert(LOG, "1", "x", lsn=10)))
    with capture_logs() as logs:
        sink.apply(batch(delete(LOG, "9", "gone", lsn=20, old_kind="O")))
    assert_delta_matches(log_path(tmp_path / "lake"), rows((1, "x")))
    found = [e for e in logs if e["event"] == "keyless change found no equal row"]
    assert [(e["table"], e["change_count"]) for e in found] == [("public.log", 1)]


def test_soft_deletes_flag_exactly_one_of_several_identical_rows(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake, soft_delete=True))
    sink.apply(batch(insert(LOG, "1", "x", lsn=10), insert(LOG, "1", "x", lsn=10, ordinal=1)))
    removal = batch(delete(LOG, "1", "x", lsn=20, old_kind="O"))
    sink.apply(removal)
    sink.apply(removal)
    assert_delta_matches(log_path(lake), rows((1, "x")))
    stored = delta_rows(log_path(lake), include_metadata=True, live_only=False)
    assert sorted(bool(r["_wal2delta_deleted"]) for r in stored) == [False, True]


def test_a_table_that_loses_its_key_gives_its_rows_an_identity_first(
    sink: DeltaSink, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    # Written while the table had a primary key: no hidden identities yet.
    sink.apply(batch(insert(KEYED, "1", "x", lsn=10), insert(KEYED, "2", "x", lsn=10, ordinal=1)))
    # The key is dropped; the table becomes REPLICA IDENTITY FULL and gains a duplicate.
    sink.apply(batch(insert(LOG, "1", "x", lsn=20), delete(LOG, "2", "x", lsn=30, old_kind="O")))
    sink.apply(batch(delete(LOG, "1", "x", lsn=40, old_kind="O")))
    assert_delta_matches(log_path(lake), rows((1, "x")))
    stored = delta_rows(log_path(lake), include_metadata=True)
    assert all(r["_wal2delta_row_lsn"] is not None for r in stored)


def test_a_soft_truncate_stamps_its_own_position_so_later_changes_of_its_transaction_apply(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    settings = sink_settings(lake, soft_delete=True)
    DeltaSink(spark_session, settings).apply(
        batch(*(insert(LOG, "1", "x", lsn=10, ordinal=i) for i in range(4)))
    )
    # After a restart the floor is read from the table, tombstones included.
    DeltaSink(spark_session, settings).apply(
        batch(truncate(LOG, lsn=20), insert(LOG, "1", "x", lsn=20, ordinal=1))
    )
    assert_delta_matches(log_path(lake), rows((1, "x")))
