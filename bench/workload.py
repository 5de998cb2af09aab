"""Benchmark workloads: the issue's mixed backlog, large single transactions, slot copies.

The backlog of issue 6 is N changes to rows of about 100 bytes: 60% INSERT, 30% UPDATE
and 10% DELETE, in transactions of 1000 changes. Transaction ``k`` inserts 600 new rows,
updates 300 rows of transaction ``k - 1`` and deletes 100 others of it (transaction 0
those of a seed written before the slot, ``create_table``), so every statement touches
exactly the intended number of rows and the change count is known in advance. It is
written by one server-side ``DO`` loop that commits after every transaction: the client
round trips would otherwise be the slowest part of preparing a benchmark.

One transaction is one call of a server-side function (``TRANSACTION_FUNCTION``, created
with the tables), so the backlog's loop and a client writing the same transactions one at
a time (``bench.lag``) share one definition of what transaction ``k`` does. Spread over
several tables (``bench.tables``), transaction ``k`` goes to table ``k mod N`` and is that
table's transaction ``k div N``. A table without seed rows (``seeded=False``) gets a first
transaction that updates and deletes rows it inserted itself (the first 30% and the last
10% of them), so the mix and the change count stay exact and a fresh Delta lake ends with
the source's rows.

To compare consumers on exactly the same input, the workload is written after a slot was
created (the *source slot*, never consumed), and every consumer then reads from its own
``pg_copy_logical_replication_slot`` copy of it: same start position, same WAL, same
end LSN.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import psycopg
from psycopg import sql

from capture.slots import current_wal_lsn
from decoder import Lsn

TABLE: Final = "bench_rows"
PUBLICATION: Final = "bench"

# About 100 bytes per row on the wire: a bigint key, an int, a numeric, a timestamptz and
# a 32-character text, each with the 5 bytes TupleData spends per column.
_CREATE_TABLE: Final = sql.SQL(
    "CREATE TABLE {} (id bigint PRIMARY KEY, account int NOT NULL, amount numeric(12, 2), "
    "updated_at timestamptz NOT NULL, note text)"
)
_ROW_VALUES: Final = (
    "g, (g % 1000)::int, (g % 100000) / 100.0, "
    "'2025-01-01'::timestamptz + g * interval '1 second', md5(g::text)"
)
TRANSACTION_FUNCTION: Final = "bench_mixed_transaction"
# Transaction k of a table: inserts keys k * inserts + 1 .. (k + 1) * inserts, updates the
# first `updates` keys of transaction k - 1 and deletes the `deletes` after them. The first
# transaction of an unseeded table updates its own first keys and deletes its own last ones,
# which its second transaction's deletes (keys updates + 1 ..) never reach again. Returns
# the WAL insert position after its statements: inside the transaction, so only the
# transaction's own commit ends past it.
_CREATE_TRANSACTION_FUNCTION: Final = sql.SQL(
    """
    CREATE OR REPLACE FUNCTION {function}(
        target regclass, k bigint, inserts int, updates int, deletes int, seeded boolean
    ) RETURNS pg_lsn LANGUAGE plpgsql AS $bench$
    DECLARE
        base bigint := k * inserts;
        updated bigint := base - inserts;
        deleted bigint := base - inserts + updates;
    BEGIN
        IF k = 0 AND NOT seeded THEN
            updated := 0;
            deleted := inserts - deletes;
        END IF;
        EXECUTE format(
            'INSERT INTO %s SELECT {values} FROM generate_series($1 + 1, $1 + $2) g', target
        ) USING base, inserts;
        EXECUTE format(
            'UPDATE %s SET amount = amount + 1, updated_at = updated_at + interval ''1 day'' '
            'WHERE id BETWEEN $1 + 1 AND $1 + $2', target
        ) USING updated, updates;
        EXECUTE format('DELETE FROM %s WHERE id BETWEEN $1 + 1 AND $1 + $2', target)
            USING deleted, deletes;
        RETURN pg_current_wal_insert_lsn();
    END
    $bench$
    """
)


@dataclass(frozen=True, slots=True)
class Backlog:
    """What a workload wrote: the change counts and the WAL range that holds them."""

    inserts: int
    updates: int
    deletes: int
    transactions: int
    start_lsn: Lsn
    end_lsn: Lsn

    @property
    def changes(self) -> int:
        """Row changes in the backlog (what a counting sink must see)."""
        return self.inserts + self.updates + self.deletes

    @property
    def wal_bytes(self) -> int:
        """WAL written between the start and the end of the workload."""
        return self.end_lsn - self.start_lsn


def table_names(count: int) -> list[str]:
    """``count`` benchmark table names: ``bench_rows_0000``, ``bench_rows_0001``, ..."""
    return [f"{TABLE}_{number:04d}" for number in range(count)]


def create_table(
    conn: psycopg.Connection[tuple[object, ...]], table: str = TABLE, *, seed_rows: int = 600
) -> None:
    """Create the benchmark table in ``public`` and a publication ``bench`` for it.

    ``seed_rows`` rows with ids ``-seed_rows + 1 .. 0`` are the "previous transaction" of
    the backlog's first transaction; write them before creating the slot, so they are not
    part of what the consumers read.
    """
    create_tables(conn, [table], seed_rows=seed_rows)


def create_tables(
    conn: psycopg.Connection[tuple[object, ...]], tables: Sequence[str], *, seed_rows: int
) -> None:
    """``create_table`` for each of ``tables``, all in one publication ``bench``, and the
    function that writes one transaction of the mix (``TRANSACTION_FUNCTION``)."""
    conn.execute(
        _CREATE_TRANSACTION_FUNCTION.format(
            function=sql.Identifier(TRANSACTION_FUNCTION),
            # Inside a quoted format() string: quotes doubled, % escaped.
            values=sql.SQL(_ROW_VALUES.replace("'", "''").replace("%", "%%")),
        )
    )
    names = [sql.Identifier("public", table) for table in tables]
    for name in names:
        conn.execute(_CREATE_TABLE.format(name))
        if seed_rows:
            conn.execute(
                sql.SQL("INSERT INTO {} SELECT {} FROM generate_series({}, 0) g").format(
                    name, sql.SQL(_ROW_VALUES), sql.Literal(1 - seed_rows)
                )
            )
    conn.execute(
        sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
            sql.Identifier(PUBLICATION), sql.SQL(", ").join(names)
        )
    )


def mixed_sizes(per_transaction: int) -> tuple[int, int, int]:
    """Inserts, updates and deletes of one transaction of ``per_transaction`` changes.

    Raises:
        ValueError: ``per_transaction`` is not a multiple of 10.
    """
    if per_transaction <= 0 or per_transaction % 10:
        raise ValueError("per_transaction must be a positive multiple of 10")
    inserts = per_transaction * 6 // 10
    updates = per_transaction * 3 // 10
    return inserts, updates, per_transaction - inserts - updates


def create_source_slot(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> None:
    """Create the pgoutput slot that every consumer copies; it is never read itself."""
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))


def copy_slot(conn: psycopg.Connection[tuple[object, ...]], source: str, target: str) -> None:
    """Make ``target`` a fresh copy of ``source``: same position, not yet consumed."""
    conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        (target,),
    )
    conn.execute("SELECT pg_copy_logical_replication_slot(%s, %s)", (source, target))


def drop_slot(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> None:
    """Drop ``slot`` if it exists, so a consumed copy does not hold WAL."""
    conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    )


def write_mixed_backlog(
    conn: psycopg.Connection[tuple[object, ...]],
    *,
    changes: int,
    per_transaction: int = 1000,
    tables: Sequence[str] = (TABLE,),
    seeded: bool = True,
) -> Backlog:
    """Write the issue's mixed backlog (60% insert, 30% update, 10% delete).

    Args:
        conn: an autocommit connection (the ``DO`` loop commits by itself).
        changes: row changes to write; a multiple of ``per_transaction``.
        per_transaction: changes per transaction; a multiple of 10.
        tables: the benchmark tables as ``create_tables`` left them; transaction ``k``
            goes to ``tables[k % len(tables)]`` (round robin, so every table gets the
            same number of transactions, give or take one).
        seeded: every table has at least ``per_transaction * 6 // 10`` seed rows; when
            false, none (a table's first transaction then works on its own rows).

    Returns:
        The counts and the WAL range; ``end_lsn`` is the insert position after the last
        commit, which is what ``--endpos`` needs.
    """
    inserts, updates, deletes = mixed_sizes(per_transaction)
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
        BEGIN
            FOR k IN 0..{last} LOOP
                PERFORM {function}(
                    tables[k % n + 1], (k / n)::bigint, {inserts}, {updates}, {deletes}, {seeded}
                );
                COMMIT;
            END LOOP;
        END
        $bench$
        """
    ).format(
        tables=sql.SQL(", ").join(sql.Literal(f"public.{table}") for table in tables),
        last=sql.Literal(transactions - 1),
        function=sql.Identifier(TRANSACTION_FUNCTION),
        inserts=sql.Literal(inserts),
        updates=sql.Literal(updates),
        deletes=sql.Literal(deletes),
        seeded=sql.Literal(seeded),
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


def write_single_transaction(
    conn: psycopg.Connection[tuple[object, ...]], *, rows: int, table: str = TABLE
) -> Backlog:
    """Insert ``rows`` rows of the benchmark shape in one transaction."""
    start = current_wal_lsn(conn)
    conn.execute(
        sql.SQL("INSERT INTO {} SELECT {} FROM generate_series(1, {}) g").format(
            sql.Identifier("public", table), sql.SQL(_ROW_VALUES), sql.Literal(rows)
        )
    )
    return Backlog(
        inserts=rows,
        updates=0,
        deletes=0,
        transactions=1,
        start_lsn=start,
        end_lsn=current_wal_lsn(conn),
    )
