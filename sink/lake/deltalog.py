"""The file actions of a Delta table's log: which data and deletion-vector files it names.

Theory of operation
-------------------
delta-rs lists a table's live data files (``DeltaTable.file_uris``) but not the files its
deletion vectors live in, and its vacuum in ``full`` mode deletes every one of them as
unreferenced (measured with deltalake 1.6.6: the table then fails to read, "File not
found: .../deletion_vector_<uuid>.bin"); in ``lite`` mode it never deletes one. Retention
(``retention.py``) and the deletion-vector purge (``compaction.py``) therefore read the log
themselves, as the Delta protocol describes it (PROTOCOL.md, "Action Reconciliation" and
"Deletion Vector Descriptor Schema"):

* the newest classic checkpoint (``<v>.checkpoint.parquet``, or every part of a multi-part
  one) holds the table's live ``add`` actions and its unexpired ``remove`` actions
  (tombstones) at version ``v``; both Sail and delta-rs write such checkpoints, Sail every
  ten commits;
* the JSON commits after it are replayed in version order. A file action's identity is its
  path together with its deletion vector's unique id, so a MERGE that marks rows of a file
  deleted removes ``(path, old vector)`` and adds ``(path, new vector)``: the path stays
  live, the old vector becomes a tombstone.

A deletion vector stored on its own (``storageType`` ``u``) lives at
``<table>/<prefix>/deletion_vector_<uuid>.bin``, the uuid being the last 20 characters of
``pathOrInlineDv`` in Z85 and the prefix the characters before them; ``p`` names an
absolute path, ``i`` is inline and has no file. Paths of data files are relative to the
table and URL-encoded, or absolute URIs.

A table whose newest checkpoint is of another kind (v2, with sidecars) is replayed from an
older classic checkpoint or from version 0; when the commits that needs are gone,
``LogUnreadableError`` is raised and the caller leaves the table alone.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow.fs as pa_fs
import pyarrow.parquet as pq

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {char: value for value, char in enumerate(_Z85)}
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")


class LogUnreadableError(Exception):
    """The log cannot be replayed (a commit it needs is missing, or a file is malformed)."""


def z85_decode(text: str) -> bytes:
    """The bytes of Z85 ``text`` (a multiple of five characters; four bytes per five).

    Raises:
        ValueError: a length that is no multiple of five, or a character outside Z85.
    """
    if len(text) % 5:
        raise ValueError(f"Z85 text of {len(text)} characters is no multiple of five")
    out = bytearray()
    for start in range(0, len(text), 5):
        value = 0
        for char in text[start : start + 5]:
            digit = _Z85_VALUE.get(char)
            if digit is None:
                raise ValueError(f"{char!r} is not a Z85 character")
            value = value * 85 + digit
        out += value.to_bytes(4, "big")
    return bytes(out)


def deletion_vector_file(descriptor: Mapping[str, Any]) -> str | None:
    """Where the deletion vector ``descriptor`` is stored: a path relative to the table, an
    absolute URI (``p``), or None when it is inline (``i``) and has no file.

    Raises:
        ValueError: a storage type the protocol does not define, or a malformed id.
    """
    kind, where = descriptor["storageType"], str(descriptor["pathOrInlineDv"])
    if kind == "i":
        return None
    if kind == "p":
        return where
    if kind != "u" or len(where) < 20:
        raise ValueError(f"unknown deletion vector descriptor {kind!r} {where!r}")
    prefix, encoded = where[:-20], where[-20:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    return f"{prefix}/{name}" if prefix else name


def _vector_id(descriptor: Mapping[str, Any] | None) -> str:
    """A deletion vector's unique id (storage type, path or inline data, offset)."""
    if descriptor is None:
        return ""
    offset = descriptor.get("offset")
    suffix = "" if offset is None else f"@{offset}"
    return f"{descriptor['storageType']}{descriptor['pathOrInlineDv']}{suffix}"


