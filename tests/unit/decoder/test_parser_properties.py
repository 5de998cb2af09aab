"""Properties of the parser: round trips for every message, and garbage never escapes.

* ``parse(encode(m)) == m`` for generated messages of every type, under every protocol
  version and option combination, inside and outside stream blocks.
* Random bytes, and real payloads with random damage, either parse or raise
  ``DecodeError``; no other exception type (the h11 fuzz harness and etl's parser-safety
  rule).
* The assembler fed real messages in a random order raises only ``DecodeError``.
"""

from __future__ import annotations

import contextlib

from hypothesis import assume, given
from hypothesis import strategies as st

from decoder import (
    Assembler,
    AssemblerState,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    CommittedTransaction,
    DecodeError,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Prepare,
    ProtocolOptions,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
    parse_message,
)
from decoder.parser import scan_row_message
from tests.golden import load_captures
from tests.support.decoder_data import GOLDEN_PAYLOADS, ROW_PAYLOADS, tuples
from tests.support.pgoutput_builder import encode_message

ALL_OPTIONS = [
    ProtocolOptions(1),
    ProtocolOptions(1, binary=True, messages=True),
    ProtocolOptions(2, "on"),
    ProtocolOptions(3, "on", two_phase=True),
    ProtocolOptions(3, "off", two_phase=True, binary=True),
    ProtocolOptions(4, "on", two_phase=True, messages=True),
    ProtocolOptions(4, "parallel", two_phase=True, binary=True, messages=True),
]

lsns = st.integers(1, 2**64 - 1)
any_lsns = st.integers(0, 2**64 - 1)
timestamps = st.integers(-(2**63), 2**63 - 1)
xids = st.integers(1, 2**32 - 1)
oids = st.integers(0, 2**32 - 1)
names = st.text(st.characters(exclude_characters="\0", exclude_categories=["Cs"]), max_size=12)

relation_columns = st.builds(
    RelationColumn,
    st.integers(0, 255),
    names,
    oids,
    st.integers(-(2**31), 2**31 - 1),
)


def _with_xid(in_stream: bool) -> st.SearchStrategy[int | None]:
    return xids if in_stream else st.none()


def messages_for(options: ProtocolOptions, in_stream: bool) -> st.SearchStrategy[Message]:
    """Every message the parser must read back, given where it appears."""
    xid = _with_xid(in_stream)
    content = [
        st.builds(
            Relation,
            xid=xid,
            relation_id=oids,
            namespace=names,
            relation_name=names,
            replica_identity=st.sampled_from("dnfi"),
            columns=st.lists(relation_columns, max_size=5).map(tuple),
        ),
        st.builds(Type, xid=xid, type_oid=oids, namespace=names, type_name=names),
        st.builds(Insert, xid=xid, relation_id=oids, new_tuple=tuples),
        st.builds(
            Update,
            xid=xid,
            relation_id=oids,
            old_kind=st.none(),
            old_tuple=st.none(),
            new_tuple=tuples,
        ),
        st.builds(
            Update,
            xid=xid,
            relation_id=oids,
            old_kind=st.sampled_from(["K", "O"]),
            old_tuple=tuples,
            new_tuple=tuples,
        ),
        st.builds(
            Delete,
            xid=xid,
            relation_id=oids,
            old_kind=st.sampled_from(["K", "O"]),
            old_tuple=tuples,
        ),
        st.builds(
            Truncate,
            xid=xid,
            options=st.integers(0, 3),
            relation_ids=st.lists(oids, max_size=5).map(tuple),
        ),
        st.builds(
            LogicalMessage,
            xid=xid,
            flags=st.integers(0, 1),
            lsn=any_lsns,
            prefix=names,
            content=st.binary(max_size=30),
        ),
    ]
    if in_stream:
        return st.one_of(*content)
    control = [
        st.builds(Begin, final_lsn=lsns, commit_time=timestamps, xid=st.integers(0, 2**32 - 1)),
        st.builds(Commit, flags=st.just(0), commit_lsn=any_lsns, end_lsn=any_lsns,
                  commit_time=timestamps),
        st.builds(Origin, origin_lsn=any_lsns, name=names),
        st.builds(BeginPrepare, prepare_lsn=lsns, end_lsn=lsns, prepare_time=timestamps,
                  xid=xids, gid=names),
        st.builds(Prepare, flags=st.just(0), prepare_lsn=lsns, end_lsn=lsns,
                  prepare_time=timestamps, xid=xids, gid=names),
        st.builds(CommitPrepared, flags=st.just(0), commit_lsn=lsns, end_lsn=lsns,
                  commit_time=timestamps, xid=xids, gid=names),
        st.builds(RollbackPrepared, flags=st.just(0), prepare_end_lsn=lsns,
                  rollback_end_lsn=lsns, prepare_time=timestamps, rollback_time=timestamps,
                  xid=xids, gid=names),
    ]  # fmt: skip
    if options.proto_version >= 2:
        if options.stream_abort_has_abort_info:
            aborts = st.builds(
                StreamAbort, xid=xids, subxid=xids, abort_lsn=any_lsns, abort_time=timestamps
            )
        else:
            aborts = st.builds(StreamAbort, xid=xids, subxid=xids)
        control += [
            st.builds(StreamStart, xid=xids, first_segment=st.booleans()),
            st.just(StreamStop()),
            st.builds(StreamCommit, xid=xids, flags=st.just(0), commit_lsn=any_lsns,
                      end_lsn=any_lsns, commit_time=timestamps),
            aborts,
            st.builds(StreamPrepare, flags=st.just(0), prepare_lsn=lsns, end_lsn=lsns,
                      prepare_time=timestamps, xid=xids, gid=names),
        ]  # fmt: skip
    return st.one_of(*content, *control)


