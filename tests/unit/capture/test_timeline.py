"""A lake ahead of a promoted server is told apart from one that is not
(``capture/timeline.py``): timeline history files as the server writes them, and the fork
rules."""

from __future__ import annotations

import pytest

from capture.timeline import LakeFork, TimelineSwitch, find_lake_fork, parse_timeline_history
from decoder import Lsn
from sink import WrittenTimeline

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
