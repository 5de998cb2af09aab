"""Printing benchmark results: one table of figures, ratios against the baseline, JSON.

A benchmark collects ``Figure`` rows (one per measured contender, each the median of its
repetitions) and ``Ratio`` lines (contender / baseline, with the target when the issue
sets one). The table is for people; ``--json`` prints the same content as one JSON object
on the last line, for scripts that track results over time.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from decoder import DECODER_KERNEL


@dataclass(frozen=True, slots=True)
class Figure:
    """One contender's measurement: the median over its runs, and every run."""

    name: str
    value: float
    unit: str
    runs: tuple[float, ...]
    note: str = ""


@dataclass(frozen=True, slots=True)
class Ratio:
    """``numerator / denominator``; ``target`` and ``higher_is_better`` judge it."""

    name: str
    value: float
    target: float | None = None
    higher_is_better: bool = True

    @property
    def verdict(self) -> str:
        """``met``, ``NOT met`` or empty when the issue sets no target."""
        if self.target is None:
            return ""
        met = self.value >= self.target if self.higher_is_better else self.value <= self.target
        return "met" if met else "NOT met"


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value at ``fraction`` of ``values`` sorted (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def median_figure(name: str, runs: Sequence[float], unit: str, note: str = "") -> Figure:
    """A figure whose value is the median of ``runs``."""
    return Figure(name, statistics.median(runs), unit, tuple(runs), note)


def machine() -> dict[str, object]:
    """What the figures were measured on."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
        "decoder_kernel": DECODER_KERNEL,
    }


def print_report(
    title: str,
    figures: Sequence[Figure],
    ratios: Sequence[Ratio],
    *,
    facts: dict[str, object],
    as_json: bool,
) -> None:
    """Print the table, the ratios and (with ``as_json``) a JSON line.

    ``facts`` are printed as given, followed by the CPU count and the load average (the
    machine was at times shared with other work, which the ratios must be read against).
    """
    facts = {
        **facts,
        "cpus": os.cpu_count(),
        "load average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "decoder kernel": DECODER_KERNEL,
    }
    print(f"\n== {title} ==")
    for key, value in facts.items():
        print(f"  {key}: {value}")
    width = max((len(f.name) for f in figures), default=10)
    for figure in figures:
        runs = ", ".join(f"{run:,.1f}" for run in figure.runs)
        note = f"  ({figure.note})" if figure.note else ""
        print(f"  {figure.name:<{width}}  {figure.value:>12,.1f} {figure.unit}  [{runs}]{note}")
    for ratio in ratios:
        target = ""
        if ratio.target is not None:
            sign = ">=" if ratio.higher_is_better else "<="
            target = f"  target {sign} {ratio.target:.2f}: {ratio.verdict}"
        print(f"  {ratio.name}: {ratio.value:.3f}{target}")
    if as_json:
        document = {
            "title": title,
            "machine": machine(),
            "facts": facts,
            "figures": [asdict(f) for f in figures],
            "ratios": [{**asdict(r), "verdict": r.verdict} for r in ratios],
        }
        print(json.dumps(document, default=str))
