"""The compiled TupleData walk answers exactly what the Python reference answers.

``decoder/_tuplewalk.c`` is the C form of two decoder functions (``decoder.native``): the
row-message check every arriving message goes through and the end of a validated tuple.
The Python functions are the reference; here both forms meet the same golden payloads,
damaged payloads and generated messages, in and out of stream blocks.

``walk_tuple_reference`` and ``_walk_tuple_compiled`` in ``decoder/tupledata.py`` are
deliberate twins: the second wraps the C walk with the reference's signature, so that
``walk_tuple`` is either one; ``load_tuple_wire_reference`` and ``_load_tuple_wire_compiled``
in ``decoder/values.py`` likewise for ``load_tuple_wire``. ``duplicates`` reports each
pair of signatures.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decoder import UNCHANGED_TOAST, ColumnKind, ColumnValue, TupleData, native
from decoder.parser import row_message_is_valid, row_message_is_valid_reference
from decoder.tupledata import TupleDataError, skip_tuple, walk_tuple, walk_tuple_reference
from decoder.values import load_tuple_wire, load_tuple_wire_reference
from tests.support.decoder_data import ROW_PAYLOADS, damaged, tuples
from tests.support.pgoutput_builder import encode_tuple

SOME_TUPLE = TupleData(
    (
        ColumnValue(ColumnKind.TEXT, b"42"),
        ColumnValue(ColumnKind.NULL),
        ColumnValue(ColumnKind.UNCHANGED_TOAST),
        ColumnValue(ColumnKind.BINARY, b"\x00" * 300),
    )
)


def _kernel():
    """The C module itself, whichever form this process runs (it is compared either way)."""
    try:
        from decoder import _tuplewalk
    except ImportError:
        pytest.fail("the C kernel was not built (no C compiler at install?)")
    return _tuplewalk


def _reference_end(buf: bytes, start: int) -> int:
    try:
        return skip_tuple(buf, start)
    except (TupleDataError, IndexError):
        return -1


@pytest.mark.skipif(
    os.environ.get(native.PURE_PYTHON_ENV, "") not in {"", "0"},
    reason="the Python reference was asked for",
)
def test_the_installed_daemon_runs_the_compiled_walk():
    kernel = _kernel()
    assert native.KERNEL == "compiled"
    assert native.COMPILED is kernel
    assert row_message_is_valid is kernel.row_message_is_valid


def test_the_environment_can_ask_for_the_python_reference():
    probe = (
        "import decoder.native as n, decoder.parser as p; "
        "print(n.KERNEL, p.row_message_is_valid.__name__)"
    )
    env = {**os.environ, native.PURE_PYTHON_ENV: "1"}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["python", "row_message_is_valid_reference"]


def test_both_forms_accept_every_real_row_payload():
    kernel = _kernel()
    assert ROW_PAYLOADS
    for payload, _, in_stream in ROW_PAYLOADS:
        assert kernel.row_message_is_valid(payload, in_stream)
        assert row_message_is_valid_reference(payload, in_stream)
        # In the other mode the xid prefix is read as the header, or missing.
        assert kernel.row_message_is_valid(payload, not in_stream) == (
            row_message_is_valid_reference(payload, not in_stream)
        )


@given(
    st.sampled_from(ROW_PAYLOADS),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.sampled_from(["replace", "insert", "delete"]),
    st.booleans(),
    st.integers(0, 12),
)
def test_both_forms_agree_on_damaged_payloads(golden, damage, how, flip, cut):
    payload, _, in_stream = golden
    data = damaged(payload, damage, how)
    data = data[: max(0, len(data) - cut)]
    stream = in_stream != flip
    assert _kernel().row_message_is_valid(data, stream) == row_message_is_valid_reference(
        data, stream
    )


@given(st.sampled_from(b"IUDBCRKNO"), st.binary(max_size=80), st.booleans())
def test_both_forms_agree_on_random_bodies(tag, body, in_stream):
    data = bytes([tag]) + body
    assert _kernel().row_message_is_valid(data, in_stream) == row_message_is_valid_reference(
        data, in_stream
    )


def test_both_forms_agree_on_the_shortest_inputs():
    kernel = _kernel()
    for data in [b"", b"I", b"I\x00\x00\x00", b"I\x00\x00\x00\x01", b"I\x00\x00\x00\x01N"]:
        for in_stream in (False, True):
            assert kernel.row_message_is_valid(data, in_stream) == (
                row_message_is_valid_reference(data, in_stream)
            ), (data, in_stream)


@given(
    tuples,
    st.binary(max_size=3),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=3),
    st.integers(0, 30),
)
def test_both_forms_find_the_same_tuple_end(data, tail, damage, cut):
    part = bytearray(b"\x00" + encode_tuple(data) + tail)
    for position, value in damage:
        part[position % len(part)] = value
    buf = bytes(part[: max(0, len(part) - cut)])
    assert _kernel().walk(buf, 1, None, (), (), None, None) == _reference_end(buf, 1)


def test_the_compiled_walk_reads_any_buffer_and_refuses_what_is_none():
    kernel = _kernel()
    payload, _, in_stream = ROW_PAYLOADS[0]
    for form in (bytearray(payload), memoryview(payload)):
        assert kernel.row_message_is_valid(form, in_stream)
    part = b"\x00" + encode_tuple(SOME_TUPLE)
    assert kernel.walk(part, 1, None, (), (), None, None) == len(part)
    assert kernel.walk(part, -1, None, (), (), None, None) == -1
    assert kernel.walk(part, len(part) + 5, None, (), (), None, None) == -1
    with pytest.raises(TypeError):
        kernel.row_message_is_valid("text", False)
    with pytest.raises(TypeError):
        kernel.walk(part, 1)


def _outcome(walk, buf, out, text, binary):
    try:
        return ("ok", walk(buf, 1, out, text, binary, None, "u"), out)
    except TupleDataError as error:
        return ("error", error.reason, error.offset, out)
    except (ValueError, IndexError) as error:
        return ("raised", type(error).__name__, str(error), out)


def _picky(data: bytes) -> object:
    """A loader with opinions: refuses some values, as a real one refuses bad text."""
    if data[:1] == b"!":
        raise ValueError(f"refused {data!r}")
    return data[::-1]


@given(
    tuples,
    st.binary(max_size=3),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=3),
    st.integers(0, 30),
    st.tuples(st.sampled_from([_picky, len, bytes.upper]), st.integers(0, 8)),
)
def test_both_walks_build_the_same_values_and_raise_the_same_errors(data, tail, damage, cut, load):
    loader, loaders = load
    part = bytearray(b"\x00" + encode_tuple(data) + tail)
    for position, value in damage:
        part[position % len(part)] = value
    buf = bytes(part[: max(0, len(part) - cut)])
    text = [loader] * loaders  # fewer loaders than columns: the walk raises IndexError
    binary = (loader,) * loaders
    reference = _outcome(walk_tuple_reference, buf, ["before"], text, binary)
    assert _outcome(walk_tuple, buf, ["before"], text, binary) == reference
    assert (
        _outcome(walk_tuple, buf, None, text, binary)[:2]
        == (_outcome(walk_tuple_reference, buf, None, text, binary)[:2])
    )
    assert _kernel().walk(buf, 1, None, text, binary, None, "u") == _reference_end(buf, 1)


def test_the_compiled_walk_hands_what_it_cannot_do_to_the_reference():
    kernel = _kernel()
    part = b"\x00" + encode_tuple(SOME_TUPLE)
    loaders = [bytes] * 4
    out: list[object] = []
    assert kernel.walk(part, 1, out, loaders, loaders, None, "u") == len(part)
    assert out == [b"42", None, "u", b"\x00" * 300]
    # Not bytes, not a list, a loader that raises: -1, no exception; walk_tuple then
    # gives the reference's answer.
    assert kernel.walk(bytearray(part), 1, [], loaders, loaders, None, "u") == -1
    assert kernel.walk(part, 1, (), loaders, loaders, None, "u") == -1
    assert kernel.walk(part, 1, [], [_picky, *loaders], loaders, None, "u") == len(part)
    assert kernel.walk(b"\x00\x00\x01t\x00\x00\x00\x01!", 1, [], [_picky], [], None, "u") == -1
    assert walk_tuple(bytearray(part), 1, [], loaders, loaders, None, "u") == len(part)
    with pytest.raises(ValueError, match="refused"):
        walk_tuple(b"\x00\x00\x01t\x00\x00\x00\x01!", 1, [], [_picky], [], None, "u")


def _load_outcome(load, buf, text, binary):
    try:
        return ("ok", load(buf, 1, text, binary))
    except TupleDataError as error:
        return ("error", error.reason, error.offset)
    except (ValueError, IndexError) as error:
        return ("raised", type(error).__name__, str(error))


@given(
    tuples,
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=2),
    st.integers(0, 10),
    st.tuples(st.sampled_from([_picky, len, bytes.upper]), st.integers(0, 8)),
)
def test_both_loads_convert_the_same_values_and_raise_the_same_errors(data, damage, cut, load):
    part = bytearray(b"\x00" + encode_tuple(data))
    for position, value in damage:
        part[position % len(part)] = value
    buf = bytes(part[: max(0, len(part) - cut)])
    loader, loaders = load
    text, binary = [loader] * loaders, (loader,) * loaders  # counts that differ: an error
    reference = _load_outcome(load_tuple_wire_reference, buf, text, binary)
    assert _load_outcome(load_tuple_wire, buf, text, binary) == reference
    loaded = _kernel().load(buf, 1, text, binary, None, UNCHANGED_TOAST)
    assert loaded is None or reference == ("ok", loaded)