@dataclass(frozen=True, slots=True)
class LiveFile:
    """A data file of the table's newest version.

    Attributes:
        path: relative to the table (decoded), or an absolute URI.
        vector: the file its deletion vector is stored in (as ``deletion_vector_file``), or
            None without one or with an inline one.
        rows: rows the data file holds, from its statistics (None without them).
        deleted: rows its deletion vector marks deleted (0 without one).
    """

    path: str
    vector: str | None
    rows: int | None
    deleted: int


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A ``remove`` action of the log: a data file, with its deletion vector, left a version.

    Attributes:
        path: the data file, as ``LiveFile.path``.
        vector: its deletion vector's file, or None.
        removed_at: the remove's ``deletionTimestamp`` (milliseconds since the epoch; 0
            when the log has none, which makes it as old as can be).
        version: the version that removed it; for a tombstone read from a checkpoint, the
            checkpoint's version (it was removed at or before).
    """

    path: str
    vector: str | None
    removed_at: int
    version: int


@dataclass(slots=True)
class TableFiles:
    """What the log of one table names at its newest version.

    Attributes:
        version: the newest version.
        live: the live data files, by file action identity.
        tombstones: the removed ones the log still holds, by file action identity.
        added: the live files' ``add`` actions as the log holds them (paths URL-encoded,
            ``partitionValues`` a mapping), when asked for (``read_table_files``); else
            None.
    """

    version: int
    live: dict[tuple[str, str], LiveFile] = field(default_factory=dict)
    tombstones: dict[tuple[str, str], Tombstone] = field(default_factory=dict)
    added: dict[tuple[str, str], Mapping[str, Any]] | None = None

    @property
    def live_paths(self) -> set[str]:
        """The data files of the newest version."""
        return {f.path for f in self.live.values()}

    @property
    def live_vectors(self) -> set[str]:
        """The deletion-vector files the newest version reads."""
        return {f.vector for f in self.live.values() if f.vector is not None}

    def deleted_fraction(self) -> float | None:
        """Rows marked deleted over rows held, in the live files; None without statistics."""
        total = deleted = 0
        for live in self.live.values():
            if live.rows is None:
                return None
            total += live.rows
            deleted += live.deleted
        return deleted / total if total else 0.0

    def _add(self, action: Mapping[str, Any]) -> None:
        descriptor = action.get("deletionVector")
        key = (str(action["path"]), _vector_id(descriptor))
        self.tombstones.pop(key, None)
        if self.added is not None:
            self.added[key] = _with_mapped_partitions(action)
        self.live[key] = LiveFile(
            path=_file_path(str(action["path"])),
            vector=None if descriptor is None else deletion_vector_file(descriptor),
            rows=_rows_of(action.get("stats")),
            deleted=0 if descriptor is None else int(descriptor.get("cardinality") or 0),
        )

    def _remove(self, action: Mapping[str, Any], version: int) -> None:
        descriptor = action.get("deletionVector")
        key = (str(action["path"]), _vector_id(descriptor))
        self.live.pop(key, None)
        if self.added is not None:
            self.added.pop(key, None)
        self.tombstones[key] = Tombstone(
            path=_file_path(str(action["path"])),
            vector=None if descriptor is None else deletion_vector_file(descriptor),
            removed_at=int(action.get("deletionTimestamp") or 0),
            version=version,
        )


def _with_mapped_partitions(action: Mapping[str, Any]) -> Mapping[str, Any]:
    """``action`` with ``partitionValues`` a mapping (a checkpoint's map reads as pairs)."""
    values = action.get("partitionValues")
    if values is None or isinstance(values, Mapping):
        return action
    return {**action, "partitionValues": dict(values)}


def _file_path(path: str) -> str:
    """A data file's path as the log names it: decoded when relative, kept when a URI."""
    return path if "://" in path else unquote(path)


def _rows_of(stats: object) -> int | None:
    if not isinstance(stats, str) or not stats:
        return None
    try:
        value = json.loads(stats).get("numRecords")
    except ValueError:
        return None
    return int(value) if isinstance(value, int) else None


def table_filesystem(path: str) -> tuple[pa_fs.FileSystem, str]:
    """Arrow's filesystem for the table at ``path`` (a local path or a URI) and its root.

    Object stores are reached with the credentials of the process environment (``AWS_*``),
    as delta-rs reaches them.
    """
    fs, root = pa_fs.FileSystem.from_uri(path if "://" in path else f"file://{path}")
    return fs, str(root)


def log_directory(path: str) -> tuple[pa_fs.FileSystem, str]:
    """Arrow's filesystem for the table at ``path`` and its ``_delta_log`` directory."""
    fs, root = table_filesystem(path)
    return fs, f"{root.rstrip('/')}/_delta_log"


def list_log(fs: pa_fs.FileSystem, log_dir: str) -> list[pa_fs.FileInfo]:
    """The entries of a table's log directory ``log_dir``; none when it is missing.

    Raises:
        OSError: the directory could not be listed.
    """
    listed: list[pa_fs.FileInfo] = fs.get_file_info(
        pa_fs.FileSelector(log_dir, allow_not_found=True)
    )
    return listed


def read_table_files(path: str, *, with_actions: bool = False) -> TableFiles:
    """Replay the log of the table at ``path`` (the module docstring); ``with_actions``
    keeps the live files' ``add`` actions too (``TableFiles.added``).

    Raises:
        LogUnreadableError: the log has no version, misses a commit the replay needs, or holds
            a file that cannot be read.
    """
    fs, log_dir = log_directory(path)
    try:
        listed = list_log(fs, log_dir)
        commits, checkpoints = log_files(info.base_name for info in listed)
        if not commits and not checkpoints:
            raise LogUnreadableError(f"{path} has no Delta log")
        newest = max([*commits, *checkpoints])
        for start in [*sorted(checkpoints, reverse=True), -1]:
            needed = range(start + 1, newest + 1)
            if all(v in commits for v in needed):
                break
        else:
            raise LogUnreadableError(f"the log of {path} misses commits no checkpoint covers")
        files = TableFiles(version=newest, added={} if with_actions else None)
        if start >= 0:
            for part in checkpoints[start]:
                _read_checkpoint(fs, f"{log_dir}/{part}", files, start)
        for version in needed:
            _read_commit(fs, f"{log_dir}/{commits[version]}", files, version)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LogUnreadableError(f"cannot read the Delta log of {path}: {exc}") from exc
    return files


def oldest_readable_version(path: str) -> int | None:
    """The oldest version of the table at ``path`` its log can still be read at (a log
    trimmed by ``upkeep/logtrim.py`` starts at a checkpoint); None when it has no log.
    Every version from it to the newest reads: a version needs a checkpoint at or
    before it (or the first commit) and every commit after that checkpoint up to it.

    Raises:
        OSError: the log could not be listed.
        LogUnreadableError: the log misses commits no checkpoint covers.
    """
    listed = list_log(*log_directory(path))
    commits, checkpoints = log_files(info.base_name for info in listed)
    if not commits and not checkpoints:
        return None
    newest = max([*commits, *checkpoints])
    oldest = None
    for start in sorted([*checkpoints, *([-1] if 0 in commits else [])], reverse=True):
        if not all(v in commits for v in range(start + 1, newest + 1)):
            break  # an older start needs these commits too
        oldest = max(start, 0)
    if oldest is None:
        raise LogUnreadableError(f"the log of {path} misses commits no checkpoint covers")
    return oldest


def log_files(names: Iterable[str]) -> tuple[dict[int, str], dict[int, list[str]]]:
    """JSON commits by version, and complete classic checkpoints by version (their parts)."""
    commits: dict[int, str] = {}
    parts: dict[int, dict[int, str]] = {}
    expected: dict[int, int] = {}
    for name in names:
        if match := _COMMIT.match(name):
            commits[int(match[1])] = name
        elif match := _CHECKPOINT.match(name):
            version = int(match[1])
            part, count = (int(match[2]), int(match[3])) if match[2] else (1, 1)
            parts.setdefault(version, {})[part] = name
            expected[version] = count
    checkpoints = {
        version: [found[n] for n in sorted(found)]
        for version, found in parts.items()
        if len(found) == expected[version]
    }
    return commits, checkpoints


def _read_checkpoint(fs: pa_fs.FileSystem, path: str, files: TableFiles, version: int) -> None:
    with fs.open_input_file(path) as source:
        table = pq.read_table(source, columns=["add", "remove"])
    for action in table.column("add").drop_null().to_pylist():
        files._add(action)
    for action in table.column("remove").drop_null().to_pylist():
        files._remove(action, version)


def _read_commit(fs: pa_fs.FileSystem, path: str, files: TableFiles, version: int) -> None:
    for line in _lines(fs, path):
        if '"add"' not in line and '"remove"' not in line:
            continue
        action = json.loads(line)
        if "add" in action:
            files._add(action["add"])
        elif "remove" in action:
            files._remove(action["remove"], version)


def _lines(fs: pa_fs.FileSystem, path: str) -> Iterator[str]:
    with fs.open_input_stream(path) as source:
        text = source.read().decode()
    yield from (line for line in text.splitlines() if line.strip())
