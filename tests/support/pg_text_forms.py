"""PostgreSQL text forms and generated batches shared by the planner's property tests.

Text forms are what pgoutput (and COPY) send for a value: ``timestamptz_text`` prints an
instant as ``timestamptz_out`` does with DateStyle ISO, ``numeric_text`` and ``float_text``
as ``numeric_out`` and ``float8out`` do. ``typed_batches`` generates batches of changes
to ``TYPED`` with NULLs, unchanged TOAST and values no converter accepts; ``as_wire``
turns a batch into the unsplit message bytes the decoder hands over. ``TEXT_FORM_CASES``
lists, per type, text forms with the edges Arrow's strict parsers refuse.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
from hypothesis import strategies as st

from decoder import RowChange, TupleData
from sink import Batch
from sink.values.convert import pg_text_form
from tests.support.pgoutput_builder import encode_tuple
from tests.support.sink_changes import U, Value, batch, col, delete, insert, rel, update


def typmod_numeric(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


NUMERIC_10_2 = typmod_numeric(10, 2)
NUMERIC_5_0 = typmod_numeric(5, 0)


ints = st.integers(-(2**31), 2**31 - 1)
doubles = st.floats(allow_nan=True, allow_infinity=True)
# Up to year 9999, as both PostgreSQL's output and Python's datetime can hold.
instants = st.datetimes(
    min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30), timezones=st.just(dt.UTC)
)
offsets = st.integers(-15 * 60, 15 * 60).map(lambda minutes: dt.timedelta(minutes=minutes))


def fraction(microseconds: int) -> str:
    return f".{microseconds:06d}".rstrip("0") if microseconds else ""


def wall(value: dt.datetime) -> str:
    # timestamp_out with DateStyle ISO.
    return f"{value:%Y-%m-%d %H:%M:%S}{fraction(value.microsecond)}".zfill(19)


def zone(offset: dt.timedelta) -> str:
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    hours, rest = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}" + (f":{rest:02d}" if rest else "")


def float_text(value: float) -> bytes:
    return pg_text_form(value).encode()


@st.composite
def timestamptz_text(draw: st.DrawFn) -> bytes:
    instant = draw(instants)
    offset = draw(offsets)
    local = instant + offset
    if not dt.datetime(1, 1, 1, tzinfo=dt.UTC) <= local <= dt.datetime(9999, 12, 31, tzinfo=dt.UTC):
        offset, local = dt.timedelta(0), instant
    return f"{wall(local.replace(tzinfo=None))}{zone(offset)}".encode()


@st.composite
def numerics(draw: st.DrawFn, precision: int, scale: int) -> Decimal:
    """A numeric value, mostly fitting (precision, scale), sometimes not, or special."""
    special = draw(st.sampled_from(["", "", "", "", "NaN", "Infinity", "-Infinity"]))
    if special:
        return Decimal(special)
    digits = draw(st.integers(1, precision + draw(st.sampled_from([0, 0, 0, 3, 30]))))
    unscaled = draw(st.integers(-(10**digits) + 1, 10**digits - 1))
    return Decimal(unscaled).scaleb(-scale)


def numeric_text(value: Decimal) -> bytes:
    return (str(value) if not value.is_finite() else format(value, "f")).encode()


TYPED = rel(
    "public.typed",
    col("id", 20, key=True),
    col("n", 23),
    col("amount", 1700, typmod=NUMERIC_10_2),
    col("at", 1184),
    col("note"),
    col("f", 701),
)
TYPED_FULL = rel(
    "public.typed_full",
    col("id", 20),
    col("amount", 1700, typmod=NUMERIC_5_0),
    col("note"),
    identity="f",
)


@st.composite
def text_rows(draw: st.DrawFn, relation_columns: int) -> list[Value]:
    """Text values for a TYPED row; any column may be NULL, unchanged TOAST or unusual."""
    key = draw(st.integers(0, 5))
    values: list[Value] = [str(key)]
    for position in range(1, relation_columns):
        shape = draw(st.sampled_from(["value", "value", "value", "null", "toast", "bad"]))
        if shape == "null":
            values.append(None)
        elif shape == "toast":
            values.append(U)
        else:
            values.append(draw(_TYPED_VALUES[position]))
    return values


_TYPED_VALUES: dict[int, st.SearchStrategy[str]] = {
    1: st.one_of(ints.map(str), st.just("x")),
    2: st.one_of(
        numerics(10, 2).map(lambda d: numeric_text(d).decode()), st.just("1e400"), st.just("")
    ),
    3: st.one_of(timestamptz_text().map(bytes.decode), st.just("infinity")),
    4: st.one_of(st.text(max_size=8), st.sampled_from([" padded ", "\t", "é ü\n", ""])),
    5: st.one_of(doubles.map(lambda f: float_text(f).decode()), st.just("nan!")),
}


@st.composite
def typed_batches(draw: st.DrawFn) -> Batch:
    changes: list[RowChange] = []
    for ordinal in range(draw(st.integers(1, 8))):
        lsn = 10 + ordinal // 3
        op = draw(st.sampled_from(["insert", "insert", "update", "delete"]))
        values = draw(text_rows(len(TYPED.columns)))
        if op == "insert":
            changes.append(insert(TYPED, *values, lsn=lsn, ordinal=ordinal))
        elif op == "update":
            old = draw(st.none() | text_rows(len(TYPED.columns)))
            changes.append(
                update(
                    TYPED,
                    *values,
                    lsn=lsn,
                    ordinal=ordinal,
                    old=old,
                    old_kind=None if old is None else "K",
                )
            )
        else:
            changes.append(delete(TYPED, values[0], *[None] * 5, lsn=lsn, ordinal=ordinal))
    return batch(*changes)


def wire(data: TupleData | None) -> TupleData | None:
    """The same tuple as the decoder hands it over: unsplit message bytes."""
    return None if data is None else TupleData.from_wire(b"??" + encode_tuple(data), 2)


def as_wire(changes_batch: Batch) -> Batch:
    changes = []
    for change in changes_batch.changes:
        assert isinstance(change, RowChange)
        changes.append(
            RowChange(
                op=change.op,
                relation=change.relation,
                new=wire(change.new),
                old=wire(change.old),
                old_kind=change.old_kind,
                commit_lsn=change.commit_lsn,
                commit_time=change.commit_time,
                ordinal=change.ordinal,
            )
        )
    return Batch(
        changes=tuple(changes),
        durable_lsn=changes_batch.durable_lsn,
        transaction_count=changes_batch.transaction_count,
        last_commit_time=changes_batch.last_commit_time,
    )


def ipc_bytes(table: pa.Table) -> bytes:
    """The table as Arrow IPC bytes: equal bytes, equal tables (NaN included)."""
    out = pa.BufferOutputStream()
    with pa.ipc.new_stream(out, table.schema) as writer:
        writer.write_table(table)
    return bytes(out.getvalue().to_pybytes())


# type OID, type modifier, text forms (None: NULL)
TEXT_FORM_CASES: list[tuple[int, int, list[str | None]]] = [
    (16, -1, ["t", "f", None]),
    (21, -1, ["-32768", "32767", "0", None]),
    (23, -1, ["-2147483648", "2147483647", None]),
    (20, -1, ["-9223372036854775808", "9223372036854775807", None]),
    (26, -1, ["4294967295", "0"]),
    (700, -1, ["1.1", "NaN", "Infinity", "-Infinity", "-0", "1e-45", "3.4028235e+38", None]),
    (701, -1, ["0.1", "NaN", "-Infinity", "5e-324", "1.7976931348623157e+308", "-0", None]),
    (1700, (10 << 16 | 2) + 4, ["12345678.91", "-0.01", "0.00", None]),
    (1700, (3 << 16 | (-2 & 0x7FF)) + 4, ["99900", "-100", "0"]),
    (25, -1, ["", "NULL", 'quote " comma , newline \n', "ü€", None]),
    (1042, 9, ["ab   ", "     "]),
    (1082, -1, ["2024-02-29", "0001-01-01", "9999-12-31", "2000-01-01 BC", None]),
    (1114, -1, ["2024-02-29 23:59:59.999999", "0001-01-01 00:00:00", "1970-01-01 00:00:00.5"]),
    (
        1184,
        -1,
        [
            "2024-02-29 23:59:59.999999+05:30",
            "1900-06-30 12:00:00-03",
            "2000-01-01 00:00:00+00",
            "1850-01-01 00:00:00+00:19:32",  # a local mean time offset: Arrow refuses it
            None,
        ],
    ),
]
