"""Benchmark workloads: the issue's mixed backlog, large single transactions, slot copies.

The backlog of issue 6 is N changes to rows of about 100 bytes: 60% INSERT, 30% UPDATE
and 10% DELETE, in transactions of 1000 changes. Transaction ``k`` inserts 600 new rows,
updates 300 rows of transaction ``k - 1`` and deletes 100 others of it (transaction 0
those of a seed written before the slot, ``create_table``), so every statement touches
exactly the intended number of rows and the change count is known in advance. It is
written by one server-side ``DO`` loop that commits after every transaction: the client
round trips would otherwise be the slowest part of preparing a benchmark.

To compare consumers on exactly the same input, the workload is written after a slot was
created (the *source slot*, never consumed), and every consumer then reads from its own
``pg_copy_logical_replication_slot`` copy of it: same start position, same WAL, same
end LSN.
"""

from __future__ import annotations

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


def create_table(
    conn: psycopg.Connection[tuple[object, ...]], table: str = TABLE, *, seed_rows: int = 600
) -> None:
    """Create the benchmark table in ``public`` and a publication ``bench`` for it.

    ``seed_rows`` rows with ids ``-seed_rows + 1 .. 0`` are the "previous transaction" of
    the backlog's first transaction; write them before creating the slot, so they are not
    part of what the consumers read.
    """
    name = sql.Identifier("public", table)
    conn.execute(_CREATE_TABLE.format(name))
    conn.execute(
        sql.SQL("INSERT INTO {} SELECT {} FROM generate_series({}, 0) g").format(
            name, sql.SQL(_ROW_VALUES), sql.Literal(1 - seed_rows)
        )
    )
    conn.execute(
        sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(PUBLICATION), name)
    )


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
    table: str = TABLE,
) -> Backlog:
    """Write the issue's mixed backlog (60% insert, 30% update, 10% delete).

    Args:
        conn: an autocommit connection (the ``DO`` loop commits by itself).
        changes: row changes to write; a multiple of ``per_transaction``.
        per_transaction: changes per transaction; a multiple of 10.
        table: the benchmark table as ``create_table`` left it, with at least
            ``per_transaction * 6 // 10`` seed rows.

    Returns:
        The counts and the WAL range; ``end_lsn`` is the insert position after the last
        commit, which is what ``--endpos`` needs.
    """
    if per_transaction % 10 or changes % per_transaction:
        raise ValueError("changes must be a multiple of per_transaction, itself of 10")
    transactions = changes // per_transaction
    inserts = per_transaction * 6 // 10
    updates = per_transaction * 3 // 10
    deletes = per_transaction - inserts - updates
    start = current_wal_lsn(conn)
    # The previous transaction's first ``updates`` rows are updated and the next
    # ``deletes`` deleted, so later transactions never touch a row twice.
    loop = sql.SQL(
        """
        DO $bench$
        DECLARE
            base bigint;
            prev bigint;
        BEGIN
            FOR k IN 0..{last} LOOP
                base := k::bigint * {inserts};
                prev := base - {inserts};
                INSERT INTO {table}
                    SELECT {values} FROM generate_series(base + 1, base + {inserts}) g;
                UPDATE {table} SET amount = amount + 1, updated_at = updated_at + interval '1 day'
                    WHERE id BETWEEN prev + 1 AND prev + {updates};
                DELETE FROM {table}
                    WHERE id BETWEEN prev + {updates} + 1 AND prev + {updates} + {deletes};
                COMMIT;
            END LOOP;
        END
        $bench$
        """
    ).format(
        last=sql.Literal(transactions - 1),
        inserts=sql.Literal(inserts),
        updates=sql.Literal(updates),
        deletes=sql.Literal(deletes),
        table=sql.Identifier("public", table),
        values=sql.SQL(_ROW_VALUES),
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
