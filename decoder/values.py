"""Column bytes to Python values through psycopg's own loaders, keyed by type OID.

Theory of operation: pgoutput sends each column either as text (the type's output
function) or, with ``binary true``, in the type's binary send format; both are exactly what
psycopg's loaders read from a query result, so a ``Transformer`` over psycopg's global
adapters converts them. Types Delta has no faithful equivalent for are loaded as their
PostgreSQL text form instead of a Python object: json/jsonb (a parsed dict would lose
number formatting and key order), interval (Python's ``timedelta`` cannot hold months)
and their arrays. Unknown OIDs (enums, domains over text, extension types) load as text in
text mode and raise in binary mode, where no generic reading exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from psycopg import adapt, postgres
from psycopg.pq import Format
from psycopg.types.string import TextBinaryLoader, TextLoader

from decoder.errors import MalformedMessageError
from decoder.messages import ColumnKind, Relation, TupleData


class _UnchangedToast:
    """Marker for a TOASTed column whose value the server did not send."""

    _instance: _UnchangedToast | None = None

    def __new__(cls) -> _UnchangedToast:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST: Final = _UnchangedToast()


class _JsonbBinaryAsText(adapt.Loader):
    """jsonb binary format is a version byte (1) followed by the text form."""

    format = Format.BINARY

    def load(self, data: adapt.Buffer) -> str:
        raw = bytes(data)
        if not raw or raw[0] != 1:
            raise ValueError("unknown jsonb binary format version")
        return raw[1:].decode("utf-8")


def _text_kept_adapters() -> adapt.AdaptersMap:
    adapters = adapt.AdaptersMap(postgres.adapters)
    for name in ("json", "jsonb", "interval"):
        info = postgres.types[name]
        adapters.register_loader(info.oid, TextLoader)
        adapters.register_loader(info.array_oid, TextLoader)
        if name == "json":
            adapters.register_loader(info.oid, TextBinaryLoader)
        elif name == "jsonb":
            adapters.register_loader(info.oid, _JsonbBinaryAsText)
    return adapters


_ADAPTERS: Final = _text_kept_adapters()
TEXT_KEPT_TYPE_OIDS: Final = frozenset(
    oid
    for name in ("json", "jsonb", "interval")
    for oid in (postgres.types[name].oid, postgres.types[name].array_oid)
)


class ValueDecoder:
    """Decodes TupleData of any relation; caches one loader per (type OID, format)."""

    def __init__(self) -> None:
        self._transformer = adapt.Transformer(_context_adapters())
        self._loaders: dict[tuple[int, Format], Callable[[adapt.Buffer], object]] = {}

    def _loader(self, type_oid: int, fmt: Format) -> Callable[[adapt.Buffer], object]:
        key = (type_oid, fmt)
        load = self._loaders.get(key)
        if load is None:
            load = self._transformer.get_loader(type_oid, fmt).load
            self._loaders[key] = load
        return load

    def decode_value(self, type_oid: int, kind: ColumnKind, data: bytes | None) -> object:
        """Decode one column value; NULL gives None and unchanged TOAST the marker."""
        if kind is ColumnKind.NULL:
            return None
        if kind is ColumnKind.UNCHANGED_TOAST:
            return UNCHANGED_TOAST
        assert data is not None
        fmt = Format.BINARY if kind is ColumnKind.BINARY else Format.TEXT
        return self._loader(type_oid, fmt)(data)

    def decode_tuple(self, relation: Relation, data: TupleData) -> tuple[object, ...]:
        """Decode every column of ``data`` with the types of ``relation``.

        Raises:
            MalformedMessageError: the tuple has another column count than the relation.
        """
        if len(data.values) != len(relation.columns):
            raise MalformedMessageError(
                f"tuple has {len(data.values)} columns but relation {relation.qualified_name} "
                f"has {len(relation.columns)}",
                offset=0,
                message_type="TUPLE DATA",
            )
        return tuple(
            self.decode_value(column.type_oid, value.kind, value.data)
            for column, value in zip(relation.columns, data.values, strict=True)
        )


class _AdaptersContext:
    """The minimal ``AdaptContext`` a Transformer needs: adapters and no connection."""

    adapters = _ADAPTERS
    connection = None


def _context_adapters() -> adapt.AdaptContext:
    return _AdaptersContext()  # type: ignore[return-value]


_DEFAULT_DECODER: Final = ValueDecoder()


def decode_tuple(relation: Relation, data: TupleData) -> tuple[object, ...]:
    """Decode ``data`` with a process-wide ``ValueDecoder`` (see its docstring)."""
    return _DEFAULT_DECODER.decode_tuple(relation, data)