@st.composite
def placed_messages(draw: st.DrawFn) -> tuple[ProtocolOptions, bool, Message]:
    options = draw(st.sampled_from(ALL_OPTIONS))
    in_stream = options.proto_version >= 2 and draw(st.booleans())
    return options, in_stream, draw(messages_for(options, in_stream))


def _parse_error(data: bytes, options: ProtocolOptions, in_stream: bool) -> DecodeError | None:
    """Parse; return the DecodeError if any (any other exception propagates)."""
    try:
        parse_message(data, options=options, in_stream=in_stream)
    except DecodeError as error:
        return error
    return None


@given(placed_messages())
def test_parse_of_an_encoded_message_gives_the_message_back(placed):
    options, in_stream, message = placed
    assert parse_message(
        encode_message(message, options), options=options, in_stream=in_stream
    ) == (message)


@given(st.binary(max_size=64), st.sampled_from(ALL_OPTIONS), st.booleans())
def test_random_bytes_parse_or_raise_decode_error(data, options, in_stream):
    error = _parse_error(data, options, in_stream)
    if error is not None:
        assert 0 <= error.offset <= len(data)


@given(st.sampled_from("BCORYIUDTMbPKrSEcAp"), st.binary(max_size=48), st.booleans())
def test_random_bodies_after_a_valid_tag_parse_or_raise_decode_error(tag, body, in_stream):
    options = ProtocolOptions(4, "parallel", two_phase=True)
    error = _parse_error(tag.encode() + body, options, in_stream)
    if error is not None:
        assert error.message_type != "UNKNOWN"


@given(
    st.sampled_from(GOLDEN_PAYLOADS),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.sampled_from(["replace", "insert", "delete"]),
)
def test_damaged_real_payloads_parse_or_raise_decode_error(golden, damage, how):
    payload, options, in_stream = golden
    data = bytearray(payload)
    for position, value in damage:
        index = position % (len(data) + 1)
        if how == "insert":
            data.insert(index, value)
        elif how == "delete" and index < len(data):
            del data[index]
        elif index < len(data):
            data[index] = value
    with contextlib.suppress(DecodeError):
        parse_message(bytes(data), options=options, in_stream=in_stream)


STREAMING_CAPTURES = [c for c in load_captures() if c.options.streaming != "off"]


@given(st.sampled_from(STREAMING_CAPTURES), st.randoms(use_true_random=False))
def test_assembler_fed_real_messages_in_random_order_raises_only_decode_errors(found, rng):
    messages = list(found.messages)
    assume(len(messages) > 2)
    rng.shuffle(messages)
    assembler = Assembler(found.options)
    for golden in messages:
        error: DecodeError | None = None
        try:
            for output in assembler.feed(golden.lsn, golden.payload):
                if isinstance(output, CommittedTransaction):
                    list(assembler.replay(output))
        except DecodeError as exc:
            error = exc
        if error is not None:
            assert assembler.state is AssemblerState.ERROR
            assert error.wal_start in (golden.lsn, None)
            break


def _outcome(function, data: bytes, in_stream: bool) -> object:
    """What a parsing function returns or raises, comparable across functions."""
    try:
        return ("ok", function(data, in_stream))
    except DecodeError as error:
        return ("error", type(error), str(error))


def _scan(data: bytes, in_stream: bool) -> object:
    result = scan_row_message(data, in_stream=in_stream)
    assert result is not None
    return result[1]


def _parse_xid(data: bytes, in_stream: bool) -> object:
    message = parse_message(data, options=ProtocolOptions(2, "on"), in_stream=in_stream)
    return getattr(message, "xid", "not a row message")


@given(
    st.sampled_from(ROW_PAYLOADS),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.booleans(),
)
def test_row_scan_accepts_and_rejects_exactly_what_parse_message_does(golden, damage, flip):
    payload, _, in_stream = golden
    data = bytearray(payload)
    for position, value in damage:
        index = position % len(data)
        data[index] = value if index else data[index]  # keep the tag: scan only sees rows
    stream = in_stream != flip
    assert _outcome(_scan, bytes(data), stream) == _outcome(_parse_xid, bytes(data), stream)


@given(st.sampled_from("IUD"), st.binary(max_size=40), st.booleans())
def test_row_scan_matches_parse_message_on_random_bodies(tag, body, in_stream):
    data = tag.encode() + body
    assert _outcome(_scan, data, in_stream) == _outcome(_parse_xid, data, in_stream)


def test_row_scan_ignores_messages_that_are_not_rows():
    assert scan_row_message(b"", in_stream=False) is None
    assert scan_row_message(b"B" + bytes(20), in_stream=False) is None
