"""One observation of the slot as the server sees it: the server's WAL position, the slot's
row and the standby slots' states, on a normal connection.

The source monitor (``capture.monitor``) samples it every few seconds for the lag metrics;
``wal2delta status`` samples it once. It is a module of its own so that ``status`` reads
the slot without importing the monitor's logging and metrics (docs/decisions/0119-*).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from capture.slots import SlotState, StandbySlot, current_wal_lsn, slot_state, standby_slots


@dataclass(frozen=True, slots=True)
class SlotSample:
    """One observation of the slot."""

    server_lsn: int
    slot: SlotState | None
    standby_slots: tuple[StandbySlot, ...] = ()
    """The physical slots named in ``synchronized_standby_slots`` (PostgreSQL 17+)."""

    @property
    def lag_bytes(self) -> int | None:
        if self.slot is None or self.slot.confirmed_flush_lsn is None:
            return None
        return max(0, self.server_lsn - self.slot.confirmed_flush_lsn)

    @property
    def retained_wal_bytes(self) -> int | None:
        """WAL the slot keeps on the server: from its ``restart_lsn``, not its flush LSN
        (an open or prepared transaction holds ``restart_lsn`` back)."""
        if self.slot is None or self.slot.restart_lsn is None:
            return None
        return max(0, self.server_lsn - self.slot.restart_lsn)


def sample_slot(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> SlotSample:
    """Read the server's WAL position, the slot's state and the standby slots' states."""
    server_lsn = current_wal_lsn(conn)
    state = slot_state(conn, slot)
    confirmed = state.confirmed_flush_lsn if state is not None else None
    return SlotSample(server_lsn, state, standby_slots(conn, confirmed))
