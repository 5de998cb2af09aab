"""Fast constructors for frozen slot classes: the one place objects skip their ``__init__``.

Theory of operation: a frozen dataclass's ``__init__`` stores every field through
``object.__setattr__`` (its own ``__setattr__`` refuses), which costs more than the rest of
making a replayed row, a received frame or a planned row. ``fast_constructor(Real)``
returns a function that instead

1. makes an instance of a *twin* class: a plain class with exactly ``Real.__slots__``
   and no ``__init__``, ``__setattr__`` or anything else;
2. stores each field with an ordinary slot store (the twin's slots are writable);
3. assigns ``obj.__class__ = Real``, which CPython allows between classes whose instance
   layouts are identical, and returns it.

The result is a genuine ``Real``: its type, equality, hash, repr, pickling and
immutability are ``Real``'s, field by field what ``Real(...)`` makes. The builder is
generated (as ``dataclasses`` generates ``__init__``) so one call costs one Python frame,
about a third of the constructor's (measured in
``docs/decisions/0058-decoder-one-tupledata-walk-twin-class.md``).

The fence: ``fast_constructor`` refuses, when the module defining the builder is
imported, every class for which the trick would build something the constructor would
not: a class without its own ``__slots__`` or whose layout the twin cannot share (a base
class other than ``object``, ``__dict__``/``__weakref__`` slots), a field list that does
not name each slot exactly once, and a class whose ``__init__`` does more than store its
fields (a dataclass with ``__post_init__``, or a field order other than the
constructor's). A hand-written class (not a dataclass) must name its ``fields``; its
``__init__`` is not inspected, so such a class documents why building its slots
directly is correct (``TupleData.from_wire``).
"""

from __future__ import annotations

import dataclasses
import keyword
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

_RESERVED_PREFIX = "_fast_"  # names of the generated code


class TwinClassError(TypeError):
    """A class (or field list) the twin-class construction cannot build faithfully."""


def fast_constructor(
    real: type[T],
    fields: Sequence[str] | None = None,
    *,
    fixed: Mapping[str, object] | None = None,
    name: str | None = None,
) -> Callable[..., T]:
    """A function building ``real`` instances from positional field values, fast.

    Args:
        real: a class with ``__slots__`` and ``object`` as its only base; usually a frozen
            dataclass.
        fields: the builder's parameters, in order; each a slot of ``real``. Defaults to
            the dataclass's fields (minus ``fixed``), in constructor order; required for
            a class that is not a dataclass.
        fixed: slots stored with the same value by every call (not parameters).
        name: the builder's ``__name__`` (default ``new_<class name>``).

    Returns:
        ``build(*values) -> real``; the values are stored as given, unchecked.

    Raises:
        TwinClassError: ``real`` or the field list fails a check of the module docstring.
    """
    fixed = dict(fixed or {})
    slots = _own_slots(real)
    parameters = tuple(_default_fields(real, fixed) if fields is None else fields)
    _check_fields(real, slots, parameters, fixed)
    twin: type = type(f"_{real.__name__}Twin", (), {"__slots__": slots})
    probe: object = object.__new__(twin)
    try:
        probe.__class__ = real
    except TypeError as exc:
        raise TwinClassError(f"{real.__name__}: a twin cannot share its layout: {exc}") from None
    return _generate(real, twin, parameters, fixed, name or f"new_{real.__name__}")


def _own_slots(real: type) -> tuple[str, ...]:
    slots = real.__dict__.get("__slots__")
    if slots is None:
        raise TwinClassError(f"{real.__name__} has no __slots__ of its own")
    if real.__bases__ != (object,):
        raise TwinClassError(f"{real.__name__} derives from {real.__bases__}, not only object")
    slots = (slots,) if isinstance(slots, str) else tuple(slots)
    if {"__dict__", "__weakref__"} & set(slots):
        raise TwinClassError(f"{real.__name__} has __dict__ or __weakref__ slots")
    return slots


def _default_fields(real: type, fixed: Mapping[str, object]) -> tuple[str, ...]:
    if not dataclasses.is_dataclass(real):
        raise TwinClassError(f"{real.__name__} is not a dataclass: name its fields")
    return tuple(field.name for field in dataclasses.fields(real) if field.name not in fixed)


def _check_fields(
    real: type, slots: tuple[str, ...], parameters: tuple[str, ...], fixed: Mapping[str, object]
) -> None:
    named = [*parameters, *fixed]
    if len(named) != len(set(named)) or set(named) != set(slots):
        raise TwinClassError(
            f"{real.__name__}: the builder must set each slot {slots} exactly once, "
            f"not {tuple(named)}"
        )
    for field in named:
        if (
            not field.isidentifier()
            or keyword.iskeyword(field)
            or field.startswith(_RESERVED_PREFIX)
        ):
            raise TwinClassError(f"{real.__name__}: {field!r} cannot be a parameter name")
    if not dataclasses.is_dataclass(real):
        return
    if hasattr(real, "__post_init__"):
        raise TwinClassError(f"{real.__name__}.__post_init__ would be skipped")
    order = tuple(field.name for field in dataclasses.fields(real))
    if order != slots:
        raise TwinClassError(f"{real.__name__}: slots {slots} differ from its fields {order}")
    if tuple(field for field in order if field not in fixed) != parameters:
        raise TwinClassError(
            f"{real.__name__}: parameters {parameters} are not in constructor order {order}"
        )


def _generate(
    real: type[T],
    twin: type,
    parameters: tuple[str, ...],
    fixed: Mapping[str, object],
    name: str,
) -> Callable[..., T]:
    # Generated source, as dataclasses does for __init__: a loop over setters would cost a
    # call per field and lose the point. Every name in it was checked by _check_fields.
    stores = [f"        _fast_obj.{field} = {field}" for field in parameters]
    constants = [f"_fast_fixed_{index}" for index in range(len(fixed))]
    stores += [
        f"        _fast_obj.{field} = {constant}"
        for field, constant in zip(fixed, constants, strict=True)
    ]
    source = "\n".join(
        [
            f"def _factory({', '.join(['_fast_new', '_fast_twin', '_fast_real', *constants])}):",
            f"    def {name}({', '.join(parameters)}):",
            "        _fast_obj = _fast_new(_fast_twin)",
            *stores,
            "        _fast_obj.__class__ = _fast_real",
            "        return _fast_obj",
            f"    return {name}",
        ]
    )
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    build: Callable[..., T] = namespace["_factory"](object.__new__, twin, real, *fixed.values())
    build.__qualname__ = name
    build.__module__ = real.__module__
    build.__doc__ = f"Build a {real.__name__} equal to the constructor's (decoder.fastbuild)."
    return build
