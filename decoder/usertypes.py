"""User-defined types in binary mode: their text form from the catalog's description.

Theory of operation
-------------------
pgoutput sends a column of an enum, a domain, a composite type or an array of them in
that type's send format when ``binary true`` was requested, and psycopg has no loader for
those OIDs. The sink stores such columns as PostgreSQL's text form (what text mode
sends), so the bytes must be printed as the type's output function would. The layouts are
generic; only *which* layout a type OID has is specific to a database, and that comes from
its catalog:

* **enum** (``typtype 'e'``): ``enum_send`` sends the label, which is also the text form.
  No label list is needed (and a cached one would miss labels added later).
* **domain** (``'d'``): sent and printed as its base type, so it reads as the base type;
  a domain over a domain over an array recurses.
* **composite** (``'c'``): ``record_send`` carries each field's type OID, so the record
  prints field by field with the reader of that OID (``textforms.record_text``). The
  described fields only decide up front whether every field type can be read.
* **array** (``typsend array_send``): carries its element OID; printed with the element
  type's delimiter (``textforms.array_text``).
* **range** and **multirange** (``'r'``, ``'m'``): their bounds read as the subtype.
* anything else - a base type from an extension, a pseudo-type - has no layout wal2delta
  knows: ``OpaqueType``.

The catalog lookup is I/O, so it is injected: ``UserTypeForms`` takes a ``TypeLookup``
(type OID -> ``TypeDescription``, implemented by ``capture.catalog.PostgresCatalog``) and
asks it once per type OID, when a reader is first requested - the sink does that while
planning, once per relation shape, never per row. Builtin types are answered from
``textforms`` without asking. A type that cannot be read gets a reader that raises
``UnknownBinaryFormatError`` naming it (a composite or array naming the inner type too),
so a stream that never sends it in binary - text mode - is never stopped by it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from decoder.textforms import (
    BUILTIN_UNREADABLE,
    Reader,
    UnknownBinaryFormatError,
    array_text,
    builtin_text_reader,
    builtin_type_name,
    multirange_text,
    range_text,
    record_text,
)


@dataclass(frozen=True, slots=True)
class EnumType:
    """An enum (``typtype 'e'``); its binary form is its label."""

    oid: int
    schema: str
    name: str


@dataclass(frozen=True, slots=True)
class DomainType:
    """A domain (``'d'``) over ``base_oid`` (``typbasetype``)."""

    oid: int
    schema: str
    name: str
    base_oid: int


@dataclass(frozen=True, slots=True)
class CompositeField:
    """A live attribute of a composite type (``pg_attribute`` of its ``typrelid``)."""

    name: str
    type_oid: int


@dataclass(frozen=True, slots=True)
class CompositeType:
    """A composite type (``'c'``), with its live fields in attribute order."""

    oid: int
    schema: str
    name: str
    fields: tuple[CompositeField, ...]


@dataclass(frozen=True, slots=True)
class ArrayType:
    """An array type (``typsend = array_send``) of ``element_oid`` (``typelem``).

    Attributes:
        delimiter: the element type's ``typdelim``, which separates the elements.
    """

    oid: int
    schema: str
    name: str
    element_oid: int
    delimiter: str = ","


@dataclass(frozen=True, slots=True)
class RangeType:
    """A range type (``'r'``) over ``subtype_oid`` (``pg_range.rngsubtype``)."""

    oid: int
    schema: str
    name: str
    subtype_oid: int


@dataclass(frozen=True, slots=True)
class MultirangeType:
    """A multirange type (``'m'``) of ``range_oid`` (``pg_range.rngtypid``)."""

    oid: int
    schema: str
    name: str
    range_oid: int


@dataclass(frozen=True, slots=True)
class OpaqueType:
    """A type whose binary layout wal2delta does not know (``typtype`` in ``kind``)."""

    oid: int
    schema: str
    name: str
    kind: str


TypeDescription = (
    EnumType | DomainType | CompositeType | ArrayType | RangeType | MultirangeType | OpaqueType
)
TypeLookup = Callable[[int], TypeDescription | None]
"""Type OID -> its description from the source catalog; None when no such type exists."""

_KINDS: Final = {"b": "a base type", "p": "a pseudo-type", "c": "a composite type"}


def qualified_type_name(description: TypeDescription) -> str:
    """``schema.name`` of a described type."""
    return f"{description.schema}.{description.name}"


@dataclass(frozen=True, slots=True)
class _Unreadable:
    """Why a type cannot be read: the type to name and the reason."""

    type_name: str
    reason: str

    def reader(self) -> Reader:
        def fail(_data: bytes) -> str:
            raise UnknownBinaryFormatError(self.type_name, self.reason)

        return fail


class UserTypeForms:
    """Readers (binary -> PostgreSQL's text form) for any type OID, cached per OID.

    Args:
        lookup: describes a type OID from the source catalog; None when there is no
            catalog, in which case only builtin types can be read.

    Safe to share between threads: two threads may build a reader for the same OID at
    once; both build equal ones and the first stored wins.
    """

    def __init__(self, lookup: TypeLookup | None) -> None:
        self._lookup = lookup
        self._readers: dict[int, Reader] = {}
        self._outcomes: dict[int, Reader | _Unreadable] = {}

    def reader(self, type_oid: int) -> Reader:
        """The reader of ``type_oid``; one that raises ``UnknownBinaryFormatError`` when the
        type (or a type inside it) has no known binary layout.

        Raises:
            Exception: whatever the lookup raises (the catalog could not be read).
        """
        reader = self._readers.get(type_oid)
        if reader is None:
            outcome = self._outcome(type_oid, ())
            reader = outcome.reader() if isinstance(outcome, _Unreadable) else outcome
            reader = self._readers.setdefault(type_oid, reader)
        return reader

    def _outcome(self, type_oid: int, outer: tuple[int, ...]) -> Reader | _Unreadable:
        cached = self._outcomes.get(type_oid)
        if cached is not None:
            return cached
        if type_oid in outer:
            # A type inside itself: PostgreSQL forbids it, but never recurse for ever.
            # Its values are read through the cache, where the outer reader is by then.
            def read_later(data: bytes) -> str:
                return self.reader(type_oid)(data)

            return read_later
        builtin = builtin_text_reader(type_oid)
        if builtin is not None:
            outcome: Reader | _Unreadable = builtin
        elif type_oid in BUILTIN_UNREADABLE:
            outcome = _Unreadable(builtin_type_name(type_oid), BUILTIN_UNREADABLE[type_oid])
        else:
            outcome = self._build(type_oid, (*outer, type_oid))
        return self._outcomes.setdefault(type_oid, outcome)

    def _build(self, type_oid: int, outer: tuple[int, ...]) -> Reader | _Unreadable:
        description = self._lookup(type_oid) if self._lookup is not None else None
        if description is None:
            reason = (
                "no source catalog describes it"
                if self._lookup is None
                else "the source catalog has no such type"
            )
            return _Unreadable(builtin_type_name(type_oid), reason)
        name = qualified_type_name(description)
        match description:
            case EnumType():
                return _label
            case DomainType(base_oid=base):
                return self._inner(name, "its base type", self._outcome(base, outer))
            case ArrayType(element_oid=element, delimiter=delimiter):
                inner = self._inner(name, "its element type", self._outcome(element, outer))
                if isinstance(inner, _Unreadable):
                    return inner
                field_reader = self.reader

                def read_array(data: bytes) -> str:
                    return array_text(data, field_reader, delimiter)

                return read_array
            case CompositeType(fields=fields):
                for field in fields:
                    inner = self._inner(
                        name, f"its field {field.name!r}", self._outcome(field.type_oid, outer)
                    )
                    if isinstance(inner, _Unreadable):
                        return inner
                field_reader = self.reader

                def read_record(data: bytes) -> str:
                    return record_text(data, field_reader)

                return read_record
            case RangeType(subtype_oid=subtype):
                bound = self._inner(name, "its subtype", self._outcome(subtype, outer))
                return _around(bound, range_text)
            case MultirangeType(range_oid=range_oid):
                one = self._inner(name, "its range type", self._outcome(range_oid, outer))
                return _around(one, multirange_text)
            case OpaqueType(kind=kind):
                what = _KINDS.get(kind, f"a type of kind {kind!r}")
                return _Unreadable(
                    name, f"it is {what} whose binary layout wal2delta does not know"
                )

    @staticmethod
    def _inner(name: str, role: str, outcome: Reader | _Unreadable) -> Reader | _Unreadable:
        if isinstance(outcome, _Unreadable):
            return _Unreadable(
                name, f"{role} {outcome.type_name} cannot be read ({outcome.reason})"
            )
        return outcome


def _around(
    inner: Reader | _Unreadable, container: Callable[[bytes, Reader], str]
) -> Reader | _Unreadable:
    """The reader of a container printed by ``container`` around ``inner``, the reader of
    what it holds (a range's bounds, a multirange's ranges); ``inner`` when unreadable."""
    if isinstance(inner, _Unreadable):
        return inner
    read_inner = inner

    def read(data: bytes) -> str:
        return container(data, read_inner)

    return read


def _label(data: bytes) -> str:
    return data.decode("utf-8")
