"""``wal2delta verify``: every replicated table compared with its source, at one LSN.

Theory of operation
-------------------
The verifier reads; it never writes to either side, and it may run beside the daemon. It
is five modules, each a step a reader can follow alone:

- ``plan``: which tables, columns and key are compared (the publications' tables with
  their row filters and column lists, the sink's type mapping and column names, the key
  the sink merges on), and in how many buckets.
- ``sql``: one canonical text per row, rendered in PostgreSQL SQL and in Spark SQL so that
  both engines print the same text for the same value; the per-bucket summaries (count and
  sum of 60-bit row hashes) and the reads of chosen buckets built on it.
- ``rounds``: round 0 at one REPEATABLE READ snapshot of the source (the compared LSN),
  waiting until the slot has passed that LSN before Delta is read, then re-checks of the
  differing buckets at later LSNs to tell lag from divergence.
- ``compare``: rows of a differing bucket compared in Python by the type mapping's
  meaning (``comparable``): missing, extra and different keys, or a multiset without a key.
- ``report``: one verdict per table (match, lag, different, unreplicated, error), the
  report's exit code, and its printing as a table or JSON.

Imports run one way: plan <- sql, plan <- compare <- report, and rounds uses them all.
"""

from daemon.verify.compare import Difference, Findings, comparable, compare_rows
from daemon.verify.report import Status, TableVerdict, VerifyReport, render_report
from daemon.verify.rounds import replicated_to, verify_source

__all__ = [
    "Difference",
    "Findings",
    "Status",
    "TableVerdict",
    "VerifyReport",
    "comparable",
    "compare_rows",
    "render_report",
    "replicated_to",
    "verify_source",
]
