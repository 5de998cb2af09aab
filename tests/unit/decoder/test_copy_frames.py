"""CopyData frames: XLogData and keepalives in, standby status updates out."""

from __future__ import annotations

import struct

import pytest

from decoder import (
    MalformedMessageError,
    PrimaryKeepalive,
    XLogData,
    encode_standby_status_update,
    parse_copy_data,
)


def test_xlogdata_frame_carries_positions_time_and_payload():
    frame = b"w" + struct.pack(">QQq", 0x16B374D848, 0x16B374D900, 123) + b"Bpayload"
    parsed = parse_copy_data(memoryview(frame))
    assert parsed == XLogData(
        wal_start=0x16B374D848, wal_end=0x16B374D900, send_time=123, payload=b"Bpayload"
    )
    assert isinstance(parsed.payload, bytes)


def test_keepalive_frame_carries_wal_end_and_reply_request():
    frame = b"k" + struct.pack(">QqB", 0x100, -1, 1)
    assert parse_copy_data(frame) == PrimaryKeepalive(
        wal_end=0x100, send_time=-1, reply_requested=True
    )


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"", "empty"),
        (b"x" + bytes(24), "unknown CopyData frame tag 0x78"),
        (b"w" + bytes(23), "XLogData header needs 24 bytes"),
        (b"k" + bytes(16), "a primary keepalive has 17 bytes"),
        (b"k" + bytes(18), "a primary keepalive has 17 bytes"),
        (b"k" + bytes(16) + b"\x02", "reply_requested must be 0 or 1"),
    ],
)
def test_malformed_frames_raise_a_decode_error(frame, reason):
    with pytest.raises(MalformedMessageError, match=reason):
        parse_copy_data(frame)


def test_standby_status_update_is_r_three_positions_time_and_reply_flag():
    encoded = encode_standby_status_update(
        write=0x30, flush=0x20, apply=0x10, send_time=99, reply_requested=True
    )
    assert encoded == b"r" + struct.pack(">QQQqB", 0x30, 0x20, 0x10, 99, 1)
    assert len(encoded) == 34


def test_standby_status_update_refuses_positions_outside_uint64():
    with pytest.raises(ValueError, match="flush position -1"):
        encode_standby_status_update(write=0, flush=-1, apply=0, send_time=0)
