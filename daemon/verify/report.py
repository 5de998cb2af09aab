"""The verdicts of ``wal2delta verify`` and how they are printed.

Theory of operation
-------------------
Each table ends with one ``TableVerdict``. Its status follows from what the rounds left
(``rounds``): no difference is ``match``; differences that vanished in a later round are
``lag`` (counted, still a match); differences that persisted through a round whose LSN the
slot had passed are ``different`` (a divergence); differences seen while the slot never
passed the compared LSN are ``unreplicated`` (lag and divergence cannot be told apart); a
table whose source or Delta table could not be read is ``error``. Summaries that differ
while no row does (a value both engines print differently) are a match: the rows decide.

A ``VerifyReport`` gathers the verdicts with the LSNs compared at; it matches when every
table is ``match`` or ``lag``, and its exit code says so (0, else 1). ``render_report``
prints it as a table for people or as JSON for scripts, with a few examples of each kind
of difference per table.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Final, Literal

from capture import EXIT_FATAL, EXIT_OK
from daemon.verify.compare import Difference, Findings
from daemon.verify.plan import VerifyTable

Status = Literal["match", "lag", "different", "unreplicated", "error"]

EXAMPLES: Final = 5
"""Examples of each kind of difference kept per table."""


@dataclass(frozen=True)
class TableVerdict:
    """The comparison of one table.

    Attributes:
        table: ``schema.table``.
        delta_path: the Delta table's location.
        status: ``match``; ``lag`` (differences that vanished once Delta caught up);
            ``different`` (divergence); ``unreplicated`` (the slot never passed the
            compared LSN: lag and divergence cannot be told apart); ``error``.
        source_rows: rows in PostgreSQL at the compared LSN.
        delta_rows: live rows in Delta when it was read.
        keyless: compared as a multiset (no key).
        missing: keys in PostgreSQL, not in Delta (rows, for a keyless table).
        extra: keys (rows) in Delta, not in PostgreSQL.
        different: keys whose rows differ.
        lag: differences seen that disappeared in a later round.
        examples: a few differences of each kind.
        buckets: buckets the table was summarised in.
        differing_buckets: buckets whose summaries differed in round 0.
        complete: every differing bucket was read row by row (the counts are exact).
        error: why the table could not be compared.
    """

    table: str
    delta_path: str
    status: Status
    source_rows: int | None = None
    delta_rows: int | None = None
    keyless: bool = False
    missing: int = 0
    extra: int = 0
    different: int = 0
    lag: int = 0
    examples: list[Difference] = field(default_factory=list)
    buckets: int = 0
    differing_buckets: int = 0
    complete: bool = True
    error: str | None = None


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of ``wal2delta verify``.

    Attributes:
        slot: the configured slot.
        compared_lsn: the source LSN of round 0's snapshot (the LSN compared at).
        final_lsn: the LSN of the last round's snapshot.
        confirmed_flush_lsn: the slot's confirmed flush position at the end.
        replicated: the slot had passed the compared LSN when Delta was read.
        rounds: comparison rounds run (round 0 plus re-checks of differences).
        tables: one verdict per table.
    """

    slot: str
    compared_lsn: str
    final_lsn: str
    confirmed_flush_lsn: str | None
    replicated: bool
    rounds: int
    tables: list[TableVerdict]

    @property
    def matches(self) -> bool:
        return all(t.status in ("match", "lag") for t in self.tables)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.matches else EXIT_FATAL


def table_verdict(
    table: VerifyTable,
    *,
    source_rows: int | None,
    delta_rows: int | None,
    buckets: int,
    differing_buckets: int,
    complete: bool,
    findings: Findings | None,
    lag: int,
    error: str | None,
    replicated: bool,
) -> TableVerdict:
    """The verdict on ``table`` from what its rounds left (``findings``: the differences
    that persisted; ``lag``: those that vanished)."""
    base = {
        "table": table.qualified_name,
        "delta_path": table.delta_path,
        "source_rows": source_rows,
        "delta_rows": delta_rows,
        "keyless": not table.key,
        "buckets": buckets,
        "differing_buckets": differing_buckets,
        "complete": complete,
    }
    if error is not None:
        return TableVerdict(**base, status="error", error=error)  # type: ignore[arg-type]
    findings = findings or Findings()
    counts = {"missing": 0, "extra": 0, "different": 0}
    examples: list[Difference] = []
    for ident, times in findings.counts.items():
        example = findings.examples[ident]
        counts[example.kind] += times
        if sum(1 for e in examples if e.kind == example.kind) < EXAMPLES:
            examples.append(example)
    # Summaries that differ while no row does: a value both engines print differently
    # (a float's exponent, say); the rows decide.
    status: Status
    if findings.total() > 0:
        status = "different" if replicated else "unreplicated"
    else:
        status = "lag" if lag else "match"
    return TableVerdict(
        **base,  # type: ignore[arg-type]
        status=status,
        missing=counts["missing"],
        extra=counts["extra"],
        different=counts["different"],
        lag=lag,
        examples=sorted(examples, key=lambda e: e.kind),
    )


def render_report(report: VerifyReport, *, as_json: bool) -> str:
    """Human table by default, JSON for scripts."""
    if as_json:
        return json.dumps({**asdict(report), "matches": report.matches}, indent=2)
    lines = [
        f"compared at LSN {report.compared_lsn} (slot {report.slot}, confirmed flush "
        f"{report.confirmed_flush_lsn or '-'}"
        + ("" if report.replicated else ", NOT yet past the compared LSN")
        + ")",
        "",
        f"{'table':<32} {'postgres':>9} {'delta':>9}  result",
    ]
    for table in report.tables:
        lines.extend(_table_lines(table, report))
    differing = sum(1 for t in report.tables if t.status not in ("match", "lag"))
    lines.append("")
    lines.append("all tables match" if report.matches else f"{differing} table(s) differ")
    return "\n".join(lines)


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _table_lines(table: TableVerdict, report: VerifyReport) -> list[str]:
    head = f"{table.table:<32} {_count(table.source_rows):>9} {_count(table.delta_rows):>9}  "
    if table.status == "error":
        return [head + f"ERROR: {table.error}"]
    if table.status in ("match", "lag"):
        note = (
            f" ({table.lag} difference(s) were lag: changes in flight, gone at a later LSN)"
            if table.lag
            else ""
        )
        return [head + "match" + note]
    at_least = "" if table.complete else "at least "
    summary = f"{at_least}{table.missing} missing, {table.extra} extra, {table.different} different"
    label = "DIFFERENT" if table.status == "different" else "NOT YET REPLICATED"
    lines = [head + f"{label}: {summary}"]
    if table.status == "unreplicated":
        lines.append(
            f"    the slot has not passed LSN {report.compared_lsn}: these may be lag; run "
            "again once the daemon has caught up"
        )
    names = {"missing": "missing in Delta", "extra": "only in Delta", "different": "differs"}
    for example in table.examples:
        key = ", ".join(f"{k}={v}" for k, v in example.key.items())
        columns = f" (columns: {', '.join(example.columns)})" if example.columns else ""
        lines.append(f"    {names[example.kind]}: {key}{columns}")
    return lines
