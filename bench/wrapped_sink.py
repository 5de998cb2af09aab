"""What a benchmark's wrapper around ``DeltaSink`` forwards besides ``apply``.

The sink worker gives a ``DeferringSink`` its upkeep (compaction after a batch, deferred
commit-log records when idle) outside ``apply``. A wrapper that only forwarded ``apply``
would not be one, and the sink would do that upkeep inside the next ``apply`` instead: the
benchmark would time a different daemon than ``wal2delta run`` is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sink import DeltaSink, SinkParts


class WrapsDeltaSink:
    """Mixin for a wrapper with an ``inner`` ``DeltaSink``: forwards upkeep, held-back
    changes (``HoldingSink``), its parts and close."""

    __slots__ = ()
    inner: DeltaSink

    def after_apply(self) -> None:
        """The wrapped sink's upkeep after a batch."""
        self.inner.after_apply()

    def settle(self) -> bool:
        """The wrapped sink's upkeep when idle; whether some is still due."""
        return self.inner.settle()

    def held_deadline(self) -> float | None:
        """When the wrapped sink's held-back changes are due."""
        return self.inner.held_deadline()

    def discard_held(self) -> None:
        """Forget the wrapped sink's held-back changes."""
        self.inner.discard_held()

    @property
    def parts(self) -> SinkParts:
        """The wrapped sink's parts (snapshot markers, bulk path, copies, timeline), so the
        supervisor holds them as it holds a ``DeltaSink``'s."""
        return self.inner.parts

    def close(self) -> None:
        """Close the wrapped sink."""
        self.inner.close()
