"""Types of the compiled kernel ``decoder/_tuplewalk.c`` (see ``decoder.native``)."""

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

def row_message_is_valid(buf: bytes, in_stream: bool, /) -> bool: ...
def walk(
    buf: bytes,
    start: int,
    out: list[object] | None,
    text: Sequence[Callable[[bytes], object]],
    binary: Sequence[Callable[[bytes], object]],
    null: object,
    unchanged: object,
    /,
) -> int: ...
def load(
    buf: bytes,
    start: int,
    text: Sequence[Callable[[bytes], object]],
    binary: Sequence[Callable[[bytes], object]],
    null: object,
    unchanged: object,
    /,
) -> list[object] | None: ...
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
) -> tuple[int, int, int, int]: ...
def absorb(
    frames: list[bytes], start: int, records: list[bytes] | None, room: int, overhead: int, /
) -> tuple[int, int, int, int, int, int, int]: ...
def xlog_records(frames: list[bytes], start: int, stop: int, out: list[bytes], /) -> None: ...
def replay_rows(
    records: Iterator[bytes],
    relations: dict[int, Any],
    relation: object,
    row_type: type,
    tuple_type: type,
    id_at: int,
    commit_lsn: int,
    commit_time: int,
    xid: int | None,
    ordinal: int,
    chunk: list[Any],
    weight: int,
    max_changes: int,
    max_weight: int,
    overhead: int,
    /,
) -> tuple[int, int, int, int, int, bytes | None]: ...
def gather(
    parts: list[tuple[bytes, int]], count: int, /
) -> list[tuple[bytes, bytes, bytes | None, int]] | None: ...
def columnar_meta(
    rows: Iterable[object], changes: list[Any], deletes: list[bool], row_type: type, /
) -> tuple[list[object], bytes | None, bytes, bytes, bytes, bytes]: ...
