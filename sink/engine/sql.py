"""Render the Spark SQL that applies a plan: MERGE, TRUNCATE and the TOAST anomaly count.

Theory of operation
-------------------
Every statement names its columns explicitly and quotes every identifier with backticks,
and targets a path-based table (``delta.`/lake/schema/table```). That subset runs
unchanged on Sail and on Spark 4 with Delta (docs/architecture.md, Spark). Statements
that Sail does not run (``CREATE TABLE delta.`path```, ``ALTER TABLE ... ADD COLUMNS``, correlated
``NOT EXISTS``) are not used; table creation and column addition go through the
DataFrame writer of the lake port, ``lake/tables.py`` (``render_added_columns_select`` is
the query whose result it writes when new columns need values).

The ``view`` argument of every renderer is a relation reference the lake port made
(``tables.LakeTables.view``), used as it is: the embedded engine reads the Parquet file of
the rows itself (``parquet.`/tmp/.../1.parquet```, no temporary view to register and
drop), other engines a quoted temporary view. A keyed step's statements are rendered
before its rows are staged, with ``SOURCE_MARK`` as the view; the lake port puts the
reference in its place when it runs them (``LakeTables.merge``), so a table's write goes
from the executor through the renderer to the lake port once (docs/architecture.md, the
walk of one table).

The source of a MERGE is such a relation holding one row per ``PlannedRow``: the step's
columns, the LSN and commit time metadata columns, and helper columns whose names start
with ``__w2d_``:

* ``__w2d_delete``: the row is a delete.
* ``__w2d_keep_<i>``: column ``i`` of the step is unchanged TOAST for this row; the MERGE
  keeps the target's value (``CASE WHEN s.keep THEN t.c ELSE s.c END``), and a row that
  keeps anything is never inserted, because its value exists nowhere else.
* ``__w2d_moved`` and ``__w2d_from_<j>``: the row moved to a new identity in this batch
  and its kept columns live in the target row whose identity is ``__w2d_from_*``. A left
  join against the target fills them before the MERGE (MERGE reads its source from the
  snapshot before the merge, so the old row is still there even though the same MERGE
  deletes it).

New rows: a step whose keys cannot be in the table (``step_append.py``) is not merged
but appended - the source's rows that are not deleted, in the columns the MERGE would
insert (``new_row_columns``), handed to the lake port's DataFrame writer
(``LakeTables.append_rows``): no SQL, no read of the target.

Replay guard: a target row is updated or deleted only when its LSN is at or below the
source row's (``t.lsn <= s.lsn``), so replaying an older transaction never regresses a row
(invariant 2). Equal LSNs must pass: a batch replayed after a crash carries the same LSNs
as the rows it wrote. Rows are matched with the null-safe ``<=>``, because REPLICA
IDENTITY FULL and configured keys may hold NULLs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from sink.planning.keyless import FoldedStep
from sink.planning.partitioning import BucketFilter
from sink.planning.plan import HELPER_PREFIX, MergeStep
from sink.settings import MetadataColumns as MetadataColumns  # noqa: PLC0414 - re-exported

DELETE_FLAG: Final = f"{HELPER_PREFIX}delete"
MOVED_FLAG: Final = f"{HELPER_PREFIX}moved"
MOVED_LSN: Final = f"{HELPER_PREFIX}moved_lsn"
MOVED_ORDINAL: Final = f"{HELPER_PREFIX}moved_ordinal"
ANOMALY_COUNT: Final = "toast_anomalies"


def keep_flag(index: int) -> str:
    """Name of the helper column flagging column ``index`` of a step as kept."""
    return f"{HELPER_PREFIX}keep_{index}"


def moved_from_column(position: int) -> str:
    """Name of the helper column holding identity column ``position`` of a moved row's origin."""
    return f"{HELPER_PREFIX}from_{position}"


SOURCE_MARK: Final = "\x00source\x00"
"""The ``view`` of a statement rendered before its rows are staged; the lake port replaces
it with the staged rows' reference (``LakeTables.merge``). It holds a NUL, which no
identifier ``quote`` renders can hold, so it stands for nothing else in the SQL."""


