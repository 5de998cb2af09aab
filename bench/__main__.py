"""``python -m bench``: list the benchmarks; ``python -m bench NAME [ARGS]``: run one.

A benchmark that cannot be written yet exits 1 with what it waits for, so a script that
runs every benchmark notices the gap instead of skipping it silently.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import cast

from bench import BENCHMARKS


def main(argv: list[str]) -> int:
    """List or run; see the module docstring."""
    if not argv or argv[0] in {"-h", "--help"}:
        print("usage: python -m bench [NAME [ARGS...]]\n\nbenchmarks (issue 6, then later issues):")
        for listed in BENCHMARKS:
            how = f"python -m {listed.module}" if listed.module else "NOT WRITTEN YET"
            print(f"  {listed.part}. {listed.name:<8} {listed.summary}  [{how}]")
        return 0
    by_name = {benchmark.name: benchmark for benchmark in BENCHMARKS}
    benchmark = by_name.get(argv[0])
    if benchmark is None:
        print(f"unknown benchmark {argv[0]!r}; choose from {', '.join(by_name)}", file=sys.stderr)
        return 2
    if benchmark.module is None:
        print(
            f"benchmark {benchmark.name} (issue 6 part {benchmark.part}) is not written yet: "
            f"{benchmark.blocked_by}",
            file=sys.stderr,
        )
        return 1
    run = cast(Callable[[list[str]], int], importlib.import_module(benchmark.module).main)
    return run(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
