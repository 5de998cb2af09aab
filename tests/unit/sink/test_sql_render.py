"""Golden SQL text for the statements the Delta sink runs on Sail and Spark + Delta."""

from __future__ import annotations

from dataclasses import replace

import pytest

from decoder import RowChange
from sink.engine.sql import (
    SOURCE_MARK,
    delta_table,
    quote,
    render_added_columns_select,
    render_column_reset,
    render_merge,
    render_messages_merge,
    render_snapshot_marker_merge,
    render_toast_anomaly_count,
    render_truncate,
    source_columns,
)
from sink.planning.fold import plan_batch
from sink.planning.partitioning import MAX_LISTED_BUCKETS, BucketFilter
from sink.planning.plan import MergeStep
from tests.support.settings import metadata_columns
from tests.support.sink_changes import INT4, U, batch, col, insert, rel, update

DOCS = rel("public.docs", col("id", INT4, key=True), col("body"), col("rev", INT4))
LOG = rel("public.log", col("id", INT4), col("body"), identity="n")
META = metadata_columns()
SOFT = metadata_columns(soft_delete=True)
TARGET = delta_table("/lake/public/docs")


def step_of(*changes: RowChange) -> MergeStep:
    (step,) = plan_batch(batch(*changes)).tables[0].steps
    assert isinstance(step, MergeStep)
    return step


def test_identifiers_and_paths_are_backtick_quoted_with_backticks_doubled() -> None:
    assert quote("plain") == "`plain`"
    assert quote("we`ird") == "`we``ird`"
    assert delta_table("/lake/a`b") == "delta.`/lake/a``b`"


def test_no_identifier_can_hold_the_source_mark() -> None:
    # The lake port replaces SOURCE_MARK in rendered statements: it must stand for nothing
    # else, and a quoted name can never contain it.
    assert "\x00" in SOURCE_MARK
    with pytest.raises(ValueError, match="NUL"):
        quote(f"a{SOURCE_MARK}b")
    step = step_of(insert(DOCS, "1", "a", "1", lsn=10))
    merge = render_merge(step, META, target=TARGET, view=SOURCE_MARK)
    assert merge.count(SOURCE_MARK) == 1
    assert merge.replace(SOURCE_MARK, "`src`") == render_merge(
        step, META, target=TARGET, view="`src`"
    )


def test_upsert_and_delete_merge_with_lsn_guard() -> None:
    step = step_of(insert(DOCS, "1", "a", "1", lsn=10))
    assert render_merge(step, META, target=TARGET, view="`src`") == (
        "MERGE INTO delta.`/lake/public/docs` AS t\n"
        "USING `src` AS s\n"
        "ON t.`id` <=> s.`id`\n"
        "WHEN MATCHED AND s.`__w2d_delete` AND t.`_wal2delta_lsn` <= s.`_wal2delta_lsn` "
        "THEN DELETE\n"
        "WHEN MATCHED AND NOT s.`__w2d_delete` AND t.`_wal2delta_lsn` <= s.`_wal2delta_lsn` "
        "THEN UPDATE SET\n"
        "  t.`id` = s.`id`,\n"
        "  t.`body` = s.`body`,\n"
        "  t.`rev` = s.`rev`,\n"
        "  t.`_wal2delta_lsn` = s.`_wal2delta_lsn`,\n"
        "  t.`_wal2delta_commit_ts` = s.`_wal2delta_commit_ts`,\n"
        "  t.`_wal2delta_ordinal` = s.`_wal2delta_ordinal`\n"
        "WHEN NOT MATCHED AND NOT s.`__w2d_delete` THEN INSERT "
        "(`id`, `body`, `rev`, `_wal2delta_lsn`, `_wal2delta_commit_ts`, `_wal2delta_ordinal`)\n"
        "  VALUES (s.`id`, s.`body`, s.`rev`, s.`_wal2delta_lsn`, s.`_wal2delta_commit_ts`, "
        "s.`_wal2delta_ordinal`)"
    )


