"""The server timeline the lake follows (``TimelineStore``), kept in the commit log.

Capture's failover check reads the newest timeline the lake's batches were streamed on and
records a new one the lake follows after a promotion (``capture/timeline.py``). Both go to
the commit log (``commits.CommitLog``); a write takes turns with the batches (``turns``,
the lock ``DeltaSink`` holds while it applies one).
"""

from __future__ import annotations

import threading

from sink.base import WrittenTimeline
from sink.records.commits import CommitLog


class LakeTimeline:
    """The timeline records of one lake (the module docstring)."""

    def __init__(self, commits: CommitLog, turns: threading.RLock) -> None:
        self._commits = commits
        self._turns = turns

    def written_timeline(self) -> WrittenTimeline | None:
        """The newest server timeline the lake's batches were streamed on, and the newest
        commit LSN they may have written (``CommitLog.written_timeline``).

        Raises:
            SinkError: the commit log could not be read.
        """
        with self._turns:
            return self._commits.written_timeline()

    def accept_timeline(self, timeline: int) -> None:
        """Record that the lake follows ``timeline`` from now on (``CommitLog``).

        Raises:
            SinkError: the record could not be written.
        """
        with self._turns:
            self._commits.accept_timeline(timeline)
