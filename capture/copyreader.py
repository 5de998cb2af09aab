"""COPY a table's published rows into Arrow string batches, without a Python object per row.

Theory of operation
-------------------
``COPY (SELECT <published columns> FROM [ONLY] t [WHERE filter]) TO STDOUT (FORMAT csv)``
prints every value in PostgreSQL's text form - what the text protocol sends and what the
MERGE path of the snapshot stored - and CSV keeps NULL (an unquoted empty field) apart
from the empty string (always quoted, ``""``). Arrow's C++ CSV reader
(``pyarrow.csv.open_csv``) parses the stream into string columns in blocks of about
``block_bytes``, with ``quoted_strings_can_be_null`` off so only the unquoted empty field
is NULL; the sink converts each column to its Delta type (``sink.bulk``). Python touches
the COPY's data messages only to hand them to Arrow in large reads.

A large table can be read in several ranges of heap pages: ``ctid >= '(a,0)' AND ctid <
'(b,0)'`` is a TID range scan on PostgreSQL 14 and later, so each range reads only its
pages; the last range is open-ended. Every range is read in the same exported snapshot,
so together they are exactly the table.
"""

from __future__ import annotations

import io
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv
from psycopg import sql

from decoder import Relation

Conn = psycopg.Connection[tuple[object, ...]]

MIN_TID_RANGE_SCAN_VERSION: Final = 140000
"""TID range scans (``ctid >= ... AND ctid < ...`` reading only those pages): PostgreSQL 14."""


@dataclass(frozen=True, slots=True)
class PageRange:
    """Heap pages ``[first, end)`` of a table; ``end`` None reads to the end."""

    first: int
    end: int | None

    def condition(self) -> sql.Composable:
        """The ``ctid`` condition that selects the range's rows."""
        low = sql.SQL("ctid >= {}::tid").format(sql.Literal(f"({self.first},0)"))
        if self.end is None:
            return low
        return sql.SQL("{} AND ctid < {}::tid").format(low, sql.Literal(f"({self.end},0)"))