def test_kept_toast_columns_keep_the_target_value_and_are_never_inserted() -> None:
    step = step_of(update(DOCS, "1", U, "2", lsn=10))
    assert render_merge(step, META, target=TARGET, view="`src`") == (
        "MERGE INTO delta.`/lake/public/docs` AS t\n"
        "USING `src` AS s\n"
        "ON t.`id` <=> s.`id`\n"
        "WHEN MATCHED AND s.`__w2d_delete` AND t.`_wal2delta_lsn` <= s.`_wal2delta_lsn` "
        "THEN DELETE\n"
        "WHEN MATCHED AND NOT s.`__w2d_delete` AND t.`_wal2delta_lsn` <= s.`_wal2delta_lsn` "
        "THEN UPDATE SET\n"
        "  t.`id` = s.`id`,\n"
        "  t.`body` = CASE WHEN s.`__w2d_keep_1` THEN t.`body` ELSE s.`body` END,\n"
        "  t.`rev` = s.`rev`,\n"
        "  t.`_wal2delta_lsn` = s.`_wal2delta_lsn`,\n"
        "  t.`_wal2delta_commit_ts` = s.`_wal2delta_commit_ts`,\n"
        "  t.`_wal2delta_ordinal` = s.`_wal2delta_ordinal`\n"
        "WHEN NOT MATCHED AND NOT s.`__w2d_delete` AND NOT s.`__w2d_keep_1` THEN INSERT "
        "(`id`, `body`, `rev`, `_wal2delta_lsn`, `_wal2delta_commit_ts`, `_wal2delta_ordinal`)\n"
        "  VALUES (s.`id`, s.`body`, s.`rev`, s.`_wal2delta_lsn`, s.`_wal2delta_commit_ts`, "
        "s.`_wal2delta_ordinal`)"
    )


RESOLVED_SOURCE = (
    "(\n"
    "  SELECT\n"
    "    s.`id`,\n"
    "    CASE WHEN s.`__w2d_keep_1` AND m.`_wal2delta_lsn` IS NOT NULL THEN m.`body` "
    "ELSE s.`body` END AS `body`,\n"
    "    s.`rev`,\n"
    "    s.`_wal2delta_lsn`,\n"
    "    s.`_wal2delta_commit_ts`,\n"
    "    s.`_wal2delta_ordinal`,\n"
    "    s.`__w2d_delete`,\n"
    "    s.`__w2d_keep_1` AND m.`_wal2delta_lsn` IS NULL AS `__w2d_keep_1`\n"
    "  FROM `src` AS s\n"
    "  LEFT JOIN delta.`/lake/public/docs` AS m\n"
    "    ON s.`__w2d_moved` AND m.`id` <=> s.`__w2d_from_0` "
    "AND (m.`_wal2delta_lsn` < s.`__w2d_moved_lsn` OR (m.`_wal2delta_lsn` = s.`__w2d_moved_lsn` "
    "AND coalesce(m.`_wal2delta_ordinal`, -1) < s.`__w2d_moved_ordinal`))\n"
    ")"
)


def moved_step() -> MergeStep:
    return step_of(
        update(DOCS, "1", U, "2", lsn=10),
        update(DOCS, "5", U, "2", old=["2", None, None], lsn=10, ordinal=1),
    )


def test_moved_rows_read_kept_columns_from_their_old_target_row_with_soft_deletes() -> None:
    assert render_merge(moved_step(), SOFT, target=TARGET, view="`src`") == (
        "MERGE INTO delta.`/lake/public/docs` AS t\n"
        f"USING {RESOLVED_SOURCE} AS s\n"
        "ON t.`id` <=> s.`id`\n"
        "WHEN MATCHED AND s.`__w2d_delete` AND t.`_wal2delta_lsn` <= s.`_wal2delta_lsn` "
        "THEN UPDATE SET t.`_wal2delta_deleted` = true, "
        "t.`_wal2delta_lsn` = s.`_wal2delta_lsn`, "
        "t.`_wal2delta_commit_ts` = s.`_wal2delta_commit_ts`, "
        "t.`_wal2delta_ordinal` = s.`_wal2delta_ordinal`\n"
        "WHEN MATCHED AND NOT s.`__w2d_delete` AND t.`_wal2delta_lsn` <= s.`_wal2delta_lsn` "
        "THEN UPDATE SET\n"
        "  t.`id` = s.`id`,\n"
        "  t.`body` = CASE WHEN s.`__w2d_keep_1` THEN t.`body` ELSE s.`body` END,\n"
        "  t.`rev` = s.`rev`,\n"
        "  t.`_wal2delta_lsn` = s.`_wal2delta_lsn`,\n"
        "  t.`_wal2delta_commit_ts` = s.`_wal2delta_commit_ts`,\n"
        "  t.`_wal2delta_ordinal` = s.`_wal2delta_ordinal`,\n"
        "  t.`_wal2delta_deleted` = false\n"
        "WHEN NOT MATCHED AND NOT s.`__w2d_keep_1` THEN INSERT "
        "(`id`, `body`, `rev`, `_wal2delta_lsn`, `_wal2delta_commit_ts`, `_wal2delta_ordinal`, "
        "`_wal2delta_deleted`)\n"
        "  VALUES (s.`id`, s.`body`, s.`rev`, s.`_wal2delta_lsn`, s.`_wal2delta_commit_ts`, "
        "s.`_wal2delta_ordinal`, s.`__w2d_delete`)"
    )


