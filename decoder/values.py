"""Column bytes to Python values through psycopg's own loaders, keyed by type OID.

Theory of operation: pgoutput sends each column either as text (the type's output
function) or, with ``binary true``, in the type's binary send format; both are exactly what
psycopg's loaders read from a query result, so a ``Transformer`` over psycopg's global
adapters converts them. Types Delta has no faithful equivalent for are loaded as their
PostgreSQL text form instead of a Python object: json/jsonb (a parsed dict would lose
number formatting and key order), interval (Python's ``timedelta`` cannot hold months)
and their arrays. Unknown OIDs (enums, domains, extension types) load as text in text
mode and as raw ``bytes`` in binary mode (psycopg's fallback), because no generic reading of
a user type's binary form exists; an enum's binary form is its label's bytes. Streams with
such columns should use text mode.

Binary and text mode give identical values. For the text-kept types that needs two
conversions of our own: a binary jsonb value is a version byte before the text, and a
binary interval (microseconds, days, months) is rendered the way PostgreSQL's
``interval_out`` prints it with the default ``IntervalStyle = postgres``
(``1 year 2 mons 3 days 04:05:06.5``), which is what a text-mode stream carries when the
walsender runs with that default. Arrays of the text-kept types load as lists of those
strings in both modes (psycopg's array loaders delegate to the element loaders).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Final

from psycopg import adapt, postgres
from psycopg.abc import AdaptContext
from psycopg.pq import Format
from psycopg.types.string import TextBinaryLoader, TextLoader

from decoder.errors import MalformedMessageError
from decoder.messages import ColumnKind, Relation, TupleData
from decoder.native import COMPILED
from decoder.textforms import Reader, UnknownBinaryFormatError, format_interval
from decoder.tupledata import walk_tuple, walk_tuple_reference
from decoder.usertypes import TypeLookup, UserTypeForms


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


_INTERVAL_BINARY: Final = struct.Struct(">qii")
_Load = Callable[[adapt.Buffer], object]


class _IntervalBinaryAsText(adapt.Loader):
    """Binary interval (int64 microseconds, int32 days, int32 months) to its text form."""

    format = Format.BINARY

    def load(self, data: adapt.Buffer) -> str:
        microseconds, days, months = _INTERVAL_BINARY.unpack(bytes(data))
        return format_interval(microseconds, days, months)


def _text_kept_adapters() -> adapt.AdaptersMap:
    adapters = adapt.AdaptersMap(postgres.adapters)
    # Only the element types are registered: psycopg's array loaders look their element
    # loader up in this map, so arrays become lists of the text forms in both formats.
    adapters.register_loader(postgres.types["json"].oid, TextLoader)
    adapters.register_loader(postgres.types["json"].oid, TextBinaryLoader)
    adapters.register_loader(postgres.types["jsonb"].oid, TextLoader)
    adapters.register_loader(postgres.types["jsonb"].oid, _JsonbBinaryAsText)
    adapters.register_loader(postgres.types["interval"].oid, TextLoader)
    adapters.register_loader(postgres.types["interval"].oid, _IntervalBinaryAsText)
    return adapters


_ADAPTERS: Final = _text_kept_adapters()
TEXT_KEPT_TYPE_OIDS: Final = frozenset(
    oid
    for name in ("json", "jsonb", "interval")
    for oid in (postgres.types[name].oid, postgres.types[name].array_oid)
)


class ValueDecoder:
    """Decodes TupleData of any relation; caches one loader per (type OID, format).

    Args:
        types: describes type OIDs psycopg has no binary loader for (user types) from the
            source catalog; their binary values then load as PostgreSQL's text form
            (``decoder.usertypes``). Without it only builtin types are read that way, and
            a user type's binary value raises ``UnknownBinaryFormatError``.
    """

    def __init__(self, types: TypeLookup | None = None) -> None:
        self._transformer = adapt.Transformer(_context_adapters())
        self._forms = UserTypeForms(types)
        self._loaders: dict[tuple[int, Format], _Load] = {}
        self._cached: tuple[Relation | None, list[_Load], list[_Load]] = (None, [], [])

    def _loader(self, type_oid: int, fmt: Format) -> _Load:
        key = (type_oid, fmt)
        load = self._loaders.get(key)
        if load is None:
            text_form = self.binary_text_reader(type_oid) if fmt is Format.BINARY else None
            if text_form is not None:
                load = _bytes_reader(text_form)
            else:
                load = self._transformer.get_loader(type_oid, fmt).load
            self._loaders[key] = load
        return load

    def binary_text_reader(self, type_oid: int) -> Reader | None:
        """PostgreSQL's text form of ``type_oid``'s binary values, for a type psycopg has
        no binary loader for (enums, domains, composites, their arrays, extension types);
        None when psycopg loads the type.

        The first call for a user type describes it through ``types`` (I/O in the
        caller's lookup); later calls are a dictionary hit. The reader raises
        ``UnknownBinaryFormatError`` when the type has no known binary layout.
        """
        if _ADAPTERS.get_loader(type_oid, Format.BINARY) is not None:
            return None
        return self._forms.reader(type_oid)

    def loader(self, type_oid: int, kind: ColumnKind) -> Callable[[bytes], object]:
        """The function loading ``type_oid``'s values sent as ``kind`` (TEXT or BINARY).

        Cached per (type OID, format) for this decoder: value conversion's one loader
        cache (``sink.convert.column_converter`` resolves its converters through it).
        """
        return self._loader(type_oid, Format.BINARY if kind is ColumnKind.BINARY else Format.TEXT)

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
        wire = data.wire
        if wire is not None:
            return self._decode_wire(relation, *wire)
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

    def _relation_loaders(self, relation: Relation) -> tuple[list[_Load], list[_Load]]:
        """The text and binary loaders of each column of ``relation`` (last one cached)."""
        # One attribute holds the relation and its loaders together, so a decoder shared
        # by two threads never pairs a relation with another relation's loaders.
        cached_relation, text_loaders, binary_loaders = self._cached
        if relation is cached_relation:
            return text_loaders, binary_loaders
        oids = [column.type_oid for column in relation.columns]
        text_loaders = [self._loader(oid, Format.TEXT) for oid in oids]
        binary_loaders = [self._loader(oid, Format.BINARY) for oid in oids]
        self._cached = (relation, text_loaders, binary_loaders)
        return text_loaders, binary_loaders

    def _decode_wire(self, relation: Relation, buf: bytes, start: int) -> tuple[object, ...]:
        """Decode a TupleData part straight from the message bytes (one pass, no objects).

        The part was validated when its message arrived; a damaged one (a damaged spill
        file) still fails as ``MalformedMessageError``.
        """
        text_loaders, binary_loaders = self._relation_loaders(relation)
        count = (buf[start] << 8) | buf[start + 1]
        if count != len(text_loaders):
            raise MalformedMessageError(
                f"tuple has {count} columns but relation {relation.qualified_name} "
                f"has {len(text_loaders)}",
                offset=0,
                message_type="TUPLE DATA",
            )
        values: list[object] = []
        try:
            # load_tuple_wire's walk, called directly: the column count is checked above.
            walk_tuple(buf, start, values, text_loaders, binary_loaders, None, UNCHANGED_TOAST)
        except UnknownBinaryFormatError:
            raise  # the bytes are fine; the type cannot be read
        except (IndexError, ValueError, struct.error):
            raise MalformedMessageError(
                "a spooled TupleData part is damaged", offset=start, message_type="TUPLE DATA"
            ) from None
        return tuple(values)


def load_tuple_wire_reference(
    buf: bytes,
    start: int,
    text_loaders: Sequence[Callable[[bytes], object]],
    binary_loaders: Sequence[Callable[[bytes], object]],
) -> list[object]:
    """Convert a TupleData part straight from its message bytes, in one pass.

    Column ``i`` sent as text goes through ``text_loaders[i]``, sent as binary through
    ``binary_loaders[i]``; NULL gives None and unchanged TOAST ``UNCHANGED_TOAST``. This
    is the hot path of every consumer of ``TupleData.wire``: no ``ColumnValue`` objects.

    Args:
        buf: the message bytes (``TupleData.wire[0]``).
        start: offset of the TupleData part (``TupleData.wire[1]``).
        text_loaders: one loader per column of the relation, for text values.
        binary_loaders: the same for binary values.

    Raises:
        ValueError: the column count differs from the loaders', or the bytes do not hold
            the tuple (``decoder.tupledata.TupleDataError``).
        IndexError: the bytes end inside the column count.
        Exception: whatever a loader raises.
    """
    count = (buf[start] << 8) | buf[start + 1]
    if count != len(text_loaders):
        raise ValueError(f"tuple has {count} columns, not {len(text_loaders)}")
    values: list[object] = []
    walk_tuple_reference(buf, start, values, text_loaders, binary_loaders, None, UNCHANGED_TOAST)
    return values


def _load_tuple_wire_compiled(
    buf: bytes,
    start: int,
    text_loaders: Sequence[Callable[[bytes], object]],
    binary_loaders: Sequence[Callable[[bytes], object]],
) -> list[object]:
    """``load_tuple_wire_reference`` in one C call; the reference does what C gives up on."""
    assert COMPILED is not None
    values: list[object] | None = COMPILED.load(
        buf, start, text_loaders, binary_loaders, None, UNCHANGED_TOAST
    )
    if values is None:
        return load_tuple_wire_reference(buf, start, text_loaders, binary_loaders)
    return values


load_tuple_wire: Final = (
    load_tuple_wire_reference if COMPILED is None else _load_tuple_wire_compiled
)
"""Convert a TupleData part straight from its message bytes: ``load_tuple_wire_reference``,
in C when the kernel was built (``decoder.native``)."""


def _bytes_reader(read: Reader) -> _Load:
    """A ``Reader`` as a loader: psycopg hands loaders a buffer, not always ``bytes``."""

    def load(data: adapt.Buffer) -> object:
        return read(data if isinstance(data, bytes) else bytes(data))

    return load


class _AdaptersContext:
    """The minimal ``AdaptContext`` a Transformer needs: adapters and no connection."""

    @property
    def adapters(self) -> adapt.AdaptersMap:
        return _ADAPTERS

    @property
    def connection(self) -> None:
        return None


def _context_adapters() -> AdaptContext:
    return _AdaptersContext()


_DEFAULT_DECODER: Final = ValueDecoder()


def decode_tuple(relation: Relation, data: TupleData) -> tuple[object, ...]:
    """Decode ``data`` with a process-wide ``ValueDecoder`` (see its docstring)."""
    return _DEFAULT_DECODER.decode_tuple(relation, data)
