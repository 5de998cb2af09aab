"""A lake ahead of a promoted server is told apart from one that is not
(``capture/timeline.py``): timeline history files as the server writes them, and the fork
rules."""

from __future__ import annotations

from typing import cast

import pytest
from structlog.testing import capture_logs

from capture.errors import LakeAheadOfServerError
from capture.stream import ReplicationStream
from capture.timeline import (
    LakeFork,
    TimelineCheck,
    TimelineSwitch,
    check_lake_timeline,
    find_lake_fork,
    parse_timeline_history,
    unknown_fork,
)
from daemon.wiring import capture_settings as wired_capture_settings
from decoder import Lsn
from sink import WrittenTimeline
from tests.support.settings import sink_config

# The history of timeline 3 as timeline.c's writeTimeLineHistory writes it (an ancestor's
# lines copied, a blank line, the new line); PostgreSQL 18 pads the LSN's low half.
HISTORY_3 = (
    "1\t0/03000158\tno recovery target specified\n\n2\t0/5000A10\tno recovery target specified\n"
)


def test_a_history_file_is_read_as_the_server_writes_it() -> None:
    assert parse_timeline_history(HISTORY_3) == [
        TimelineSwitch(1, Lsn(0x3000158)),
        TimelineSwitch(2, Lsn(0x5000A10)),
    ]
    assert parse_timeline_history("# a comment\n\n") == []


def test_a_line_that_is_not_a_switch_is_an_error_that_quotes_it() -> None:
    with pytest.raises(ValueError, match="not a timeline history line: 'garbage'"):
        parse_timeline_history("garbage\n")


HISTORY = parse_timeline_history(HISTORY_3)


@pytest.mark.parametrize(
    ("written", "server", "fork"),
    [
        # The lake follows the server's timeline: nothing to compare.
        (WrittenTimeline(3, Lsn(0x9000000)), 3, None),
        # Written on an ancestor, every commit record starting before the ancestor ended:
        # shared history.
        (WrittenTimeline(1, Lsn(0x3000157)), 3, None),
        (WrittenTimeline(2, Lsn(0x4000000)), 3, None),
        # A commit record starting at or after the point where the ancestor ended: the
        # promoted server never received that transaction.
        (WrittenTimeline(1, Lsn(0x3000158)), 3, LakeFork(1, Lsn(0x3000158), 3, Lsn(0x3000158))),
        (WrittenTimeline(1, Lsn(0x3000159)), 3, LakeFork(1, Lsn(0x3000159), 3, Lsn(0x3000158))),
        (WrittenTimeline(2, Lsn(0x6000000)), 3, LakeFork(2, Lsn(0x6000000), 3, Lsn(0x5000A10))),
        # A timeline that is not an ancestor: a server from another branch (an old primary
        # back in service, a restore).
        (WrittenTimeline(4, Lsn(0x100)), 3, LakeFork(4, Lsn(0x100), 3, None)),
        # Accepted (every table copied again on timeline 2), nothing written since: the
        # changes the lake holds from timeline 1 are no frontier.
        (WrittenTimeline(2, None), 3, None),
        # No timeline recorded: positions alone cannot tell (``unknown_fork``).
        (WrittenTimeline(None, Lsn(0x9000000)), 3, None),
    ],
)
def test_the_lake_is_ahead_only_past_the_end_of_its_timeline(
    written: WrittenTimeline, server: int, fork: LakeFork | None
) -> None:
    assert find_lake_fork(written, server, HISTORY) == fork


def test_a_fork_says_where_the_timeline_ended_and_what_it_means() -> None:
    fork = LakeFork(1, Lsn(0x3000200), 2, Lsn(0x3000158))
    assert fork.describe() == (
        "the lake holds changes up to 0/3000200 streamed on timeline 1, which ended at "
        "0/3000158 on this server (its timeline is now 2): the transactions after that "
        "point were never received by the promoted server"
    )
    other = LakeFork(4, Lsn(0x100), 3, None)
    assert "not in the history of the server's timeline 3" in other.describe()


@pytest.mark.parametrize(
    ("written", "history", "switched_at"),
    [
        # Every change the lake holds precedes the first switch: shared history whatever
        # timeline it was streamed on.
        (WrittenTimeline(None, Lsn(0x3000157)), HISTORY, None),
        # At or past the first switch: streamed on timeline 1 it is ahead, on 2 or 3 it is
        # not - nothing recorded tells which.
        (WrittenTimeline(None, Lsn(0x3000158)), HISTORY, Lsn(0x3000158)),
        (WrittenTimeline(None, Lsn(0x9000000)), HISTORY, Lsn(0x3000158)),
        # The server never switched: nothing to be ahead of.
        (WrittenTimeline(None, Lsn(0x9000000)), [], None),
        # A recorded timeline is find_lake_fork's to judge.
        (WrittenTimeline(1, Lsn(0x9000000)), HISTORY, None),
    ],
)
def test_a_lake_without_recorded_timelines_is_judged_by_its_positions(
    written: WrittenTimeline, history: list[TimelineSwitch], switched_at: Lsn | None
) -> None:
    assert unknown_fork(written, history) == switched_at


class _Server:
    """What ``check_lake_timeline`` asks of a replication connection: a server promoted
    twice (timeline 3, ``HISTORY_3``)."""

    def identify_system(self) -> tuple[str, int, Lsn]:
        return "7000000000000000000", 3, Lsn(0x9000000)

    def timeline_history(self, timeline: int) -> str:
        assert timeline == 3
        return HISTORY_3


class _Lake:
    def __init__(self, written: WrittenTimeline) -> None:
        self.written = written

    def written_timeline(self) -> WrittenTimeline:
        return self.written

    def accept_timeline(self, timeline: int) -> None:
        raise AssertionError("nothing is accepted without a copy")


def _check(written: WrittenTimeline) -> TimelineCheck:
    settings = wired_capture_settings(sink_config("unused"))
    assert settings.on_slot_loss == "stop"
    server = cast(ReplicationStream, _Server())
    return check_lake_timeline(server, settings, _Lake(written))


def test_a_lake_without_recorded_timelines_past_a_switch_is_a_warning_not_a_stop() -> None:
    with capture_logs() as logs:
        check = _check(WrittenTimeline(None, Lsn(0x9000000)))
    assert check == TimelineCheck(3)
    (warning,) = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warning["event"] == "whether the lake is ahead of the server cannot be told"
    assert (warning["lake_lsn"], warning["server_timeline"]) == ("0/9000000", 3)
    assert warning["first_switch_lsn"] == "0/3000158"
    assert "wal2delta resync" in warning["consequence"]


def test_a_lake_without_recorded_timelines_before_every_switch_passes_silently() -> None:
    with capture_logs() as logs:
        assert _check(WrittenTimeline(None, Lsn(0x3000000))) == TimelineCheck(3)
    assert logs == []


def test_a_lake_ahead_on_a_recorded_timeline_stops_the_daemon() -> None:
    with pytest.raises(LakeAheadOfServerError, match="streamed on timeline 1, which ended"):
        _check(WrittenTimeline(1, Lsn(0x3000200)))
