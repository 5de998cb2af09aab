"""Is the lake ahead of the server it streams from? A failover's fork, noticed.

Theory of operation
-------------------
A promoted standby starts a new timeline at the end of the WAL it had received: its
history file (``TIMELINE_HISTORY``; ``timeline.c``, ``readTimeLineHistory``) names every
ancestor timeline and the LSN where it ended, its switch point. WAL the old primary wrote
past that point never reached the new one, and the new timeline writes other transactions
at the same positions.

With ``synchronized_standby_slots`` on the old primary, wal2delta never received such WAL
(docs/operations.md, "Failover"). Without it, the daemon may have written changes past the
switch point to Delta; after the promotion the server's slot (synchronized, so no further
than the standby's WAL) streams the new timeline from before that point, and the sink would
take the new timeline's changes at those positions for ones it already applied - silently
wrong tables.

So every batch records the timeline it was streamed on (``sink.Batch.timeline``, the commit
log's ``timeline`` column). When a session starts on a server whose timeline differs from
the newest one the lake recorded, ``find_lake_fork`` reads the server's history: the lake
is ahead when its timeline is not an ancestor of the server's, or when it recorded changes
past the LSN where its timeline ended. The daemon then stops with
``LakeAheadOfServerError`` - or, with ``snapshot.on_slot_loss: resync``, copies every table
again while streaming (each copy replaces its table with the promoted server's rows) and
records that the lake follows the new timeline (``TimelineStore.accept_timeline``).

A lake whose batches recorded no timeline (written before timelines were recorded) can only
be judged by position (``unknown_fork``): when every change it holds precedes the server's
first switch point it cannot be ahead; otherwise it might be, on whichever timeline it was
streamed, and the daemon says so in a warning and goes on - stopping would hit every such
lake on a server that was ever promoted. Its next batch records the timeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from capture.errors import LakeAheadOfServerError
from capture.settings import CaptureSettings
from capture.slots import published_table_names
from capture.startup import admin_connection
from capture.stream import ReplicationStream
from decoder import Lsn, format_lsn, parse_lsn
from sink import TimelineStore, WrittenTimeline

log = structlog.get_logger("wal2delta.startup")


@dataclass(frozen=True, slots=True)
class TimelineSwitch:
    """One line of a timeline history file: ``timeline`` ended at ``ended_at``."""

    timeline: int
    ended_at: Lsn


@dataclass(frozen=True, slots=True)
class LakeFork:
    """The lake holds changes the server does not have.

    Attributes:
        lake_timeline: the newest timeline the lake's batches were streamed on.
        lake_lsn: the newest commit LSN a batch on it may have written.
        server_timeline: the server's timeline now.
        ended_at: where ``lake_timeline`` ended on the server's history; None when it is
            not one of the server's ancestors.
    """

    lake_timeline: int
    lake_lsn: Lsn
    server_timeline: int
    ended_at: Lsn | None

    def describe(self) -> str:
        """What happened, in one sentence."""
        if self.ended_at is None:
            where = f"which is not in the history of the server's timeline {self.server_timeline}"
        else:
            where = (
                f"which ended at {format_lsn(self.ended_at)} on this server (its timeline is "
                f"now {self.server_timeline}): the transactions after that point were never "
                "received by the promoted server"
            )
        return (
            f"the lake holds changes up to {format_lsn(self.lake_lsn)} streamed on timeline "
            f"{self.lake_timeline}, {where}"
        )


def parse_timeline_history(content: str) -> list[TimelineSwitch]:
    """The switches of a timeline history file: ``<timeline> <tab> <LSN> <tab> <reason>``
    per line; blank lines and ``#`` comments skipped, as the server's own reader does.

    Raises:
        ValueError: a line is not of that form.
    """
    switches = []
    for line in content.splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        fields = text.split(maxsplit=2)
        if len(fields) < 2 or not fields[0].isdigit():
            raise ValueError(f"not a timeline history line: {line!r}")
        switches.append(TimelineSwitch(int(fields[0]), parse_lsn(fields[1])))
    return switches


def find_lake_fork(
    written: WrittenTimeline, server_timeline: int, history: Sequence[TimelineSwitch]
) -> LakeFork | None:
    """The fork between the lake and the server (the module docstring), or None when the
    lake holds nothing the server lacks.

    ``history``: the switches of the server's timeline (empty for timeline 1).
    """
    if written.timeline is None or written.high_lsn is None:
        return None  # no timeline to compare (``unknown_fork``), or nothing written on it
    if written.timeline == server_timeline:
        return None
    ended_at: Lsn | None = None
    if written.timeline < server_timeline:
        ends = [switch.ended_at for switch in history if switch.timeline == written.timeline]
        if ends:
            ended_at = ends[0]
            # ``high_lsn`` is where a commit record starts. The new timeline begins at the
            # end of the last whole record the standby had, so a commit that starts before
            # that point is shared history, and one that starts at it or later is lost.
            if written.high_lsn < ended_at:
                return None
    return LakeFork(written.timeline, written.high_lsn, server_timeline, ended_at)


def unknown_fork(written: WrittenTimeline, history: Sequence[TimelineSwitch]) -> Lsn | None:
    """For a lake whose batches recorded no timeline (written before timelines were
    recorded): the first switch point of the server's history when the lake holds a change
    at or past it - it may then be ahead, on whichever timeline it was streamed; None when
    every change it holds precedes every switch, so it cannot be.
    """
    if written.timeline is not None or written.high_lsn is None or not history:
        return None
    first = min(switch.ended_at for switch in history)
    return first if written.high_lsn >= first else None


@dataclass(frozen=True, slots=True)
class TimelineCheck:
    """What ``check_lake_timeline`` found.

    Attributes:
        timeline: the server's timeline, recorded with every batch of the session.
        fork: the fork found, None when the lake holds nothing the server lacks.
        tables_to_copy: with a fork and ``snapshot.on_slot_loss: resync``, every published
            table, to be copied again while streaming.
    """

    timeline: int
    fork: LakeFork | None = None
    tables_to_copy: tuple[str, ...] = ()


def check_lake_timeline(
    stream: ReplicationStream,
    settings: CaptureSettings,
    store: TimelineStore | None,
    *,
    checked: int | None = None,
) -> TimelineCheck:
    """The server's timeline, and whether the lake is ahead of it (the module docstring).

    ``checked``: the timeline found at an earlier session of this process; the lake is
    not read again while the server stays on it.

    Raises:
        LakeAheadOfServerError: the lake is ahead and ``on_slot_loss`` is ``stop``.
        SinkError: the lake's record could not be read.
    """
    _, timeline, _ = stream.identify_system()
    if store is None or timeline == checked:
        return TimelineCheck(timeline)
    written = store.written_timeline()
    if written is None or written.timeline == timeline or written.high_lsn is None:
        return TimelineCheck(timeline)
    history = parse_timeline_history(stream.timeline_history(timeline)) if timeline > 1 else []
    switched_at = unknown_fork(written, history)
    if switched_at is not None:
        # Stopping (or copying every table) here would hit every lake written before this
        # check on a server that was ever promoted; the next batch records the timeline.
        log.warning(
            "whether the lake is ahead of the server cannot be told",
            lake_lsn=format_lsn(written.high_lsn),
            server_timeline=timeline,
            first_switch_lsn=format_lsn(switched_at),
            reason=(
                "the lake's batches recorded no timeline (written before timelines were "
                "recorded) and it holds changes at or past the server's first timeline switch"
            ),
            consequence=(
                "if a failover without synchronized_standby_slots happened while the "
                "daemon streamed, the tables may hold changes the server never received: "
                "copy them again (wal2delta resync); from the next batch on, the timeline "
                "is recorded and checked"
            ),
        )
        return TimelineCheck(timeline)
    fork = find_lake_fork(written, timeline, history)
    if fork is None:
        return TimelineCheck(timeline)
    if settings.on_slot_loss != "resync":
        raise LakeAheadOfServerError(
            f"{fork.describe()}. The Delta tables may hold rows the source no longer has, "
            "and the new timeline's changes at the same positions would look already "
            "applied. Set snapshot.on_slot_loss: resync to copy every table again while "
            "streaming, or copy them again by hand (docs/operations.md, Failover); "
            "synchronized_standby_slots on the primary prevents this."
        )
    with admin_connection(settings, "reading the published tables") as conn:
        tables = published_table_names(conn, settings.publications)
    log.error(
        "the lake is ahead of the promoted server; every table is copied again",
        fork=fork.describe(),
        tables=len(tables),
        consequence=("each Delta table keeps its content until its copy replaces it in one commit"),
    )
    return TimelineCheck(timeline, fork, tables)