def test_toast_anomaly_count_finds_kept_rows_missing_in_the_target() -> None:
    assert render_toast_anomaly_count(moved_step(), SOFT, target=TARGET, view="`src`") == (
        "SELECT count(*) AS `toast_anomalies`\n"
        f"FROM (SELECT * FROM {RESOLVED_SOURCE} AS s "
        "WHERE NOT s.`__w2d_delete` AND s.`__w2d_keep_1`) AS s\n"
        "LEFT ANTI JOIN delta.`/lake/public/docs` AS t\n"
        "ON t.`id` <=> s.`id`"
    )


def test_no_anomaly_query_when_no_row_keeps_a_column() -> None:
    step = step_of(insert(DOCS, "1", "a", "1", lsn=10))
    assert render_toast_anomaly_count(step, META, target=TARGET, view="`src`") is None


def test_source_view_columns_follow_the_step() -> None:
    assert source_columns(moved_step(), META) == (
        "id",
        "body",
        "rev",
        "_wal2delta_lsn",
        "_wal2delta_commit_ts",
        "_wal2delta_ordinal",
        "__w2d_delete",
        "__w2d_keep_1",
        "__w2d_moved",
        "__w2d_moved_lsn",
        "__w2d_moved_ordinal",
        "__w2d_from_0",
    )


def test_tables_without_identity_only_insert_rows_not_seen_at_that_lsn_and_ordinal() -> None:
    step = step_of(insert(LOG, "1", "a", lsn=10))
    assert render_merge(step, META, target=delta_table("/lake/public/log"), view="`src`") == (
        "MERGE INTO delta.`/lake/public/log` AS t\n"
        "USING `src` AS s\n"
        "ON t.`_wal2delta_lsn` <=> s.`_wal2delta_lsn` "
        "AND t.`_wal2delta_ordinal` <=> s.`_wal2delta_ordinal`\n"
        "WHEN NOT MATCHED AND NOT s.`__w2d_delete` THEN INSERT "
        "(`id`, `body`, `_wal2delta_lsn`, `_wal2delta_commit_ts`, `_wal2delta_ordinal`)\n"
        "  VALUES (s.`id`, s.`body`, s.`_wal2delta_lsn`, s.`_wal2delta_commit_ts`, "
        "s.`_wal2delta_ordinal`)"
    )
    assert source_columns(step, META) == (
        "id",
        "body",
        "_wal2delta_lsn",
        "_wal2delta_commit_ts",
        "_wal2delta_ordinal",
        "__w2d_delete",
    )


def test_truncate_deletes_rows_at_or_below_its_lsn() -> None:
    assert render_truncate(1234, META, target=TARGET, view="") == (
        "DELETE FROM delta.`/lake/public/docs` WHERE `_wal2delta_lsn` <= 1234"
    )


def test_soft_truncate_flags_rows_at_or_below_its_lsn() -> None:
    assert render_truncate(1234, SOFT, target=TARGET, view="`trunc`") == (
        "MERGE INTO delta.`/lake/public/docs` AS t\n"
        "USING `trunc` AS s\n"
        "ON t.`_wal2delta_lsn` <= s.`_wal2delta_lsn`\n"
        "WHEN MATCHED THEN UPDATE SET t.`_wal2delta_deleted` = true, "
        "t.`_wal2delta_lsn` = s.`_wal2delta_lsn`, "
        "t.`_wal2delta_commit_ts` = s.`_wal2delta_commit_ts`"
    )


def test_messages_are_inserted_once_per_message_lsn() -> None:
    target = delta_table("/lake/_wal2delta_messages")
    assert render_messages_merge(META, target=target, view="`m`") == (
        "MERGE INTO delta.`/lake/_wal2delta_messages` AS t\n"
        "USING `m` AS s\n"
        "ON t.`message_lsn` = s.`message_lsn`\n"
        "WHEN NOT MATCHED THEN INSERT (`message_lsn`, `prefix`, `content`, `transactional`, "
        "`_wal2delta_lsn`, `_wal2delta_commit_ts`)\n"
        "  VALUES (s.`message_lsn`, s.`prefix`, s.`content`, s.`transactional`, "
        "s.`_wal2delta_lsn`, s.`_wal2delta_commit_ts`)"
    )


def test_custom_metadata_column_names_are_used_everywhere() -> None:
    names = {"lsn_column": "src_lsn", "commit_time_column": "src_ts"}
    meta = replace(metadata_columns(metadata=names), ordinal="src_o")  # not configurable
    text = render_merge(
        step_of(insert(DOCS, "1", "a", "1", lsn=10)), meta, target=TARGET, view="`v`"
    )
    assert "t.`src_lsn` <= s.`src_lsn`" in text
    assert "t.`src_ts` = s.`src_ts`" in text
    assert "t.`src_o` = s.`src_o`" in text
    assert "_wal2delta" not in text