def quote(identifier: str) -> str:
    """Quote an identifier for Spark SQL: backticks, with embedded backticks doubled.

    Raises:
        ValueError: ``identifier`` holds a NUL (no PostgreSQL name or path can).
    """
    if "\x00" in identifier:
        raise ValueError(f"an identifier cannot hold a NUL character: {identifier!r}")
    return "`" + identifier.replace("`", "``") + "`"


def delta_table(path: str) -> str:
    """A path-based Delta table reference, ``delta.`<path>```."""
    return "delta." + quote(path)


def _col(alias: str, name: str) -> str:
    return f"{alias}.{quote(name)}"


def _match_condition(
    step: MergeStep,
    meta: MetadataColumns,
    target: str,
    source: str,
    buckets: BucketFilter | None = None,
) -> str:
    if step.identity == "ordinal":
        names = [meta.lsn, meta.ordinal]
    else:
        names = [column.name for column in step.match_columns]
    terms = [f"{_col(target, n)} <=> {_col(source, n)}" for n in names]
    if buckets is not None:
        # Literal partition values first: what lets the engine skip the other partitions.
        terms.insert(0, f"{_col(target, buckets.column)} <=> {_col(source, buckets.column)}")
        listed = buckets.target_predicate(target, quote(buckets.column))
        if listed is not None:
            terms.insert(0, listed)
    return " AND ".join(terms)


def _any_kept(step: MergeStep, alias: str) -> str | None:
    kept = step.kept_indexes
    if not kept:
        return None
    flags = " OR ".join(_col(alias, keep_flag(i)) for i in kept)
    return f"({flags})" if len(kept) > 1 else flags


def source_columns(step: MergeStep, meta: MetadataColumns) -> tuple[str, ...]:
    """The columns of the source view of ``step``, in the order ``arrow.py`` builds them."""
    names = [column.name for column in step.columns]
    names += [meta.lsn, meta.commit_time, meta.ordinal]
    names.append(DELETE_FLAG)
    names += [keep_flag(i) for i in step.kept_indexes]
    if step.has_moved_keeps:
        names += [MOVED_FLAG, MOVED_LSN, MOVED_ORDINAL]
        names += [moved_from_column(j) for j in range(len(step.match_indexes))]
    return tuple(names)


def _resolved_source(
    step: MergeStep,
    meta: MetadataColumns,
    target: str,
    view: str,
    buckets: BucketFilter | None = None,
) -> str:
    """The MERGE source: the view itself, or the view with moved rows' kept values filled."""
    if not step.has_moved_keeps:
        return view
    kept = set(step.kept_indexes)
    select: list[str] = []
    for index, column in enumerate(step.columns):
        if index in kept:
            flag = _col("s", keep_flag(index))
            found = f"{_col('m', meta.lsn)} IS NOT NULL"
            select.append(
                f"CASE WHEN {flag} AND {found} THEN {_col('m', column.name)} "
                f"ELSE {_col('s', column.name)} END AS {quote(column.name)}"
            )
        else:
            select.append(_col("s", column.name))
    select += [
        _col("s", meta.lsn),
        _col("s", meta.commit_time),
        _col("s", meta.ordinal),
        _col("s", DELETE_FLAG),
    ]
    if buckets is not None:
        select.append(_col("s", buckets.column))
    for index in step.kept_indexes:
        flag = keep_flag(index)
        select.append(f"{_col('s', flag)} AND {_col('m', meta.lsn)} IS NULL AS {quote(flag)}")
    join = [_col("s", MOVED_FLAG)]
    join += [
        f"{_col('m', column.name)} <=> {_col('s', moved_from_column(j))}"
        for j, column in enumerate(step.match_columns)
    ]
    # The origin as it was before the move: stamped at a position (LSN, ordinal) before
    # the move's. A replayed batch finds the origin as later changes left it - of the same
    # transaction too, so LSNs alone do not tell. Rows written before tables carried the
    # ordinal have NULL there and are older than any change of the stream that follows.
    origin_lsn, move_lsn = _col("m", meta.lsn), _col("s", MOVED_LSN)
    origin_ordinal = f"coalesce({_col('m', meta.ordinal)}, -1)"
    join.append(
        f"({origin_lsn} < {move_lsn} OR ({origin_lsn} = {move_lsn} "
        f"AND {origin_ordinal} < {_col('s', MOVED_ORDINAL)}))"
    )
    columns = ",\n    ".join(select)
    return (
        f"(\n  SELECT\n    {columns}\n  FROM {view} AS s\n"
        f"  LEFT JOIN {target} AS m\n    ON {' AND '.join(join)}\n)"
    )


