"""What decides whether the slot survives, exported as metrics."""

from __future__ import annotations

import math

from prometheus_client import generate_latest

from capture import Metrics
from capture.slots import SlotState
from decoder import Lsn


def _slot(wal_status: str | None, safe_wal_size: int | None) -> SlotState:
    return SlotState(
        name="s",
        plugin="pgoutput",
        database="app",
        active_pid=None,
        confirmed_flush_lsn=Lsn(2000),
        restart_lsn=Lsn(1000),
        wal_status=wal_status,
        two_phase=False,
        safe_wal_size=safe_wal_size,
    )


def _value(metrics: Metrics, sample: str) -> float:
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{sample} not exposed")


def test_a_slot_past_its_cap_is_unreserved_with_its_safe_size_and_retained_wal() -> None:
    metrics = Metrics()
    metrics.record_slot(_slot("unreserved", -4096), retained_wal_bytes=5000)
    assert _value(metrics, 'wal2delta_slot_wal_status{status="unreserved"}') == 1
    assert _value(metrics, 'wal2delta_slot_wal_status{status="reserved"}') == 0
    assert _value(metrics, "wal2delta_slot_safe_wal_size_bytes") == -4096
    assert _value(metrics, "wal2delta_slot_retained_wal_bytes") == 5000


def test_no_cap_is_an_infinite_safe_size_and_a_gone_slot_is_missing() -> None:
    metrics = Metrics()
    metrics.record_slot(_slot("reserved", None), retained_wal_bytes=0)
    assert math.isinf(_value(metrics, "wal2delta_slot_safe_wal_size_bytes"))
    metrics.record_slot(None, retained_wal_bytes=None)
    assert _value(metrics, 'wal2delta_slot_wal_status{status="missing"}') == 1
    assert _value(metrics, 'wal2delta_slot_wal_status{status="reserved"}') == 0
