"""``wal2delta verify``'s row comparison and report, without servers: the drill-down's
verdicts on rows read from both sides, and what the command prints."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from daemon.verify import (
    Difference,
    Findings,
    TableVerdict,
    VerifyReport,
    comparable,
    compare_rows,
    render_report,
)
from daemon.verify.plan import VerifyColumn, VerifyTable
from daemon.verify.sql import Kind, kind_of
from decoder import Lsn
from sink import delta_type

INT4, TEXT, NUMERIC = 23, 25, 1700
AT = Lsn(1000)


def _table(*, key: tuple[str, ...]) -> VerifyTable:
    columns = (
        VerifyColumn.of("id", "id", INT4, -1),
        VerifyColumn.of("name", "name", TEXT, -1),
    )
    return VerifyTable("public", "t", columns, key, None, "/lake/public/t")


def _kinds(found: Findings) -> dict[str, int]:
    counts: dict[str, int] = {}
    for ident, times in found.counts.items():
        kind = found.examples[ident].kind
        counts[kind] = counts.get(kind, 0) + times
    return counts


def test_values_compare_by_meaning() -> None:
    assert comparable(Decimal("1.50")) != comparable(Decimal("1.5"))
    assert comparable(float("nan")) == comparable(float("nan"))
    assert comparable(-0.0) == comparable(0.0)
    pacific = dt.timezone(dt.timedelta(hours=-8))
    instant = dt.datetime(2024, 3, 10, 1, 30, tzinfo=pacific)
    assert comparable(instant) == comparable(instant.astimezone(dt.UTC))
    assert comparable(instant.replace(tzinfo=None)) != comparable(instant)
    assert comparable([1, None]) == comparable([1, None])
    assert comparable(memoryview(b"\x00")) == comparable(b"\x00")


def test_missing_extra_and_different_keys_are_told_apart() -> None:
    source = [[1, "a"], [2, "b"], [3, "c"]]
    delta = [([1, "a"], 10), ([2, "B"], 10), ([4, "d"], 10)]
    found = compare_rows(_table(key=("id",)), source, delta, AT)
    assert _kinds(found) == {"missing": 1, "extra": 1, "different": 1}
    examples = {(e.kind, e.key["id"], tuple(e.columns)) for e in found.examples.values()}
    assert examples == {("missing", "3", ()), ("extra", "4", ()), ("different", "2", ("name",))}


def test_a_key_held_by_two_delta_rows_is_an_extra_row() -> None:
    found = compare_rows(_table(key=("id",)), [[1, "a"]], [([1, "a"], 10), ([1, "a"], 11)], AT)
    assert _kinds(found) == {"extra": 1}


def test_delta_rows_written_after_the_compared_lsn_are_not_findings() -> None:
    source = [[1, "a"]]
    delta = [([1, "newer"], AT + 1), ([9, "inserted later"], AT + 5)]
    assert compare_rows(_table(key=("id",)), source, delta, AT).total() == 0


def test_a_keyless_table_compares_as_a_multiset() -> None:
    table = _table(key=())
    source: list[list[object]] = [[1, "dup"], [1, "dup"], [1, "dup"], [None, None]]
    one_copy_lost: list[tuple[list[object], int]] = [
        ([1, "dup"], 10),
        ([1, "dup"], 10),
        ([None, None], 10),
    ]
    found = compare_rows(table, source, one_copy_lost, AT)
    assert _kinds(found) == {"missing": 1}
    (example,) = found.examples.values()
    assert example.key == {"id": "1", "name": "dup"}
    # Copies written after the snapshot are left over, whatever order they were read in.
    later_copies: list[tuple[list[object], int]] = [
        ([1, "dup"], AT + 3),
        *[([1, "dup"], 10)] * 3,
        ([None, None], 10),
    ]
    assert compare_rows(table, source, later_copies, AT).total() == 0
    one_copy_too_many: list[tuple[list[object], int]] = [
        *[([1, "dup"], 10)] * 4,
        ([None, None], 10),
    ]
    assert _kinds(compare_rows(table, source, one_copy_too_many, AT)) == {"extra": 1}


def test_differences_gone_in_a_later_round_count_as_lag() -> None:
    table = _table(key=("id",))
    first = compare_rows(table, [[1, "a"], [2, "b"]], [], AT)
    later = compare_rows(table, [[1, "a"], [2, "b"]], [([1, "a"], 10)], AT)
    assert first.keep_common(later) == 1
    assert first.total() == 1
    assert [e.key for e in first.examples.values()] == [{"id": "2"}]


@pytest.mark.parametrize(
    ("type_oid", "typmod", "kind"),
    [
        (16, -1, Kind.BOOL),
        (20, -1, Kind.INT),
        (26, -1, Kind.INT),
        (700, -1, Kind.FLOAT),
        (NUMERIC, (10 << 16 | 2) + 4, Kind.DECIMAL),
        (NUMERIC, -1, Kind.TEXT),
        (2950, -1, Kind.TEXT),
        (17, -1, Kind.BYTES),
        (1082, -1, Kind.DATE),
        (1114, -1, Kind.WALLCLOCK),
        (1184, -1, Kind.INSTANT),
        (1007, -1, Kind.ARRAY),
    ],
)
def test_every_delta_type_has_a_canonical_kind(type_oid: int, typmod: int, kind: Kind) -> None:
    assert kind_of(delta_type(type_oid, typmod)) is kind


def _report(*tables: TableVerdict, replicated: bool = True) -> VerifyReport:
    return VerifyReport("s", "0/10", "0/10", "0/10", replicated, 1, list(tables))


def test_the_report_names_examples_and_its_exit_code_follows_the_verdicts() -> None:
    differing = TableVerdict(
        "public.t",
        "/lake/public/t",
        "different",
        source_rows=3,
        delta_rows=3,
        missing=1,
        different=1,
        examples=[
            Difference("missing", {"id": "3"}),
            Difference("different", {"id": "2"}, ["name"]),
        ],
    )
    lagging = TableVerdict("public.u", "/lake/public/u", "lag", source_rows=1, delta_rows=1, lag=2)
    report = _report(differing, lagging)
    text = render_report(report, as_json=False)
    assert "public.t" in text
    assert "DIFFERENT: 1 missing, 0 extra, 1 different" in text
    assert "missing in Delta: id=3" in text
    assert "differs: id=2 (columns: name)" in text
    assert "2 difference(s) were lag" in text
    assert report.exit_code == 1
    assert json.loads(render_report(report, as_json=True))["matches"] is False
    assert _report(lagging).exit_code == 0


def test_differences_while_the_slot_is_behind_are_reported_as_not_yet_replicated() -> None:
    behind = TableVerdict("public.t", "/p", "unreplicated", source_rows=2, delta_rows=1, missing=1)
    report = _report(behind, replicated=False)
    text = render_report(report, as_json=False)
    assert "NOT YET REPLICATED" in text
    assert "NOT yet past the compared LSN" in text
    assert report.exit_code == 1