def render_merge(
    step: MergeStep,
    meta: MetadataColumns,
    *,
    target: str,
    view: str,
    buckets: BucketFilter | None = None,
) -> str:
    """Render the MERGE that applies one merge step.

    An update writes only the step's columns: a target column the step's relation does
    not carry (dropped in PostgreSQL, or left out of the publication's column list) keeps
    its stored value in updated rows and is NULL in inserted ones, as in the table of a
    native subscriber (docs/architecture.md, Keys and MERGE).

    Args:
        step: the planned rows and their shape.
        meta: metadata column names and the delete mode.
        target: the target table reference (``delta_table(path)``).
        view: the temporary view holding ``source_columns(step, meta)``.
        buckets: for a table partitioned by key range (``partitioning.py``): the view
            also holds the partition column; the condition names the step's partitions
            and inserts write the column.

    Returns:
        One ``MERGE INTO`` statement.
    """
    guard = f"{_col('t', meta.lsn)} <= {_col('s', meta.lsn)}"
    is_delete = _col("s", DELETE_FLAG)
    lines = [
        f"MERGE INTO {target} AS t",
        f"USING {_resolved_source(step, meta, target, view, buckets)} AS s",
        f"ON {_match_condition(step, meta, 't', 's', buckets)}",
    ]
    if step.identity != "ordinal":
        stamp = [
            f"{_col('t', meta.lsn)} = {_col('s', meta.lsn)}",
            f"{_col('t', meta.commit_time)} = {_col('s', meta.commit_time)}",
            f"{_col('t', meta.ordinal)} = {_col('s', meta.ordinal)}",
        ]
        if meta.soft_delete:
            tombstone = [f"{_col('t', meta.deleted)} = true", *stamp]
            lines.append(
                f"WHEN MATCHED AND {is_delete} AND {guard} THEN UPDATE SET " + ", ".join(tombstone)
            )
        else:
            lines.append(f"WHEN MATCHED AND {is_delete} AND {guard} THEN DELETE")
        kept = set(step.kept_indexes)
        assignments = []
        for index, column in enumerate(step.columns):
            target_column, source_column = _col("t", column.name), _col("s", column.name)
            if index in kept:
                flag = _col("s", keep_flag(index))
                value = f"CASE WHEN {flag} THEN {target_column} ELSE {source_column} END"
            else:
                value = source_column
            assignments.append(f"{target_column} = {value}")
        assignments += stamp
        if meta.soft_delete:
            assignments.append(f"{_col('t', meta.deleted)} = false")
        lines.append(
            f"WHEN MATCHED AND NOT {is_delete} AND {guard} THEN UPDATE SET\n  "
            + ",\n  ".join(assignments)
        )
    insert_names = new_row_columns(step, meta, buckets)
    insert_values = [_col("s", name) for name in insert_names]
    if meta.soft_delete:
        # A delete of a row the target does not hold leaves a tombstone, so replaying the
        # older insert later cannot bring the row back.
        insert_names.append(meta.deleted)
        insert_values.append(is_delete)
        conditions = []
    else:
        conditions = [f"NOT {is_delete}"]
    any_kept = _any_kept(step, "s")
    if any_kept is not None:
        conditions.append(f"NOT {any_kept}")
    when = " AND ".join(["WHEN NOT MATCHED", *conditions])
    lines.append(
        f"{when} THEN INSERT ({', '.join(quote(n) for n in insert_names)})\n"
        f"  VALUES ({', '.join(insert_values)})"
    )
    return "\n".join(lines)


