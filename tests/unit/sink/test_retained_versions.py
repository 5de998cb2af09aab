"""``sink.retained_versions``: the versions a vacuum keeps so that every cut cut may still
take reads, and ``choose_cut`` refusing the boundaries older than that.

The argument (sink/upkeep/retention.py): a cut at a boundary recorded at or after the cutoff names
versions recorded at or after it - whose files were removed later still, so a vacuum
keeping files removed after the cutoff keeps them - or a table's newest version recorded
before the cutoff; the newest boundary recorded before the cutoff names its own. The
property test checks it on random commit logs against a brute force over every cut.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.cut import CutError, choose_cut
from decoder import Lsn
from sink import oldest_retained_boundary, retained_versions

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def row(batch: int, table: str | None, version: int | None, lsn: int | None) -> dict[str, object]:
    return {
        "batch": batch,
        "lsn": lsn,
        "commit_time": T0 + timedelta(seconds=batch),
        "table_name": table,
        "table_path": None if table is None else f"/lake/{table}",
        "version": version,
        "recorded_at": T0 + timedelta(minutes=batch),
        "high_lsn": None if lsn is None else lsn - 1,
    }


LOG = [
    row(1, "a", 1, 100),
    row(1, "b", 1, 100),
    row(2, "a", 2, 200),
    row(3, "a", 3, None),  # part of a large transaction: no boundary
    row(4, "b", 2, 400),
    row(5, "b", 3, 500),
]


def minutes(n: float) -> datetime:
    return T0 + timedelta(minutes=n)


def test_the_newest_version_before_the_cutoff_and_the_oldest_kept_boundarys_are_kept() -> None:
    # Cutoff after batch 3: the oldest boundary a cut may take is batch 2 (a=2, b=1); a's
    # newest version before the cutoff is 3 (batch 3, no boundary, but batch 4 names it).
    assert oldest_retained_boundary(LOG, minutes(3.5)) == 2
    assert retained_versions(LOG, minutes(3.5)) == {"/lake/a": {2, 3}, "/lake/b": {1}}
    # Before everything: nothing recorded before the cutoff, nothing to keep by version.
    assert oldest_retained_boundary(LOG, minutes(0.5)) is None
    assert retained_versions(LOG, minutes(0.5)) == {}
    # After everything: the newest boundary and the newest versions, the same here.
    assert retained_versions(LOG, minutes(6)) == {"/lake/a": {3}, "/lake/b": {3}}


def test_a_cut_older_than_the_oldest_kept_boundary_is_refused() -> None:
    assert choose_cut(LOG, Lsn(250), vacuumed_before=minutes(3.5)).batch == 2
    with pytest.raises(CutError, match=r"sink\.retention"):
        choose_cut(LOG, Lsn(150), vacuumed_before=minutes(3.5))
    assert choose_cut(LOG, Lsn(150)).batch == 1


@st.composite
def logs(draw: st.DrawFn) -> list[dict[str, object]]:
    versions = {"a": 0, "b": 0, "c": 0}
    rows = []
    for batch in range(1, draw(st.integers(1, 12)) + 1):
        lsn = None if draw(st.booleans()) and batch > 1 else batch * 100
        for table in draw(st.sets(st.sampled_from(sorted(versions)), min_size=1)):
            versions[table] += draw(st.integers(1, 3))  # compactions between batches
            rows.append(row(batch, table, versions[table], lsn))
    return rows


@given(logs(), st.floats(0, 14))
def test_every_cut_choose_cut_answers_names_only_kept_or_recent_versions(
    log: list[dict[str, object]], cutoff_minutes: float
) -> None:
    cutoff = minutes(cutoff_minutes)
    kept = retained_versions(log, cutoff)
    recorded = {(r["table_path"], r["version"]): r["recorded_at"] for r in log}
    for at in range(0, 1400, 50):
        try:
            cut = choose_cut(log, Lsn(at), vacuumed_before=cutoff)
        except CutError:
            continue
        for table in cut.tables:
            when = recorded[table.path, table.version]
            assert isinstance(when, datetime)
            assert when >= cutoff or table.version in kept.get(table.path, set()), (at, table)
