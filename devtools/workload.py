"""The demo schema and a seeded live workload, shared by ``wal2delta demo`` and the tests.

Three tables cover what trips CDC pipelines:

* ``shop.customers``: plain primary key, NULL-able columns, updates and deletes;
* ``shop.order_lines``: a composite primary key, with updates that change the key;
* ``shop.documents``: a large ``text`` column that PostgreSQL TOASTs out of line, with
  updates that leave it unchanged (pgoutput then sends an "unchanged TOAST" marker);
* ``shop.measurements``: numeric, timestamptz, uuid, jsonb, bytea, arrays and NULLs.

Every round runs multi-statement transactions plus one that is rolled back, so the Delta
tables must end up equal to the source tables without any of the rolled-back rows.
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import psycopg

DEMO_TABLES = ("shop.customers", "shop.order_lines", "shop.documents", "shop.measurements")

SCHEMA_SQL = """
CREATE SCHEMA IF NOT EXISTS shop;
CREATE TABLE IF NOT EXISTS shop.customers (
    id bigint PRIMARY KEY,
    name text NOT NULL,
    email text,
    vip boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS shop.order_lines (
    order_id integer NOT NULL,
    line_no smallint NOT NULL,
    sku varchar(32) NOT NULL,
    quantity integer NOT NULL,
    unit_price numeric(10, 2) NOT NULL,
    PRIMARY KEY (order_id, line_no)
);
CREATE TABLE IF NOT EXISTS shop.documents (
    id integer PRIMARY KEY,
    title text NOT NULL,
    body text NOT NULL,
    revision integer NOT NULL
);
ALTER TABLE shop.documents ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE IF NOT EXISTS shop.measurements (
    id uuid PRIMARY KEY,
    reading numeric(14, 4),
    ratio double precision,
    taken_at timestamptz,
    taken_on date,
    attributes jsonb,
    raw bytea,
    tags text[],
    samples integer[],
    note text
);
"""


def create_schema(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Create the demo tables (idempotent)."""
    conn.execute(SCHEMA_SQL)


class Workload:
    """A seeded generator of demo transactions; the same seed gives the same changes."""

    def __init__(self, seed: int = 42) -> None:
        self.rng = random.Random(seed)
        self.next_customer = 1
        self.next_order = 1
        self.next_document = 1
        self.committed = 0
        self.rolled_back = 0

    def _text(self, size: int) -> str:
        # Random hex does not compress, so a large value really is stored out of line.
        return self.rng.randbytes(size // 2).hex()

    def _customer(self, cur: psycopg.Cursor[tuple[object, ...]]) -> None:
        cid = self.next_customer
        self.next_customer += 1
        email = None if self.rng.random() < 0.2 else f"c{cid}@example.com"
        created = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(
            seconds=self.rng.randrange(10**8), microseconds=self.rng.randrange(10**6)
        )
        cur.execute(
            "INSERT INTO shop.customers (id, name, email, vip, created_at) VALUES (%s,%s,%s,%s,%s)",
            (cid, f'Customer {cid} \u00e9\u00e8 "q"', email, self.rng.random() < 0.1, created),
        )

    def _order(self, cur: psycopg.Cursor[tuple[object, ...]]) -> None:
        oid = self.next_order
        self.next_order += 1
        for line in range(1, self.rng.randint(2, 5)):
            cur.execute(
                "INSERT INTO shop.order_lines VALUES (%s, %s, %s, %s, %s)",
                (
                    oid,
                    line,
                    f"SKU-{self.rng.randrange(1000):04d}",
                    self.rng.randint(1, 9),
                    Decimal(self.rng.randrange(1, 100000)) / 100,
                ),
            )

    def _document(self, cur: psycopg.Cursor[tuple[object, ...]]) -> None:
        did = self.next_document
        self.next_document += 1
        cur.execute(
            "INSERT INTO shop.documents VALUES (%s, %s, %s, 1)",
            (did, f"Document {did}", self._text(self.rng.randint(4000, 20000))),
        )

    def _measurement(self, cur: psycopg.Cursor[tuple[object, ...]]) -> None:
        rng = self.rng
        nullable = rng.random() < 0.25
        cur.execute(
            "INSERT INTO shop.measurements VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (
                uuid.UUID(int=rng.getrandbits(128), version=4),
                None if nullable else Decimal(rng.randrange(-(10**9), 10**9)) / 10000,
                None if nullable else rng.uniform(-1, 1),
                datetime(2025, 6, 1, tzinfo=UTC) + timedelta(microseconds=rng.randrange(10**13)),
                (datetime(2025, 6, 1) + timedelta(days=rng.randrange(365))).date(),
                None if nullable else json.dumps({"k": rng.randrange(100), "v": [1, "x", None]}),
                None if nullable else rng.randbytes(rng.randint(0, 64)),
                None if nullable else [f"t{rng.randrange(9)}", "with space", 'quote"d'],
                None if nullable else [rng.randrange(-5, 5) for _ in range(rng.randint(0, 4))],
                None if rng.random() < 0.5 else "note",
            ),
        )

    def _mutate(self, cur: psycopg.Cursor[tuple[object, ...]]) -> None:
        rng = self.rng
        cur.execute(
            "UPDATE shop.customers SET email = %s, vip = NOT vip WHERE id = %s",
            (
                None if rng.random() < 0.3 else f"new{rng.randrange(999)}@example.com",
                rng.randrange(1, self.next_customer),
            ),
        )
        # A key change: the line moves to another line number within its order.
        cur.execute(
            """UPDATE shop.order_lines SET line_no = line_no + 100, quantity = quantity + 1
               WHERE (order_id, line_no) IN (
                   SELECT order_id, line_no FROM shop.order_lines
                   WHERE order_id = %s AND line_no < 100 LIMIT 1)""",
            (rng.randrange(1, self.next_order),),
        )
        # The TOASTed body is left unchanged: pgoutput sends 'u' for it.
        cur.execute(
            "UPDATE shop.documents SET title = title || '+', revision = revision + 1 WHERE id = %s",
            (rng.randrange(1, self.next_document),),
        )
        if rng.random() < 0.3:
            cur.execute(
                "UPDATE shop.documents SET body = %s WHERE id = %s",
                (self._text(6000), rng.randrange(1, self.next_document)),
            )
        cur.execute(
            "UPDATE shop.measurements SET reading = reading * 2, note = NULL "
            "WHERE id = (SELECT id FROM shop.measurements ORDER BY id LIMIT 1 OFFSET %s)",
            (rng.randrange(5),),
        )
        if rng.random() < 0.5:
            cur.execute(
                "DELETE FROM shop.customers WHERE id = %s", (rng.randrange(1, self.next_customer),)
            )
            cur.execute(
                "DELETE FROM shop.order_lines WHERE order_id = %s",
                (rng.randrange(1, self.next_order),),
            )
            cur.execute(
                "DELETE FROM shop.measurements WHERE id = "
                "(SELECT id FROM shop.measurements ORDER BY id DESC LIMIT 1)"
            )

    def run_round(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        """One round: two committed multi-statement transactions and one rolled back."""
        with conn.transaction(), conn.cursor() as cur:
            for _ in range(3):
                self._customer(cur)
                self._measurement(cur)
            self._order(cur)
            self._document(cur)
        self.committed += 1
        with conn.transaction(), conn.cursor() as cur:
            self._mutate(cur)
        self.committed += 1
        with conn.cursor() as cur:
            try:
                with conn.transaction():
                    self._customer(cur)
                    self._order(cur)
                    cur.execute("UPDATE shop.documents SET title = 'never' WHERE id = 1")
                    raise _DeliberateRollbackError
            except _DeliberateRollbackError:
                self.rolled_back += 1


class _DeliberateRollbackError(Exception):
    """Raised inside a transaction block to roll it back on purpose."""
