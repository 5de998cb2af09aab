"""Types of the compiled kernel ``sink/planning/_columnar.c`` (see ``sink.kernel``)."""

from collections.abc import Callable, Iterable, Sequence
from typing import Any

def pick(
    buf: bytes,
    start: int,
    indexes: tuple[int, ...],
    text: Sequence[Callable[[bytes], object]],
    /,
) -> tuple[object, ...] | None: ...
def fold(
    changes: Sequence[object],
    start: int,
    row_type: type,
    tuple_type: type,
    relation: object,
    timestamp: int,
    indexes: tuple[int, ...],
    text: Sequence[Callable[[bytes], object]],
    plain: tuple[type, ...],
    rows: dict[tuple[object, ...], object],
    folded: list[Any],
    parts: list[tuple[bytes, int]],
    deletes: list[bool],
    /,
) -> tuple[int, int, int, int, int]: ...
def gather(
    parts: list[tuple[bytes, int]], count: int, /
) -> list[tuple[bytes, bytes, bytes | None, int]] | None: ...
def columnar_meta(
    rows: Iterable[object], changes: list[Any], deletes: list[bool], row_type: type, /
) -> tuple[list[object], bytes | None, bytes, bytes, bytes, bytes]: ...