def test_snapshot_markers_are_upserted_by_slot() -> None:
    target = delta_table("/lake/_wal2delta_snapshots")
    assert render_snapshot_marker_merge(target=target, view="`m`") == (
        "MERGE INTO delta.`/lake/_wal2delta_snapshots` AS t\n"
        "USING `m` AS s\n"
        "ON t.`slot` = s.`slot`\n"
        "WHEN MATCHED THEN UPDATE SET t.`status` = s.`status`, "
        "t.`consistent_point` = s.`consistent_point`, t.`updated_at` = s.`updated_at`\n"
        "WHEN NOT MATCHED THEN INSERT (`slot`, `status`, `consistent_point`, `updated_at`)\n"
        "  VALUES (s.`slot`, s.`status`, s.`consistent_point`, s.`updated_at`)"
    )


def test_an_update_writes_only_the_columns_of_its_relation() -> None:
    """Target columns the relation no longer carries keep their value (a subscriber's too)."""
    step = step_of(insert(DOCS, "1", "a", "1", lsn=10))
    text = render_merge(step, META, target=TARGET, view="`src`")
    update_clause = text.split("WHEN MATCHED AND NOT")[1].split("WHEN NOT MATCHED")[0]
    assert "NULL" not in update_clause
    assigned = [line.split(" = ")[0] for line in update_clause.strip().split("\n")[1:]]
    assert assigned == [
        "  t.`id`",
        "  t.`body`",
        "  t.`rev`",
        "  t.`_wal2delta_lsn`",
        "  t.`_wal2delta_commit_ts`",
        "  t.`_wal2delta_ordinal`",
    ]


def test_added_columns_are_filled_in_rows_up_to_the_first_change_of_the_new_relation() -> None:
    assert render_added_columns_select(
        ["colour", "size"], META, target=TARGET, view="`defaults`", lsn=4096
    ) == (
        "SELECT t.*, "
        "CASE WHEN t.`_wal2delta_lsn` <= 4096 THEN s.`colour` END AS `colour`, "
        "CASE WHEN t.`_wal2delta_lsn` <= 4096 THEN s.`size` END AS `size`\n"
        "FROM delta.`/lake/public/docs` AS t\n"
        "CROSS JOIN `defaults` AS s"
    )


def test_returned_columns_are_reset_in_rows_up_to_the_first_change_of_the_new_relation() -> None:
    assert render_column_reset(["qty"], META, target=TARGET, view="`defaults`", lsn=4096) == (
        "MERGE INTO delta.`/lake/public/docs` AS t\n"
        "USING `defaults` AS s\n"
        "ON t.`_wal2delta_lsn` <= 4096\n"
        "WHEN MATCHED THEN UPDATE SET t.`qty` = s.`qty`"
    )


def test_a_key_partitioned_merge_names_its_partitions_and_inserts_the_bucket() -> None:
    step = step_of(insert(DOCS, "1", "a", "1", lsn=10))
    buckets = BucketFilter("_wal2delta_key_bucket", (0, 3), has_null=False)
    rendered = render_merge(step, META, target=TARGET, view="`src`", buckets=buckets)
    assert rendered.splitlines()[2] == (
        "ON t.`_wal2delta_key_bucket` IN (0, 3) "
        "AND t.`_wal2delta_key_bucket` <=> s.`_wal2delta_key_bucket` AND t.`id` <=> s.`id`"
    )
    assert rendered.endswith(
        "(`id`, `body`, `rev`, `_wal2delta_lsn`, `_wal2delta_commit_ts`, `_wal2delta_ordinal`, "
        "`_wal2delta_key_bucket`)\n"
        "  VALUES (s.`id`, s.`body`, s.`rev`, s.`_wal2delta_lsn`, s.`_wal2delta_commit_ts`, "
        "s.`_wal2delta_ordinal`, s.`_wal2delta_key_bucket`)"
    )


@pytest.mark.parametrize(
    ("buckets", "has_null", "predicate"),
    [
        ((5,), False, "t.`b` IN (5)"),
        ((-1, 2), True, "(t.`b` IN (-1, 2) OR t.`b` IS NULL)"),
        ((), True, "t.`b` IS NULL"),
        (tuple(range(MAX_LISTED_BUCKETS + 1)), False, None),
    ],
)
def test_the_partition_predicate_lists_buckets_and_null_keys(
    buckets: tuple[int, ...], has_null: bool, predicate: str | None
) -> None:
    assert BucketFilter("b", buckets, has_null).target_predicate("t", "`b`") == predicate


def test_moved_rows_carry_their_bucket_through_the_resolved_source() -> None:
    buckets = BucketFilter("_wal2delta_key_bucket", (0,), has_null=False)
    rendered = render_merge(moved_step(), META, target=TARGET, view="`src`", buckets=buckets)
    assert "    s.`__w2d_delete`,\n    s.`_wal2delta_key_bucket`,\n" in rendered
