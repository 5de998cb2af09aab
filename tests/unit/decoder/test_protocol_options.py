"""ProtocolOptions refuses what pgoutput_startup refuses, with a sentence saying why."""

from __future__ import annotations

import pytest

from decoder import ProtocolOptions


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"proto_version": 0}, "proto_version 0 is not supported"),
        ({"proto_version": 5}, "proto_version 5 is not supported"),
        ({"proto_version": 1, "streaming": "on"}, "streaming 'on' needs proto_version 2"),
        ({"proto_version": 3, "streaming": "parallel"}, "'parallel' needs proto_version 4"),
        ({"proto_version": 2, "two_phase": True}, "two_phase needs proto_version 3"),
        ({"proto_version": 4, "streaming": "sometimes"}, "is not one of"),
    ],
)
def test_options_that_pgoutput_refuses_raise_value_error(kwargs, reason):
    with pytest.raises(ValueError, match=reason):
        ProtocolOptions(**kwargs)


def test_every_supported_combination_is_accepted():
    ProtocolOptions()
    ProtocolOptions(2, "on")
    ProtocolOptions(3, "on", two_phase=True, binary=True, messages=True)
    ProtocolOptions(4, "parallel", two_phase=True)


def test_stream_abort_carries_abort_info_only_with_parallel_streaming_on_v4():
    assert ProtocolOptions(4, "parallel").stream_abort_has_abort_info
    assert not ProtocolOptions(4, "on").stream_abort_has_abort_info
    assert not ProtocolOptions(3, "on").stream_abort_has_abort_info
