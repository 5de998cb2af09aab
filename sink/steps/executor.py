"""The contract every step executor keeps: one table and one step in, one outcome out.

``writer.TableWriter`` hands each step of a table's plan, in order, to the executor of its
kind - ``step_append.KeyedAppendExecutor`` (a keyed step whose keys cannot be in the
table), ``step_keyed.KeyedMergeExecutor``, ``step_keyless.KeylessMergeExecutor``,
``step_truncate.TruncateExecutor`` - then the table's ``HistoryStep`` to
``step_history.HistoryExecutor``, all with the same arguments, and reads the same result:
which Delta write the step made (one commit at most), the unchanged-TOAST rows it found
missing, and the other table it wrote, if any (the change history's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from sink.lake.tables import TableState
from sink.planning.plan import Step

StepT_contra = TypeVar("StepT_contra", bound=Step, contravariant=True)

WriteKind = Literal["merge", "append", "delete", "none"]
"""The Delta write a step made: a MERGE, an append, a DELETE (a TRUNCATE without soft
deletes), or nothing (every row of the step was inserted and deleted within it)."""

WRITE_KINDS: tuple[WriteKind, ...] = ("merge", "append", "delete", "none")


@dataclass(frozen=True, slots=True)
class TableTarget:
    """The Delta table a step writes.

    Attributes:
        name: its qualified source name, ``schema.table``.
        path: its location.
        state: what the sink knows of it (``tables.TableState``).
        reference: the table reference SQL names it by (``TableState.reference``).
    """

    name: str
    path: str
    state: TableState
    reference: str


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one step did.

    Attributes:
        write: the Delta write it made.
        toast_anomalies: rows whose unchanged-TOAST value exists nowhere in the table
            (counted, not written).
        location: the table the step wrote besides its target, if any (the change
            history's, ``step_history.py``).
    """

    write: WriteKind
    toast_anomalies: int = 0
    location: str | None = None


NOTHING_WRITTEN = StepOutcome("none")


class StepExecutor(Protocol[StepT_contra]):
    """Applies one kind of step."""

    def apply(self, target: TableTarget, step: StepT_contra) -> StepOutcome:
        """Write ``step`` to ``target`` (one Delta commit at most).

        Raises:
            SinkDataError, SinkRetryableError, SinkError: as ``DeltaSink.apply``.
        """
        ...
