"""Every object built without its constructor is, field by field, the constructor's object.

``decoder.fastbuild.fast_constructor`` is the one place where objects skip ``__init__``
(a twin class with the same slots, then ``__class__`` assignment). Its five users are
pinned here against their real constructors, and its import-time fence against the
classes it must refuse.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import pickle
from dataclasses import dataclass

import pytest

from decoder import (
    Assembler,
    ColumnKind,
    ColumnValue,
    CommittedTransaction,
    Insert,
    Lsn,
    Oid,
    PgTimestamp,
    ProtocolOptions,
    RowChange,
    TupleData,
    XLogData,
    fast_constructor,
    parse_copy_data,
)
from decoder.changes import new_row_change
from decoder.fastbuild import TwinClassError
from decoder.frames import _new_xlog_data
from decoder.messages import _binary_value, _text_value, new_wire_tuple
from sink.planning.fold import _new_planned_row
from sink.planning.plan import PlannedRow
from tests.support.pgoutput_builder import (
    INT4_OID,
    TEXT_OID,
    begin,
    commit,
    encode_all,
    encode_message,
    relation,
)

OPTIONS = ProtocolOptions(1)
COLUMNS = (
    ColumnValue(ColumnKind.TEXT, b"42"),
    ColumnValue(ColumnKind.NULL),
    ColumnValue(ColumnKind.UNCHANGED_TOAST),
    ColumnValue(ColumnKind.BINARY, b"\x00\x01"),
)


def assert_same_object(fast: object, made: object) -> None:
    """Same type, and each field the same value of the same type; then the dunders."""
    assert type(fast) is type(made)
    for field in dataclasses.fields(made):  # type: ignore[arg-type]
        ours, theirs = getattr(fast, field.name), getattr(made, field.name)
        assert type(ours) is type(theirs), field.name
        assert ours == theirs, field.name
    assert fast == made
    assert hash(fast) == hash(made)
    assert repr(fast) == repr(made)
    assert pickle.loads(pickle.dumps(fast)) == made
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(fast, dataclasses.fields(made)[0].name, None)  # type: ignore[arg-type]


def test_a_wire_tuple_equals_the_constructed_tuple_column_by_column():
    message = encode_message(
        Insert(xid=None, relation_id=Oid(7), new_tuple=TupleData(COLUMNS)), OPTIONS
    )
    fast = new_wire_tuple(message, 6)
    made = TupleData(COLUMNS)
    assert type(fast) is TupleData
    assert fast.wire == (message, 6)
    assert len(fast.values) == len(made.values)
    for ours, theirs in zip(fast.values, made.values, strict=True):
        assert_same_object(ours, theirs)
    assert fast == made
    assert hash(fast) == hash(made)
    assert repr(fast) == repr(made)


def test_split_column_values_equal_the_constructed_ones():
    assert_same_object(_text_value(b"x"), ColumnValue(ColumnKind.TEXT, b"x"))
    assert_same_object(_binary_value(b"\x01"), ColumnValue(ColumnKind.BINARY, b"\x01"))


def test_a_fast_xlogdata_equals_the_constructed_one():
    made = XLogData(wal_start=Lsn(1), wal_end=Lsn(2), send_time=PgTimestamp(3), payload=b"B")
    assert_same_object(_new_xlog_data(1, 2, 3, b"B"), made)
    frame = b"w" + (1).to_bytes(8, "big") + (2).to_bytes(8, "big") + (3).to_bytes(8, "big") + b"B"
    assert_same_object(parse_copy_data(memoryview(frame)), made)


def test_a_fast_row_change_equals_the_constructed_one():
    fields = {
        "op": "update",
        "relation": relation(1, "t", (("id", INT4_OID, True), ("note", TEXT_OID))),
        "new": TupleData((ColumnValue(ColumnKind.TEXT, b"1"), ColumnValue(ColumnKind.NULL))),
        "old": TupleData((ColumnValue(ColumnKind.TEXT, b"0"),)),
        "old_kind": "K",
        "commit_lsn": Lsn(5),
        "commit_time": PgTimestamp(6),
        "ordinal": 7,
        "xid": 8,
    }
    assert_same_object(new_row_change(*fields.values()), RowChange(**fields))  # type: ignore[arg-type]


def test_a_replayed_row_change_equals_the_constructed_one():
    # The replay loop builds its RowChange and its wire tuple with the fast constructors.
    rel = relation(1, "t", (("id", INT4_OID, True), ("note", TEXT_OID)))
    new = TupleData((ColumnValue(ColumnKind.TEXT, b"1"), ColumnValue(ColumnKind.NULL)))
    assembler = Assembler(OPTIONS)
    messages = [
        begin(9, 100),
        rel,
        Insert(xid=None, relation_id=Oid(1), new_tuple=new),
        commit(100),
    ]
    outputs = [
        output for payload in encode_all(messages, OPTIONS) for output in assembler.feed(1, payload)
    ]
    assert len(outputs) == 1
    assert isinstance(outputs[0], CommittedTransaction)
    (change,) = list(assembler.replay(outputs[0]))
    made = RowChange(
        op="insert",
        relation=rel,
        new=new,
        old=None,
        old_kind=None,
        commit_lsn=Lsn(100),
        commit_time=PgTimestamp(0),
        ordinal=0,
        xid=9,  # the BEGIN's
    )
    assert type(change.new) is TupleData
    assert change.new.wire is not None  # built unsplit by the fast constructor
    assert_same_object(change, made)


def test_a_fast_planned_row_equals_the_constructed_one():
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    fields = (False, (1, "a"), frozenset({1}), None, Lsn(5), at, 3)
    assert_same_object(_new_planned_row(*fields), PlannedRow(*fields))


@pytest.mark.parametrize(
    ("builder", "target"),
    [(new_row_change, RowChange), (_new_xlog_data, XLogData), (_new_planned_row, PlannedRow)],
)
def test_each_fast_constructor_takes_every_field_in_constructor_order(builder, target):
    fields = tuple(field.name for field in dataclasses.fields(target))
    assert tuple(inspect.signature(builder).parameters) == fields


# --- the fence --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Point:
    x: int
    y: int


def test_the_fence_accepts_a_frozen_slot_dataclass():
    assert_same_object(fast_constructor(_Point)(1, 2), _Point(1, 2))


@pytest.mark.parametrize(
    "fields",
    [("x",), ("x", "y", "z"), ("x", "x"), ("y", "x")],
    ids=["a slot left unset", "an unknown slot", "a slot set twice", "another order"],
)
def test_the_fence_rejects_a_field_list_that_does_not_match_the_slots(fields):
    with pytest.raises(TwinClassError):
        fast_constructor(_Point, fields)


def test_the_fence_rejects_a_dataclass_whose_init_does_more_than_store_fields():
    @dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            if self.x < 0:
                raise ValueError(self.x)

    with pytest.raises(TwinClassError, match="__post_init__"):
        fast_constructor(Checked)


def test_the_fence_rejects_classes_a_twin_cannot_share_a_layout_with():
    @dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclass(frozen=True, slots=True, weakref_slot=True)
    class Weak:
        x: int

    class Base:
        __slots__ = ("x",)

    class Derived(Base):
        __slots__ = ("y",)

    for real, fields in ((NoSlots, None), (Weak, None), (Derived, ("y",))):
        with pytest.raises(TwinClassError):
            fast_constructor(real, fields)


def test_the_fence_needs_the_fields_of_a_class_that_is_not_a_dataclass():
    class Plain:
        __slots__ = ("a",)

    with pytest.raises(TwinClassError, match="name its fields"):
        fast_constructor(Plain)
    built = fast_constructor(Plain, ("a",))(5)
    assert type(built) is Plain
    assert built.a == 5


def test_the_fence_rejects_field_names_the_generated_code_reserves():
    class Clash:
        __slots__ = ("_fast_obj",)

    with pytest.raises(TwinClassError, match="parameter name"):
        fast_constructor(Clash, ("_fast_obj",))


def test_fixed_fields_are_stored_by_every_call():
    new_origin = fast_constructor(_Point, fixed={"x": 0})
    assert tuple(inspect.signature(new_origin).parameters) == ("y",)
    assert_same_object(new_origin(3), _Point(0, 3))