def new_row_columns(
    step: MergeStep, meta: MetadataColumns, buckets: BucketFilter | None = None
) -> list[str]:
    """The columns a new row of ``step`` is written with, besides the soft-delete flag: the
    step's columns, the change's stamp, and the key-range partition when there is one.

    The MERGE's ``WHEN NOT MATCHED`` inserts these; an append (``step_append.py``) writes
    the source's rows that are not deleted with exactly these, so an appended row is the
    row the MERGE would have inserted. A target column the step does not carry is NULL in
    new rows either way (Delta appends match columns by name).
    """
    names = [column.name for column in step.columns]
    names += [meta.lsn, meta.commit_time, meta.ordinal]
    if buckets is not None:
        names.append(buckets.column)
    return names


def render_toast_anomaly_count(
    step: MergeStep,
    meta: MetadataColumns,
    *,
    target: str,
    view: str,
    buckets: BucketFilter | None = None,
) -> str | None:
    """Count the rows whose kept (unchanged TOAST) columns exist nowhere in the target.

    Returns:
        A query returning one row with column ``toast_anomalies``, or None when no row of
        the step keeps a column.
    """
    any_kept = _any_kept(step, "s")
    if any_kept is None:
        return None
    source = _resolved_source(step, meta, target, view, buckets)
    return (
        f"SELECT count(*) AS {quote(ANOMALY_COUNT)}\n"
        f"FROM (SELECT * FROM {source} AS s WHERE NOT {_col('s', DELETE_FLAG)} AND {any_kept})"
        " AS s\n"
        f"LEFT ANTI JOIN {target} AS t\n"
        f"ON {_match_condition(step, meta, 't', 's', buckets)}"
    )


def render_truncate(
    lsn: int, meta: MetadataColumns, *, target: str, view: str, ordinal: int | None = None
) -> str:
    """Remove (or flag) every target row written at or before ``lsn``.

    Args:
        lsn: the TRUNCATE's commit LSN.
        meta: metadata column names and the delete mode.
        target: the target table reference.
        view: with soft deletes, a one-row view of the truncate's LSN and commit time
            (``truncate_columns(meta)``); unused otherwise.
        ordinal: with soft deletes on a table with the ordinal column, the TRUNCATE's
            ordinal, stamped with its LSN on the flagged rows (a stamp is a position).
    """
    if not meta.soft_delete:
        return f"DELETE FROM {target} WHERE {quote(meta.lsn)} <= {int(lsn)}"
    return (
        f"MERGE INTO {target} AS t\n"
        f"USING {view} AS s\n"
        f"ON {_col('t', meta.lsn)} <= {_col('s', meta.lsn)}\n"
        f"WHEN MATCHED THEN UPDATE SET {_col('t', meta.deleted)} = true, "
        f"{_col('t', meta.lsn)} = {_col('s', meta.lsn)}, "
        f"{_col('t', meta.commit_time)} = {_col('s', meta.commit_time)}"
        + ("" if ordinal is None else f", {_col('t', meta.ordinal)} = {int(ordinal)}")
    )


def truncate_columns(meta: MetadataColumns) -> tuple[str, str]:
    """Columns of the one-row view a soft TRUNCATE reads."""
    return (meta.lsn, meta.commit_time)


def render_added_columns_select(
    columns: Sequence[str], meta: MetadataColumns, *, target: str, view: str, lsn: int
) -> str:
    """Every target row, plus new ``columns`` holding the view's value in rows up to ``lsn``.

    The executor writes the result over the table with schema merging, which adds the
    columns and fills them in one Delta commit. That is how a column added with a fast
    default reaches the rows that existed before it: PostgreSQL shows the default there
    although no WAL record carries it. Rows written after ``lsn`` (none exist when the
    columns are new) keep NULL.

    Args:
        columns: the new columns; the one-row ``view`` holds their values.
        meta: metadata column names.
        target: the target table reference.
        view: a one-row view with the values, typed as the new columns.
        lsn: commit LSN of the first change that carries the new columns.
    """
    guard = f"{_col('t', meta.lsn)} <= {int(lsn)}"
    added = ", ".join(
        f"CASE WHEN {guard} THEN {_col('s', name)} END AS {quote(name)}" for name in columns
    )
    return f"SELECT t.*, {added}\nFROM {target} AS t\nCROSS JOIN {view} AS s"


