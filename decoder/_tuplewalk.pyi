"""Types of the compiled kernel ``decoder/_tuplewalk.c`` (see ``decoder.native``)."""

from collections.abc import Callable, Iterator, Sequence
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