def page_ranges(pages: int, count: int) -> tuple[PageRange, ...]:
    """Split ``pages`` heap pages into ``count`` ranges (at most one per page); last open."""
    count = max(1, min(count, pages))
    if count == 1:
        return (PageRange(0, None),)
    bounds = [pages * i // count for i in range(count)]
    return tuple(
        PageRange(first, bounds[i + 1] if i + 1 < count else None) for i, first in enumerate(bounds)
    )


def select_query(
    relation: Relation,
    row_filter: str | None,
    *,
    only: bool,
    pages: PageRange | None = None,
    native: frozenset[int] | None = None,
    nulls: Mapping[str, str] | None = None,
) -> sql.Composed:
    """The SELECT of the relation's published columns and rows (of one page range).

    Columns whose type OID is in ``native`` are selected as they are; with ``native``
    given, every other column as ``format('%s', col)``: its output function's text, SQL
    NULL kept (``num_nulls``: a composite of NULL fields is a value; ``adbcreader``).
    Without ``native`` every column is selected as it is. Columns named in ``nulls``
    (dropped since the snapshot: their values can no longer be read) are NULL of the
    type given there (``format_type``'s SQL spelling).
    """
    columns: list[sql.Composable] = []
    for column in relation.columns:
        name = sql.Identifier(column.name)
        if nulls is not None and column.name in nulls:
            # A typed NULL: ADBC reads native types as they are.
            null = sql.SQL("CAST(NULL AS " + nulls[column.name] + ")")
            columns.append(sql.SQL("{} AS {}").format(null, name))
        elif native is None or column.type_oid in native:
            columns.append(name)
        else:
            columns.append(
                # num_nulls, not IS NULL: a composite whose fields are all NULL IS NULL.
                sql.SQL(
                    "CASE WHEN num_nulls({0}) = 1 THEN NULL ELSE format('%s', {0}) END AS {0}"
                ).format(name)
            )
    conditions: list[sql.Composable] = []
    if row_filter:
        # The publications' combined filter, read back from the catalog.
        conditions.append(sql.SQL("(" + row_filter + ")"))
    if pages is not None and (pages.first > 0 or pages.end is not None):
        conditions.append(pages.condition())
    where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("")
    return sql.SQL("SELECT {} FROM {}{}{}").format(
        sql.SQL(", ").join(columns),
        sql.SQL("ONLY ") if only else sql.SQL(""),
        sql.Identifier(relation.namespace, relation.relation_name),
        where,
    )


def copy_query(
    relation: Relation,
    row_filter: str | None,
    *,
    only: bool,
    pages: PageRange | None = None,
    nulls: Mapping[str, str] | None = None,
) -> sql.Composed:
    """The COPY csv of the relation's published columns and rows (of one page range);
    ``nulls`` as for ``select_query``."""
    return sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(
        select_query(relation, row_filter, only=only, pages=pages, nulls=nulls)
    )


class _CopyStream(io.RawIOBase):
    """The COPY's data messages (one per row) as a readable byte stream for Arrow."""

    def __init__(self, copy: psycopg.Copy, on_bytes: Callable[[int], None]) -> None:
        self._copy = copy
        self._pending: bytes | bytearray | memoryview = b""
        self._done = False
        self._on_bytes = on_bytes

    def readable(self) -> bool:
        return True

    def at_end(self) -> bool:
        """Whether the COPY sent no (more) data; reads ahead one message to tell."""
        if not self._pending and not self._done:
            data = self._copy.read()
            if data:
                self._pending = data
            else:
                self._done = True
        return not self._pending and self._done

    def read(self, size: int = -1) -> bytes:
        parts: list[bytes | bytearray | memoryview] = [self._pending] if self._pending else []
        have = len(self._pending)
        read = self._copy.read
        append = parts.append
        while not self._done and (size < 0 or have < size):
            data = read()
            if not data:
                self._done = True
                break
            append(data)  # joined below: one copy of each message
            have += len(data)
        out = b"".join(parts)
        if size >= 0 and len(out) > size:
            # The rest waits as a view of ``out``, copied only when joined next time.
            view = memoryview(out)
            out, self._pending = bytes(view[:size]), view[size:]
        else:
            self._pending = b""
        self._on_bytes(len(out))
        return out


def read_text_batches(
    conn: Conn,
    query: sql.Composed,
    columns: int,
    *,
    block_bytes: int,
    on_bytes: Callable[[int], None],
) -> Iterator[pa.RecordBatch]:
    """Run the COPY ``query`` and yield its rows as string columns, about ``block_bytes`` each.

    Columns are ``f0, f1, ...`` in COPY order; SQL NULL is null, the empty string is "".
    ``on_bytes`` is called with the size of every block of COPY output read.
    """
    names = [f"f{i}" for i in range(columns)]
    read_options = pacsv.ReadOptions(column_names=names, block_size=block_bytes, use_threads=True)
    parse_options = pacsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False)
    convert_options = pacsv.ConvertOptions(
        column_types=dict.fromkeys(names, pa.string()),
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
    )
    with conn.cursor() as cur, cur.copy(query) as copy:
        stream = _CopyStream(copy, on_bytes)
        if stream.at_end():
            return  # no rows; Arrow refuses an empty CSV stream
        reader = pacsv.open_csv(
            pa.PythonFile(stream, mode="r"),
            read_options=read_options,
            parse_options=parse_options,
            convert_options=convert_options,
        )
        for batch in reader:
            if batch.num_rows:
                yield batch
        # Drain what Arrow did not ask for (nothing, normally) so the COPY ends cleanly.
        while stream.read(1 << 20):
            pass


_DONE: Final = object()


def prefetched(batches: Iterator[pa.RecordBatch], depth: int = 1) -> Iterator[pa.RecordBatch]:
    """``batches``, read ``depth`` ahead on a thread of its own.

    The COPY and Arrow's parser run while the caller appends the previous batch (both
    release the GIL for their heavy parts), so reading and writing overlap; at most
    ``depth`` batches wait, besides the one being read and the one being written. The
    reader's exception is raised here. When the caller stops early, the reader stops at
    its next batch.
    """
    waiting: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                waiting.put(item, timeout=0.1)
            except queue.Full:
                continue
            return True
        return False

    def read() -> None:
        try:
            for batch in batches:
                if not put(batch):
                    return
            put(_DONE)
        except BaseException as exc:  # handed to the caller's thread
            put(exc)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()  # ends the COPY when the caller stopped early

    reader = threading.Thread(target=read, name="wal2delta-snapshot-read", daemon=True)
    reader.start()
    try:
        while True:
            item = waiting.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, pa.RecordBatch)
            yield item
    finally:
        stop.set()
        reader.join()
