"""Protocol negotiation: auto picks the server's highest; impossible requests are errors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from capture.errors import EXIT_CONFIG, ServerCapabilityError
from capture.negotiation import (
    ReplicationRequest,
    max_protocol_version,
    negotiate,
    start_replication_options,
)
from tests.support.settings import replication_request


@pytest.mark.parametrize(
    ("server", "expected"), [(140010, 2), (150008, 3), (160004, 4), (180001, 4), (130000, 1)]
)
def test_auto_picks_the_highest_protocol_the_server_speaks(server: int, expected: int) -> None:
    assert max_protocol_version(server) == expected
    assert negotiate(replication_request(), server).proto_version == expected


def test_auto_streaming_is_on_from_protocol_2_and_off_below() -> None:
    assert negotiate(replication_request(), 180001).streaming == "on"
    assert negotiate(replication_request(protocol_version=1), 180001).streaming == "off"


@pytest.mark.parametrize(
    ("request_", "server", "field"),
    [
        (replication_request(protocol_version=4), 150008, "source.protocol_version"),
        (replication_request(streaming="parallel"), 150008, "source.streaming"),
        (replication_request(two_phase=True), 140010, "source.two_phase"),
        (replication_request(origin="none"), 150008, "source.origin"),
        # The configuration refuses this pair itself; negotiation refuses it all the same.
        (
            replace(replication_request(), protocol_version=1, streaming="on"),
            180001,
            "source.streaming",
        ),
    ],
)
def test_what_the_server_cannot_do_is_an_error_naming_the_field(
    request_: ReplicationRequest, server: int, field: str
) -> None:
    with pytest.raises(ServerCapabilityError, match=field) as caught:
        negotiate(request_, server)
    assert caught.value.exit_code == EXIT_CONFIG


def test_start_replication_options_carry_every_negotiated_setting() -> None:
    options = negotiate(
        replication_request(streaming="parallel", two_phase=True, binary=True, messages=True),
        180001,
    )
    assert start_replication_options(options, 'my"pub', "none") == {
        "proto_version": "4",
        "publication_names": '"my""pub"',
        "streaming": "parallel",
        "two_phase": "true",
        "binary": "true",
        "messages": "true",
        "origin": "none",
    }


def test_several_publications_are_one_quoted_list() -> None:
    options = negotiate(replication_request(), 150004)
    names = start_replication_options(options, ("orders", "Orders, EU", 'say "hi"'), "any")
    assert names["publication_names"] == '"orders","Orders, EU","say ""hi"""'
