"""The sink's columnar kernel (``sink/planning/_columnar.c``): the columnar planner's inner loops.

``pick_text_values`` converts only a row's identity, ``fold_text_rows`` folds a run of
plain changes by identity, ``gather_text_columns`` lays text values out column by column
in Arrow's layout, and ``columnar_meta`` the rows' metadata columns (``fold.py``,
``columnar.py``). The extension is built at install next to the decoder's
(``decoder/_tuplewalk.c``; both share the TupleData wire helpers of
``decoder/_tuplewire.h``) and is optional: without it, or with ``WAL2DELTA_PURE_PYTHON=1``,
these answer None (``fold_text_rows`` folds nothing) and the planner converts row by row,
its reference path (``tests/unit/sink/test_columnar.py`` compares both planners).
``KERNEL`` says which form runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any, Final, Literal, NamedTuple

from decoder import Change, PgTimestamp, Relation, RowChange, TupleData, load_kernel

COMPILED: Final[ModuleType | None] = load_kernel("sink.planning._columnar")
"""The compiled kernel, or None when the planner's reference path runs."""

KERNEL: Final[Literal["compiled", "python"]] = "python" if COMPILED is None else "compiled"
"""Which form of the columnar loops runs in this process."""


TextColumn = tuple[bytes, bytes, bytes | None, int]
"""One column of ``gather_text_columns``: int32 offsets, data, validity bitmap, NULL count."""


def _pick_without_kernel(
    buf: bytes,
    start: int,
    indexes: tuple[int, ...],
    text_loaders: Sequence[Callable[[bytes], object]],
) -> tuple[object, ...] | None:
    """``pick_text_values`` without the compiled kernel: always None (the general path)."""
    return None


pick_text_values: Final[
    Callable[
        [bytes, int, tuple[int, ...], Sequence[Callable[[bytes], object]]],
        tuple[object, ...] | None,
    ]
] = _pick_without_kernel if COMPILED is None else COMPILED.pick
"""The values of a few columns of a TupleData part, when it holds only text and NULLs.

Columns ``indexes`` are converted by their text loaders (None for NULL); the others
are walked over, not converted. This is how the sink's columnar planner reads a row's
identity. None means "take the general path" (``load_tuple_wire``), which raises the
precise error where there is one: the part has a binary or unchanged-TOAST column,
does not fit ``buf``, has another column count than ``text_loaders``, or a loader
raised - and always when the compiled kernel is not built (``sink.kernel``). It is
the kernel's ``pick`` itself, called once per row: no Python frame in between.
"""


def fold_text_rows(  # noqa: PLR0917 - the kernel's arguments, once per run of changes
    changes: Sequence[Change],
    start: int,
    relation: Relation,
    timestamp: PgTimestamp,
    indexes: tuple[int, ...],
    text_loaders: Sequence[Callable[[bytes], object]],
    plain_types: tuple[type, ...],
    rows: dict[tuple[object, ...], Any],  # the caller's other values stay; ints are added
    folded: list[RowChange],
    parts: list[tuple[bytes, int]],
    deletes: list[bool],
) -> tuple[int, int, int, int, int]:
    """Fold the run of plain row changes at ``changes[start:]`` by identity, in C.

    This is the sink's columnar planner's inner loop (``sink.fold``). A change belongs to
    the run while it is a ``RowChange`` of ``relation`` (the same object) committed at
    ``timestamp`` - an insert or an update without an old tuple, or a delete - whose tuple
    (the new one; a delete's old one) is unsplit (``TupleData.wire``), holds only text
    values and NULLs, and has an identity - ``pick_text_values(..., indexes,
    text_loaders)`` - of values whose exact types are in ``plain_types``. Each is folded as
    the row path folds it: an update first removes its identity from ``rows``; then
    ``rows[identity]`` becomes the change's index in ``folded``, and the change, its
    tuple's wire and whether it deletes are appended to ``folded``, ``parts`` and
    ``deletes``.

    Returns:
        ``(stop, inserts, updates, deletes, first_touches)``: the index of the first change
        that is not plain (the caller plans it the general way; it is untouched), how many
        of each kind were folded, and how many of the updates and deletes found their
        identity not yet in ``rows`` - the identity's first change in the step is not an
        insert (``MergeStep.only_new_keys``). Without the compiled kernel nothing is
        folded: ``(start, 0, 0, 0, 0)``, and the caller plans every change the general
        way, its reference path.
    """
    if COMPILED is None:
        return start, 0, 0, 0, 0
    stop_and_counts: tuple[int, int, int, int, int] = COMPILED.fold(
        changes,
        start,
        RowChange,
        TupleData,
        relation,
        timestamp,
        indexes,
        text_loaders,
        plain_types,
        rows,
        folded,
        parts,
        deletes,
    )
    return stop_and_counts


def gather_text_columns(parts: list[tuple[bytes, int]], count: int) -> list[TextColumn] | None:
    """The text values of TupleData parts column by column, in Arrow's binary layout.

    Args:
        parts: ``TupleData.wire`` of each row, every part of ``count`` columns.
        count: the column count.

    Returns:
        Per column: int32 offsets (native order, one more than the rows), the values'
        bytes end to end, a validity bitmap (None without NULLs) and the NULL count; or
        None when a part has a binary or unchanged-TOAST column, does not fit, has another
        column count, a column exceeds 2 GiB, or the compiled kernel is not built. The
        caller then converts the rows one by one (``load_tuple_wire``).
    """
    if COMPILED is None:
        return None
    gathered: list[TextColumn] | None = COMPILED.gather(parts, count)
    return gathered


class ColumnarMeta(NamedTuple):
    """The metadata columns of a merge step's columnar rows (``columnar_meta``).

    Each buffer holds one native-order value per live columnar row, in ascending index
    order (the order ``sink.fold`` folded them).
    """

    others: list[object]
    """The step's row entries that are not columnar indexes, in their order."""
    live: bytes | None
    """The live indexes as int64, or None when every folded change is live."""
    lsns: bytes
    """Each row's commit LSN, int64."""
    ordinals: bytes
    """Each row's ordinal in its transaction, int64."""
    micros: bytes
    """Each row's commit time, int64 microseconds since the Unix epoch."""
    deletes: bytes
    """Whether each row is a delete, as an Arrow (LSB-first) bitmap."""


def columnar_meta(
    rows: Iterable[object], changes: list[RowChange], deletes: list[bool]
) -> ColumnarMeta | None:
    """Lay out the commit LSN, ordinal, commit time and delete flag of a step's live rows.

    Args:
        rows: the step's row entries: an int is the index in ``changes`` (and ``deletes``)
            of a row folded on the columnar path, anything else a row the general way.
        changes: every change the columnar path folded, replaced ones too.
        deletes: whether each of ``changes`` is a delete.

    Returns:
        The columns as Arrow-ready buffers, in C; None without the compiled kernel (the
        columnar path needs it: ``gather_text_columns`` has answered None before).

    Raises:
        ValueError: an index is out of range or repeated.
    """
    if COMPILED is None:
        return None
    return ColumnarMeta(*COMPILED.columnar_meta(rows, changes, deletes, RowChange))


__all__ = [
    "KERNEL",
    "ColumnarMeta",
    "TextColumn",
    "columnar_meta",
    "fold_text_rows",
    "gather_text_columns",
    "pick_text_values",
]
