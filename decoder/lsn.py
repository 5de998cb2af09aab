"""PostgreSQL scalar identities: LSNs, transaction ids, OIDs and protocol timestamps.

Protocol timestamps are microseconds since the PostgreSQL epoch (2000-01-01 UTC); they are
kept as integers inside the decoder and converted to ``datetime`` only at the edges.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final, NewType

Lsn = NewType("Lsn", int)
Xid = NewType("Xid", int)
Oid = NewType("Oid", int)
PgTimestamp = NewType("PgTimestamp", int)

PG_EPOCH: Final = datetime(2000, 1, 1, tzinfo=UTC)
INVALID_LSN: Final = Lsn(0)
_MAX_LSN: Final = 2**64 - 1


def format_lsn(lsn: int) -> str:
    """Format an LSN the way PostgreSQL prints it (``LSN_FORMAT_ARGS``): ``16/B374D848``."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> Lsn:
    """Parse PostgreSQL's ``X/X`` LSN text form.

    Raises:
        ValueError: the text is not two hexadecimal halves separated by ``/``.
    """
    high, sep, low = text.strip().partition("/")
    if not sep or not high or not low or len(high) > 8 or len(low) > 8:
        raise ValueError(f"invalid LSN {text!r}; expected the form 16/B374D848")
    try:
        return Lsn((int(high, 16) << 32) | int(low, 16))
    except ValueError:
        raise ValueError(f"invalid LSN {text!r}; expected the form 16/B374D848") from None


def pg_timestamp_to_datetime(ts: int) -> datetime:
    """Convert microseconds since 2000-01-01 UTC into an aware ``datetime``."""
    return PG_EPOCH + timedelta(microseconds=ts)


def datetime_to_pg_timestamp(dt: datetime) -> PgTimestamp:
    """Convert an aware ``datetime`` into microseconds since 2000-01-01 UTC."""
    delta = dt - PG_EPOCH
    return PgTimestamp((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)