def render_column_reset(
    columns: Sequence[str], meta: MetadataColumns, *, target: str, view: str, lsn: int
) -> str:
    """Set ``columns`` to the one-row view's values in every target row up to ``lsn``.

    For a dropped column whose name came back: PostgreSQL shows the new column's default
    (or NULL) in every row that existed before, while Delta still holds the old column's
    values. Rows are not stamped with a new LSN: replaying the statement is harmless,
    because every row at or below ``lsn`` predates the new column.
    """
    assignments = ", ".join(f"{_col('t', name)} = {_col('s', name)}" for name in columns)
    return (
        f"MERGE INTO {target} AS t\n"
        f"USING {view} AS s\n"
        f"ON {_col('t', meta.lsn)} <= {int(lsn)}\n"
        f"WHEN MATCHED THEN UPDATE SET {assignments}"
    )


MESSAGE_COLUMNS: Final = ("message_lsn", "prefix", "content", "transactional")


def render_messages_merge(meta: MetadataColumns, *, target: str, view: str) -> str:
    """Insert logical decoding messages not yet in the messages table.

    A message is identified by its own LSN (every ``pg_logical_emit_message`` writes its
    own WAL record), so a replayed message is recognised and skipped.
    """
    names: Sequence[str] = (*MESSAGE_COLUMNS, meta.lsn, meta.commit_time)
    return (
        f"MERGE INTO {target} AS t\n"
        f"USING {view} AS s\n"
        f"ON {_col('t', 'message_lsn')} = {_col('s', 'message_lsn')}\n"
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(quote(n) for n in names)})\n"
        f"  VALUES ({', '.join(_col('s', n) for n in names)})"
    )


SNAPSHOT_COLUMNS: Final = ("slot", "status", "consistent_point", "updated_at")


def render_snapshot_marker_merge(*, target: str, view: str) -> str:
    """Insert or replace the snapshot marker of one slot (the view's single row)."""
    return render_replace_by_key(SNAPSHOT_COLUMNS, target=target, view=view)


def render_select_all(*, target: str) -> str:
    """Every row of ``target``: what a table's copy replaces it with (``finish_copy``)."""
    return f"SELECT * FROM {target}"


COPY_COLUMNS: Final = ("table_name", "state", "consistent_point", "reason", "updated_at")
"""Columns of ``_wal2delta_copies`` (``copies.py``), keyed by the first."""


def render_replace_by_key(columns: Sequence[str], *, target: str, view: str) -> str:
    """Insert the view's rows, or replace the target's rows with the same first column."""
    key, *rest = columns
    assignments = ", ".join(f"{_col('t', n)} = {_col('s', n)}" for n in rest)
    return (
        f"MERGE INTO {target} AS t\n"
        f"USING {view} AS s\n"
        f"ON {_col('t', key)} = {_col('s', key)}\n"
        f"WHEN MATCHED THEN UPDATE SET {assignments}\n"
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(quote(n) for n in columns)})\n"
        f"  VALUES ({', '.join(_col('s', n) for n in columns)})"
    )


COLUMN_ORIGIN_COLUMNS: Final = (
    "schema_name",
    "table_name",
    "column_name",
    "attnum",
    "table_oid",
    "since_lsn",
    "updated_at",
)
"""The columns of the lake's column origin table (``constants.COLUMNS_TABLE``); the first three
identify a Delta column by its source table's names and its Delta name."""


def render_column_origins_merge(*, target: str, view: str) -> str:
    """Insert or replace the recorded origin of each Delta column in the view."""
    names = COLUMN_ORIGIN_COLUMNS
    on = " AND ".join(f"{_col('t', n)} = {_col('s', n)}" for n in names[:3])
    assignments = ", ".join(f"{_col('t', n)} = {_col('s', n)}" for n in names[3:])
    return (
        f"MERGE INTO {target} AS t\n"
        f"USING {view} AS s\n"
        f"ON {on}\n"
        f"WHEN MATCHED THEN UPDATE SET {assignments}\n"
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(quote(n) for n in names)})\n"
        f"  VALUES ({', '.join(_col('s', n) for n in names)})"
    )


# --- tables without a key (keyless.py) -------------------------------------------------------

