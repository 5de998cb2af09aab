"""Byte-at-a-time truncation: every proper prefix of a valid message is a located error.

h11's ``test_io.py`` habit: cutting a valid message anywhere must give a
``MalformedMessageError`` whose offset lies inside the prefix, never a short read that
silently succeeds and never another exception type.
"""

from __future__ import annotations

import pytest

from decoder import MalformedMessageError, ProtocolOptions, StreamAbort, parse_message
from tests.golden import load_captures
from tests.support.pgoutput_builder import encode_message


def _samples() -> list[tuple[str, bytes, ProtocolOptions, bool]]:
    """A few real payloads of every tag, layout and option set (deduplicated)."""
    chosen: dict[tuple[str, bool, bool, bool], list[bytes]] = {}
    samples = []
    for found in load_captures():
        in_stream = False
        for golden in found.messages:
            tag = golden.tag
            key = (tag, in_stream, found.options.binary, found.options.streaming == "parallel")
            picked = chosen.setdefault(key, [])
            if len(picked) < 3 and golden.payload not in picked:
                picked.append(golden.payload)
                samples.append((f"{found.id}-{tag}", golden.payload, found.options, in_stream))
            if tag == "S":
                in_stream = True
            elif tag == "E":
                in_stream = False
    parallel = ProtocolOptions(4, "parallel")
    with_info = StreamAbort(xid=7, subxid=9, abort_lsn=0x1234, abort_time=5)
    samples.append(("builder-A", encode_message(with_info, parallel), parallel, False))
    return samples


SAMPLES = _samples()


def test_samples_cover_every_tag():
    assert {payload[:1] for _, payload, _, _ in SAMPLES} == {
        tag.encode() for tag in "BCORYIUDTMbPKrSEcAp"
    }


@pytest.mark.parametrize(
    ("payload", "options", "in_stream"),
    [sample[1:] for sample in SAMPLES],
    ids=[sample[0] for sample in SAMPLES],
)
def test_every_proper_prefix_of_a_valid_message_raises_with_an_offset_inside_it(
    payload, options, in_stream
):
    parse_message(payload, options=options, in_stream=in_stream)
    for cut in range(len(payload)):
        prefix = payload[:cut]
        with pytest.raises(MalformedMessageError) as info:
            parse_message(prefix, options=options, in_stream=in_stream)
        assert 0 <= info.value.offset <= cut, (cut, str(info.value))
        assert info.value.message_type != ""
        assert str(info.value).startswith("cannot decode")
