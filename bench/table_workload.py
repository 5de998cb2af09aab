"""The workload mixes of ``bench tables`` (issue 40): insert-only, 70/30, and issue 31's.

A mix says what one transaction of ``--transaction`` changes does to its table and how the
transactions are spread over the tables:

* ``insert-only``: inserts of new keys only; every transaction goes to a table drawn at
  random (uniformly, a fixed seed, so every run writes the same backlog);
* ``70-30``: 70% inserts of new keys, 30% updates of rows the table's previous transaction
  inserted (a table's first transaction updates rows it inserted itself), tables drawn at
  random as above (issue 40's mixed backlog);
* ``60-30-10``: issue 31's backlog, the default before issue 40: 60% inserts, 30% updates,
  10% deletes, round robin over the tables (``bench.workload``).

Every transaction is one call of ``bench.workload``'s server-side function, so the change
counts are exact and a fresh lake ends with the source's rows. With tables drawn at random
a table may get no transaction at all (at 200 tables and 1,000 transactions about one);
it then has no Delta table either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import psycopg
from psycopg import sql

from bench.lag import SteadyWriter
from bench.workload import TRANSACTION_FUNCTION, Backlog
from capture.slots import current_wal_lsn

SPREAD_SEED: Final = 0.42
"""``setseed`` of the random spread: the same tables in every run."""


@dataclass(frozen=True, slots=True)
class Mix:
    """What a transaction does (percentages of its changes) and how tables are chosen."""

    name: str
    inserts: int
    updates: int
    deletes: int
    random_spread: bool
    description: str

    def sizes(self, per_transaction: int) -> tuple[int, int, int]:
        """Inserts, updates and deletes of one transaction of ``per_transaction`` changes.

        Raises:
            ValueError: ``per_transaction`` does not split exactly.
        """
        if per_transaction <= 0 or (per_transaction * self.updates) % 100:
            raise ValueError(f"{per_transaction} changes do not split as {self.name}")
        updates = per_transaction * self.updates // 100
        deletes = per_transaction * self.deletes // 100
        if (per_transaction * self.deletes) % 100:
            raise ValueError(f"{per_transaction} changes do not split as {self.name}")
        return per_transaction - updates - deletes, updates, deletes


MIXES: Final = {
    mix.name: mix
    for mix in (
        Mix("insert-only", 100, 0, 0, True, "100% insert, tables drawn at random"),
        Mix("70-30", 70, 30, 0, True, "70% insert, 30% update, tables drawn at random"),
        Mix("60-30-10", 60, 30, 10, False, "60% insert, 30% update, 10% delete, round robin"),
    )
}
"""The mixes by name."""


def write_backlog(
    conn: psycopg.Connection[tuple[object, ...]],
    mix: Mix,
    *,
    changes: int,
    per_transaction: int,
    tables: Sequence[str],
) -> Backlog:
    """Write ``changes`` changes of ``mix`` into ``tables`` (created by
    ``bench.workload.create_tables`` without seed rows), one server-side loop that commits
    after every transaction.

    Raises:
        ValueError: ``changes`` is not a multiple of ``per_transaction``.
    """
    inserts, updates, deletes = mix.sizes(per_transaction)
    if changes % per_transaction:
        raise ValueError("changes must be a multiple of per_transaction")
    transactions = changes // per_transaction
    start = current_wal_lsn(conn)
    loop = sql.SQL(
        """
        DO $bench$
        DECLARE
            tables regclass[] := ARRAY[{tables}]::regclass[];
            n int := cardinality(tables);
            done bigint[] := array_fill(0::bigint, ARRAY[n]);
            t int;
        BEGIN
            PERFORM setseed({seed});
            FOR k IN 0..{last} LOOP
                IF {random} THEN
                    t := floor(random() * n)::int + 1;
                ELSE
                    t := k % n + 1;
                END IF;
                PERFORM {function}(tables[t], done[t], {inserts}, {updates}, {deletes}, false);
                done[t] := done[t] + 1;
                COMMIT;
            END LOOP;
        END
        $bench$
        """
    ).format(
        tables=sql.SQL(", ").join(sql.Literal(f"public.{table}") for table in tables),
        seed=sql.Literal(SPREAD_SEED),
        last=sql.Literal(transactions - 1),
        random=sql.Literal(mix.random_spread),
        function=sql.Identifier(TRANSACTION_FUNCTION),
        inserts=sql.Literal(inserts),
        updates=sql.Literal(updates),
        deletes=sql.Literal(deletes),
    )
    conn.execute(loop)
    return Backlog(
        inserts=inserts * transactions,
        updates=updates * transactions,
        deletes=deletes * transactions,
        transactions=transactions,
        start_lsn=start,
        end_lsn=current_wal_lsn(conn),
    )


class MixWriter(SteadyWriter):
    """``bench.lag.SteadyWriter`` (round robin, on a fixed schedule) writing ``mix``'s
    transactions into tables without seed rows."""

    def __init__(self, dsn: str, per_transaction: int, tables: Sequence[str], mix: Mix) -> None:
        super().__init__(dsn, per_transaction, tables, seeded=False)
        self.inserts, self.updates, self.deletes = mix.sizes(per_transaction)