KEYLESS_KIND: Final = f"{HELPER_PREFIX}kind"
"""Source column of a keyless MERGE: what the source row does to the target row it names."""
KEYLESS_INSERT: Final = 0
KEYLESS_REWRITE: Final = 1
KEYLESS_REMOVE: Final = 2
KEYLESS_TOUCH: Final = 3
WANTED_VALUE: Final = f"{HELPER_PREFIX}value"
WANTED_COUNT: Final = f"{HELPER_PREFIX}wanted"
_RANK: Final = f"{HELPER_PREFIX}rank"


def _equal_rows(step: FoldedStep, left: str, right: str) -> str:
    """Rows equal column by column, NULLs matching NULLs, as PostgreSQL's apply worker does."""
    terms = [f"{_col(left, c.name)} <=> {_col(right, c.name)}" for c in step.columns]
    return " AND ".join(terms) or "true"


def _before_step(step: FoldedStep, meta: MetadataColumns, alias: str) -> str:
    """The row was inserted before the step's first change (else the step inserted it)."""
    row_lsn, row_ordinal = _col(alias, meta.row_lsn), _col(alias, meta.row_ordinal)
    lsn = int(step.first_lsn)
    return (
        f"({row_lsn} < {lsn} OR ({row_lsn} = {lsn} AND {row_ordinal} < {int(step.first_ordinal)}))"
    )


def _live(meta: MetadataColumns, alias: str) -> list[str]:
    return [f"NOT coalesce({_col(alias, meta.deleted)}, false)"] if meta.soft_delete else []


def _stamped_before(meta: MetadataColumns, row: str, change: str) -> str:
    """``row``'s stamp (LSN, ordinal) is before ``change``'s position."""
    row_lsn, change_lsn = _col(row, meta.lsn), _col(change, meta.lsn)
    return (
        f"({row_lsn} < {change_lsn} OR ({row_lsn} = {change_lsn} AND "
        f"{_col(row, meta.ordinal)} < {_col(change, meta.ordinal)}))"
    )


def wanted_columns(step: FoldedStep) -> tuple[str, ...]:
    """Columns of the view ``render_keyless_candidates`` reads: one row per taken value."""
    return (WANTED_VALUE, *(c.name for c in step.columns), WANTED_COUNT)


def render_keyless_candidates(
    step: FoldedStep, meta: MetadataColumns, *, target: str, view: str
) -> str:
    """Per taken value, the equal target rows with the smallest stamps, as many as wanted.

    ``view`` holds ``wanted_columns(step)``: a number per distinct value, the value, and
    how many takes want it. The result has the value's number, the row's identity and its
    stamp (``keyless.Candidate``).
    """
    identity = [meta.row_lsn, meta.row_ordinal]
    stamp = [meta.lsn, meta.ordinal]
    order = ", ".join(_col("t", n) for n in (*stamp, *identity))
    where = " AND ".join([_before_step(step, meta, "t"), *_live(meta, "t")])
    inner = ", ".join(_col("t", n) for n in (*identity, *stamp))
    outer = ", ".join(quote(n) for n in (WANTED_VALUE, *identity, *stamp))
    return (
        f"SELECT {outer} FROM (\n"
        f"  SELECT {_col('w', WANTED_VALUE)}, {inner},\n"
        f"    row_number() OVER (PARTITION BY {_col('w', WANTED_VALUE)} ORDER BY {order})"
        f" AS {quote(_RANK)},\n"
        f"    {_col('w', WANTED_COUNT)}\n"
        f"  FROM {target} AS t\n"
        f"  JOIN {view} AS w ON {_equal_rows(step, 't', 'w')}\n"
        f"  WHERE {where}\n"
        f") AS c WHERE {quote(_RANK)} <= {quote(WANTED_COUNT)}"
    )


def keyless_source_columns(meta: MetadataColumns, step: FoldedStep) -> tuple[str, ...]:
    """Columns of the source view of a keyless MERGE, in the order ``arrow.py`` builds them."""
    return (
        *(c.name for c in step.columns),
        meta.row_lsn,
        meta.row_ordinal,
        meta.lsn,
        meta.commit_time,
        meta.ordinal,
        KEYLESS_KIND,
    )


