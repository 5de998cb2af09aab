"""Failover slots (source.failover): the version rule, the replication commands, the list
setting the standbys are read from, and what the metrics and status show of them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from prometheus_client import generate_latest
from psycopg import sql

from capture import Metrics, ServerCapabilityError
from capture.errors import EXIT_CONFIG
from capture.slots import (
    SlotState,
    StandbySlot,
    parse_slot_list,
    standby_slots,
    want_failover,
)
from capture.stream import ReplicationStream
from daemon.status import StandbySlotStatus, Status, render_status
from decoder import Lsn


@pytest.mark.parametrize(
    ("setting", "version", "wanted"),
    [
        ("auto", 170000, True),
        ("auto", 180001, True),
        ("auto", 160004, False),
        ("auto", 140000, False),
        ("true", 170002, True),
        ("false", 180001, False),
        ("false", 150018, False),
    ],
)
def test_auto_is_on_from_postgresql_17_and_false_is_off_everywhere(
    setting: Literal["auto", "true", "false"], version: int, wanted: bool
) -> None:
    assert want_failover(setting, version) is wanted


def test_true_on_an_older_server_is_a_configuration_error_naming_its_version() -> None:
    with pytest.raises(ServerCapabilityError) as raised:
        want_failover("true", 160004)
    message = str(raised.value)
    assert "source.failover: true needs PostgreSQL 17 or newer" in message
    assert "PostgreSQL 16 (server_version_num 160004)" in message
    assert "snapshot.on_slot_loss: resync" in message
    assert raised.value.exit_code == EXIT_CONFIG


@dataclass
class _Result:
    row: tuple[object, ...]

    def fetchone(self) -> tuple[object, ...]:
        return self.row


@dataclass
class _Connection:
    """Records the replication commands a ``ReplicationStream`` sends."""

    commands: list[str] = field(default_factory=list)
    pgconn: object = None
    closed: bool = False

    def execute(self, query: sql.Composable) -> _Result:
        self.commands.append(query.as_string(None))
        return _Result(("w2d", "0/16EF500", "0000007E-00000002-1", "pgoutput"))


def _stream() -> tuple[ReplicationStream, _Connection]:
    conn = _Connection()
    return ReplicationStream(conn), conn  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("two_phase", "failover", "options"),
    [
        (False, False, "SNAPSHOT 'export'"),
        (False, True, "SNAPSHOT 'export', FAILOVER true"),
        (True, True, "SNAPSHOT 'export', TWO_PHASE true, FAILOVER true"),
    ],
)
def test_the_slot_with_the_initial_snapshot_is_created_with_the_failover_option(
    two_phase: bool, failover: bool, options: str
) -> None:
    stream, conn = _stream()
    exported = stream.create_slot_with_snapshot(
        "w2d", two_phase=two_phase, failover=failover, server_version_num=180001
    )
    assert conn.commands == [f'CREATE_REPLICATION_SLOT "w2d" LOGICAL pgoutput ({options})']
    assert exported.consistent_point == Lsn(0x16EF500)


def test_a_temporary_slot_cannot_be_a_failover_slot() -> None:
    stream, conn = _stream()
    with pytest.raises(ValueError, match="temporary"):
        stream.create_slot_with_snapshot(
            "copy", two_phase=False, failover=True, temporary=True, server_version_num=180001
        )
    assert conn.commands == []


@pytest.mark.parametrize("failover", [True, False])
def test_an_existing_slots_flag_is_changed_with_alter_replication_slot(failover: bool) -> None:
    stream, conn = _stream()
    stream.alter_slot_failover("w2d slot", failover=failover)
    assert conn.commands == [
        f'ALTER_REPLICATION_SLOT "w2d slot" (FAILOVER {"true" if failover else "false"})'
    ]


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("", []),
        ("sb1", ["sb1"]),
        ("sb1, sb2", ["sb1", "sb2"]),
        (' "sb1" ,SB2,  sb_3 ', ["sb1", "sb2", "sb_3"]),
        ('"a""b",c', ['a"b', "c"]),
        (",,sb1,", ["sb1"]),
    ],
)
def test_synchronized_standby_slots_is_split_as_postgresql_splits_identifiers(
    text: str, names: list[str]
) -> None:
    assert parse_slot_list(text) == names


def _slot(failover: bool | None) -> SlotState:
    return SlotState(
        name="w2d",
        plugin="pgoutput",
        database="app",
        active_pid=42,
        confirmed_flush_lsn=Lsn(2000),
        restart_lsn=Lsn(1000),
        wal_status="reserved",
        two_phase=False,
        failover=failover,
        synced=False if failover is not None else None,
    )


def _exposed(metrics: Metrics) -> dict[str, float]:
    values = {}
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith(("wal2delta_slot_failover", "wal2delta_failover_standby_slots")):
            sample, value = line.rsplit(" ", 1)
            values[sample] = float(value)
    return values


STANDBYS = (
    StandbySlot("sb1", "ready", Lsn(3000)),
    StandbySlot("sb2", "inactive", Lsn(1500)),
    StandbySlot("sb3", "ready", Lsn(2000)),
)


def test_the_metrics_show_the_flag_and_the_standby_slots_by_state() -> None:
    metrics = Metrics()
    metrics.record_failover(_slot(True), STANDBYS)
    assert _exposed(metrics) == {
        "wal2delta_slot_failover": 1,
        'wal2delta_failover_standby_slots{state="ready"}': 2,
        'wal2delta_failover_standby_slots{state="behind"}': 0,
        'wal2delta_failover_standby_slots{state="inactive"}': 1,
        'wal2delta_failover_standby_slots{state="unusable"}': 0,
    }


@pytest.mark.parametrize("slot", [_slot(False), _slot(None), None])
def test_no_failover_slot_counts_no_standby(slot: SlotState | None) -> None:
    metrics = Metrics()
    metrics.record_failover(_slot(True), STANDBYS)
    metrics.record_failover(slot, STANDBYS)
    exposed = _exposed(metrics)
    assert exposed["wal2delta_slot_failover"] == 0
    assert {v for k, v in exposed.items() if "standby_slots" in k} == {0}


def _status(**changes: Any) -> Status:
    base: dict[str, Any] = {
        "slot": "w2d",
        "slot_exists": True,
        "active_pid": 42,
        "wal_status": "reserved",
        "confirmed_flush_lsn": "0/10",
        "server_lsn": "0/20",
        "lag_bytes": 16,
        "retained_wal_bytes": 16,
        "publication": ["w2d"],
        "tables": [],
    }
    base.update(changes)
    return Status(**base)


def _failover_lines(status: Status) -> list[str]:
    lines = render_status(status, as_json=False).splitlines()
    return [line for line in lines if line.startswith(("failover", "  standby", "synced"))]


def test_status_names_each_standby_slot_and_how_many_are_ready() -> None:
    status = _status(
        failover=True,
        standby_slots=[
            StandbySlotStatus("sb1", "ready", "0/BB8"),
            StandbySlotStatus("sb2", "unusable", None),
        ],
    )
    assert _failover_lines(status) == [
        "failover          yes; 1 of 2 standby slots ready",
        "  standby slot    sb1  ready  (received up to 0/BB8)",
        "  standby slot    sb2  unusable  (received up to -)",
    ]
    data = json.loads(render_status(status, as_json=True))
    assert data["failover"] is True
    assert data["standby_slots"][0] == {"name": "sb1", "state": "ready", "restart_lsn": "0/BB8"}


@pytest.mark.parametrize(
    ("changes", "shown"),
    [
        ({"failover": None}, ["failover          no (PostgreSQL 16 or older)"]),
        ({"failover": None, "slot_exists": False}, ["failover          -"]),
        ({"failover": False}, ["failover          no"]),
        (
            {"failover": True},
            [
                "failover          yes; synchronized_standby_slots is empty: no standby is "
                "sure to have what Delta has"
            ],
        ),
        (
            {"failover": True, "synced": True},
            [
                "failover          yes; synchronized_standby_slots is empty: no standby is "
                "sure to have what Delta has",
                "synced            yes: taken over from a former primary at its promotion",
            ],
        ),
    ],
)
def test_status_says_when_the_slot_would_not_survive_a_failover(
    changes: dict[str, Any], shown: list[str]
) -> None:
    assert _failover_lines(_status(**changes)) == shown


@dataclass
class _Catalog:
    """Answers ``standby_slots``'s two queries: the setting, then the slots' rows."""

    setting: str | None
    rows: list[tuple[object, ...]]
    server_version: int = 180001
    params: list[object] = field(default_factory=list)

    @property
    def info(self) -> _Catalog:
        return self

    def execute(self, query: str, params: tuple[object, ...] = ()) -> _Rows:
        self.params.append(params)
        if "current_setting" in query:
            return _Rows([(self.setting,)])
        return _Rows(self.rows)


@dataclass
class _Rows:
    rows: list[tuple[object, ...]]

    def fetchone(self) -> tuple[object, ...] | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple[object, ...]]:
        return self.rows


def test_each_standby_slot_is_ready_behind_inactive_or_unusable_in_the_settings_order() -> None:
    catalog = _Catalog(
        "sb_ready, sb_behind, sb_idle, sb_gone, sb_lost",
        # slot_name, usable (physical and not invalidated), active, restart_lsn
        [
            ("sb_lost", False, False, "0/3000"),
            ("sb_idle", True, False, "0/3000"),
            ("sb_behind", True, True, "0/7CF"),
            ("sb_ready", True, True, "0/7D0"),
        ],
    )
    slots = standby_slots(catalog, Lsn(2000))  # type: ignore[arg-type]
    assert [(slot.name, slot.state) for slot in slots] == [
        ("sb_ready", "ready"),
        ("sb_behind", "behind"),
        ("sb_idle", "inactive"),
        ("sb_gone", "unusable"),
        ("sb_lost", "unusable"),
    ]
    assert slots[0].restart_lsn == Lsn(2000)
    assert catalog.params[1] == (["sb_ready", "sb_behind", "sb_idle", "sb_gone", "sb_lost"],)


@pytest.mark.parametrize(("setting", "version"), [("", 180001), (None, 180001), ("sb1", 160004)])
def test_no_standby_slots_without_the_setting_or_before_postgresql_17(
    setting: str | None, version: int
) -> None:
    catalog = _Catalog(setting, [("sb1", True, True, "0/1")], server_version=version)
    assert standby_slots(catalog, Lsn(1)) == ()  # type: ignore[arg-type]
