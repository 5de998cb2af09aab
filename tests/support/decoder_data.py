"""Decoder test data shared by test modules: tuple strategies and golden payloads.

``GOLDEN_PAYLOADS`` are the first messages of every harvested capture, with the options
they were captured under and whether they sit inside a stream block.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import strategies as st

from decoder import ColumnKind, ColumnValue, ProtocolOptions, TupleData, native
from tests.golden import load_captures

column_values = st.one_of(
    st.just(ColumnValue(ColumnKind.NULL)),
    st.just(ColumnValue(ColumnKind.UNCHANGED_TOAST)),
    st.builds(ColumnValue, st.just(ColumnKind.TEXT), st.binary(max_size=20)),
    st.builds(ColumnValue, st.just(ColumnKind.BINARY), st.binary(max_size=20)),
)
tuples = st.builds(TupleData, st.lists(column_values, max_size=6).map(tuple))


def _golden_payloads() -> list[tuple[bytes, ProtocolOptions, bool]]:
    payloads = []
    for found in load_captures():
        in_stream = False
        for golden in found.messages[:40]:
            payloads.append((golden.payload, found.options, in_stream))
            in_stream = {"S": True, "E": False}.get(golden.tag, in_stream)
    return payloads


GOLDEN_PAYLOADS = _golden_payloads()

ROW_PAYLOADS = [g for g in GOLDEN_PAYLOADS if g[0][:1] in (b"I", b"U", b"D")]
"""The INSERT, UPDATE and DELETE payloads among them."""


def damaged(payload: bytes, damage: list[tuple[int, int]], how: str) -> bytes:
    """``payload`` with bytes replaced, inserted or deleted (``how``) at the given positions."""
    data = bytearray(payload)
    for position, value in damage:
        index = position % (len(data) + 1)
        if how == "replace" and index < len(data):
            data[index] = value
        elif how == "insert":
            data.insert(index, value)
        elif how == "delete" and index < len(data):
            del data[index]
    return bytes(data)


def active_kernel() -> ModuleType:
    """The compiled kernel this process runs (``decoder.native.COMPILED``); the test fails
    when it is not built, since it then compares nothing."""
    if native.COMPILED is None:
        pytest.fail("the C kernel was not built (no C compiler at install?)")
    return native.COMPILED