def touch_columns(meta: MetadataColumns, step: FoldedStep) -> tuple[str, ...]:
    """Columns of the view of touched values: the value, then the stamp it gives."""
    return (*(c.name for c in step.columns), meta.lsn, meta.commit_time, meta.ordinal)


def render_keyless_merge(
    step: FoldedStep,
    meta: MetadataColumns,
    *,
    target: str,
    view: str,
    touch_view: str | None,
) -> str:
    """The MERGE of a keyless step: insert new rows, rewrite or remove taken ones, touch.

    Args:
        step: the folded step.
        meta: metadata column names and the delete mode.
        target: the target table reference.
        view: ``keyless_source_columns``: one row per new row (kind insert, its own
            identity) and per assigned take (kind rewrite or remove, the taken row's
            identity).
        touch_view: ``touch_columns``, one row per ``Touch``; None when the step has none.
            Every live target row equal to a touched value, stamped before it, inserted
            before the step and not taken by ``view`` gets the touch's stamp.
    """
    identity = (meta.row_lsn, meta.row_ordinal)
    stamp = (meta.lsn, meta.commit_time, meta.ordinal)
    data = [c.name for c in step.columns]
    source = view
    if touch_view is not None:
        touched = [f"CAST(NULL AS {c.delta.spark_sql}) AS {quote(c.name)}" for c in step.columns]
        touched += [_col("u", n) for n in identity]
        touched += [_col("x", n) for n in stamp]
        touched.append(f"{KEYLESS_TOUCH} AS {quote(KEYLESS_KIND)}")
        not_taken = " AND ".join(f"{_col('u', n)} = {_col('k', n)}" for n in identity)
        where = " AND ".join([_before_step(step, meta, "u"), *_live(meta, "u")])
        source = (
            f"(\n  SELECT {', '.join(quote(n) for n in keyless_source_columns(meta, step))}"
            f" FROM {view}\n"
            f"  UNION ALL\n"
            f"  SELECT {', '.join(touched)}\n"
            f"  FROM {target} AS u\n"
            f"  JOIN {touch_view} AS x\n"
            f"    ON {_equal_rows(step, 'u', 'x')} AND {_stamped_before(meta, 'u', 'x')}\n"
            f"  LEFT ANTI JOIN {view} AS k ON {not_taken}\n"
            f"  WHERE {where}\n)"
        )
    kind = _col("s", KEYLESS_KIND)
    set_stamp = [f"{_col('t', n)} = {_col('s', n)}" for n in stamp]
    if meta.soft_delete:
        remove = "UPDATE SET " + ", ".join([f"{_col('t', meta.deleted)} = true", *set_stamp])
    else:
        remove = "DELETE"
    rewrite = [f"{_col('t', n)} = {_col('s', n)}" for n in data] + set_stamp
    insert_names = [*data, *identity, *stamp]
    insert_values = [_col("s", n) for n in insert_names]
    if meta.soft_delete:
        insert_names.append(meta.deleted)
        insert_values.append("false")
    match = " AND ".join(f"{_col('t', n)} = {_col('s', n)}" for n in identity)
    return "\n".join(
        [
            f"MERGE INTO {target} AS t",
            f"USING {source} AS s",
            f"ON {match}",
            f"WHEN MATCHED AND {kind} = {KEYLESS_REMOVE} THEN {remove}",
            f"WHEN MATCHED AND {kind} = {KEYLESS_REWRITE} THEN UPDATE SET\n  "
            + ",\n  ".join(rewrite),
            f"WHEN MATCHED AND {kind} = {KEYLESS_TOUCH} THEN UPDATE SET " + ", ".join(set_stamp),
            f"WHEN NOT MATCHED AND {kind} = {KEYLESS_INSERT} THEN INSERT "
            f"({', '.join(quote(n) for n in insert_names)})\n"
            f"  VALUES ({', '.join(insert_values)})",
        ]
    )


def render_missing_row_ids_count(meta: MetadataColumns, *, target: str) -> str:
    """Count the rows without a complete identity and stamp (written before they had one)."""
    missing = " OR ".join(
        f"{quote(n)} IS NULL" for n in (meta.row_lsn, meta.row_ordinal, meta.ordinal)
    )
    return f"SELECT count(*) AS {quote(ANOMALY_COUNT)} FROM {target} WHERE {missing}"


