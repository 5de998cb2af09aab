"""Read a table's published rows with the ADBC PostgreSQL driver: COPY binary into Arrow in C++.

Theory of operation
-------------------
When ``adbc-driver-postgresql`` is installed, the snapshot reads through it instead of
``copyreader``'s COPY csv: the driver runs ``COPY (SELECT ...) TO STDOUT (FORMAT binary)``
and decodes it into Arrow record batches without Python, several times faster than
psycopg's per-row COPY messages plus Arrow's CSV parse. Its connection joins the exported
snapshot like any other (``BEGIN ISOLATION LEVEL REPEATABLE READ`` then ``SET TRANSACTION
SNAPSHOT``, the driver in autocommit mode so it sends no ``BEGIN`` of its own).

Only columns whose binary value the driver decodes to exactly what the per-value converter
makes of the text form are read as they are (``NATIVE_TYPE_OIDS``: bool, integers, float8,
text, varchar, bytea). Every other column is read as ``format('%s', col)``, which prints
the value with its type's output function - what COPY's text form holds (``col::text``
would not: it trims ``char(n)``, spells booleans out, adds an inet's netmask) - and goes
through the same vectorised casts and per-value fallback as the csv path (``sink.bulk``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final

import pyarrow as pa
from psycopg import sql

from capture.copyreader import PageRange, select_query
from capture.errors import CaptureError, CertificateError, ReplicationConnectionLostError
from capture.tls import certificate_problem
from decoder import Relation

NATIVE_TYPE_OIDS: Final = frozenset({16, 17, 20, 21, 23, 25, 701, 1043})
"""bool, bytea, int8, int2, int4, text, float8, varchar: read as the driver decodes them."""


def adbc_available() -> bool:
    """Whether the ADBC PostgreSQL driver is installed."""
    return importlib.util.find_spec("adbc_driver_postgresql") is not None


@contextmanager
def _adbc_errors(what: str) -> Iterator[None]:
    """Translate the driver's errors as ``map_psycopg_errors`` does psycopg's, coarsely."""
    import adbc_driver_manager  # noqa: PLC0415

    try:
        yield
    except adbc_driver_manager.OperationalError as exc:
        problem = certificate_problem(exc)
        if problem is not None:
            raise CertificateError(f"{what}: {problem}") from exc
        raise ReplicationConnectionLostError(f"{what}: {exc}") from exc
    except adbc_driver_manager.Error as exc:
        raise CaptureError(f"{what}: {exc}") from exc


class AdbcSnapshotReader(AbstractContextManager["AdbcSnapshotReader"]):
    """One ADBC connection inside the exported snapshot, reading ranges of tables."""

    def __init__(self, conninfo: str, snapshot_name: str) -> None:
        import adbc_driver_postgresql.dbapi as adbc  # type: ignore[import-untyped]  # noqa: PLC0415

        with _adbc_errors("joining the exported snapshot (ADBC)"):
            self._conn: Any = adbc.connect(conninfo, autocommit=True)
            self._cursor: Any = self._conn.cursor()
            self._cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            literal = sql.Literal(snapshot_name).as_string(None)
            self._cursor.execute(f"SET TRANSACTION SNAPSHOT {literal}")

    def __exit__(self, *exc: object) -> None:
        try:
            self._cursor.close()
        finally:
            self._conn.close()

    def batches(
        self,
        relation: Relation,
        row_filter: str | None,
        *,
        only: bool,
        pages: PageRange | None,
        block_bytes: int,
        on_bytes: Callable[[int], None],
        nulls: Mapping[str, str] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The rows of one range as record batches of about ``block_bytes`` (Arrow size);
        ``nulls`` as for ``select_query``."""
        query = select_query(
            relation, row_filter, only=only, pages=pages, native=NATIVE_TYPE_OIDS, nulls=nulls
        ).as_string(None)
        with _adbc_errors(f"copying {relation.qualified_name} (ADBC)"):
            statement = self._cursor.adbc_statement
            statement.set_options(**{"adbc.postgresql.batch_size_hint_bytes": str(block_bytes)})
            self._cursor.execute(query)
            reader = self._cursor.fetch_record_batch()
            for batch in reader:
                if batch.num_rows:
                    on_bytes(batch.nbytes)
                    yield batch