def render_row_id_backfill(columns: Sequence[str], meta: MetadataColumns, *, target: str) -> str:
    """Every target row, with an identity and a stamp ordinal where it has none.

    Rows written while the table had a key (or by a version of wal2delta without keyless
    identities) lack them. Their identity becomes (LSN, ordinal) when the row has an
    ordinal (tables without any identity), else (LSN, -n) with n numbering the rows of
    that LSN: negative ordinals never collide with an INSERT's. A missing stamp ordinal
    becomes -1, before every change of the row's transaction. The executor writes the
    result over the table, one commit.

    Args:
        columns: every column of the table, in table order.
        meta: metadata column names.
        target: the target table reference.
    """
    lsn, commit_time = _col("t", meta.lsn), _col("t", meta.commit_time)
    numbered = f"-row_number() OVER (PARTITION BY {lsn} ORDER BY {commit_time})"
    filled = {
        meta.row_lsn: f"coalesce({_col('t', meta.row_lsn)}, {lsn})",
        meta.row_ordinal: (
            f"coalesce({_col('t', meta.row_ordinal)}, {_col('t', meta.ordinal)}, {numbered})"
        ),
        meta.ordinal: f"coalesce({_col('t', meta.ordinal)}, -1)",
    }
    select = [
        f"{filled[name]} AS {quote(name)}" if name in filled else _col("t", name)
        for name in columns
    ]
    return f"SELECT {', '.join(select)}\nFROM {target} AS t"


def render_newest_position(meta: MetadataColumns, *, target: str) -> str:
    """The newest (commit LSN, ordinal) stamp of a table, as columns ``l`` and ``o``."""
    return (
        f"SELECT {quote(meta.lsn)} AS l, {quote(meta.ordinal)} AS o FROM {target} "
        "ORDER BY l DESC, o DESC LIMIT 1"
    )


def render_any_row(*, target: str) -> str:
    """One row of a table, if it has any (column ``one``)."""
    return f"SELECT 1 AS one FROM {target} LIMIT 1"


def render_max(column: str, *, target: str) -> str:
    """The largest value of ``column`` (column ``m``; NULL for an empty table)."""
    return f"SELECT max({quote(column)}) AS m FROM {target}"


def render_maxima(*columns: str, target: str) -> str:
    """The largest value of each of ``columns`` in one scan (column ``m<i>`` for the
    ``i``-th; NULL for an empty table)."""
    maxima = ", ".join(f"max({quote(column)}) AS m{i}" for i, column in enumerate(columns))
    return f"SELECT {maxima} FROM {target}"


def render_newest_timeline(*, timeline: str, lsn: str, target: str) -> str:
    """The largest ``timeline`` (column ``timeline``) and the largest ``lsn`` among the rows
    of that timeline (column ``high``); no row when no row has a timeline
    (``CommitLog.written_timeline``)."""
    t, high = quote(timeline), quote(lsn)
    return (
        f"SELECT {t} AS timeline, max({high}) AS high FROM {target} "
        f"WHERE {t} = (SELECT max({t}) FROM {target}) GROUP BY {t}"
    )


def render_live_rows(*, target: str) -> str:
    """Every live row of a table, every column in table order: the source of the rewrite
    that purges its deletion vectors (``compaction.py``; the engine applies them as it
    reads)."""
    return f"SELECT * FROM {target}"


def render_bucket_sample(meta: MetadataColumns, key: str, *, target: str) -> str:
    """One row's key (``k``) and stored key-range bucket (``b``), if any row has one."""
    bucket = quote(meta.key_bucket)
    return (
        f"SELECT {quote(key)} AS k, {bucket} AS b FROM {target} WHERE {bucket} IS NOT NULL LIMIT 1"
    )


def render_insert_missing(on: Sequence[str], *, target: str, view: str) -> str:
    """Insert the view's rows that the target has no row equal on ``on`` for."""
    condition = " AND ".join(f"t.{quote(name)} = s.{quote(name)}" for name in on)
    return (
        f"MERGE INTO {target} AS t USING {view} AS s ON {condition} WHEN NOT MATCHED THEN INSERT *"
    )
