"""Golden pgoutput bytes captured from real PostgreSQL servers (see ``harvest.py``).

``load_captures()`` returns every recorded workload of every server and option set, with
the messages as bytes, so tests need no server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from decoder import Lsn, ProtocolOptions, parse_lsn

GOLDEN_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class GoldenMessage:
    """One message as ``pg_logical_slot_get_binary_changes`` returned it."""

    lsn: Lsn
    xid: int
    payload: bytes

    @property
    def tag(self) -> str:
        return chr(self.payload[0])


@dataclass(frozen=True)
class Capture:
    """What one slot (one option set) produced for one workload on one server."""

    file: str
    server_major: int
    server_version: str
    options: ProtocolOptions
    workload: str
    sql: tuple[str, ...]
    messages: tuple[GoldenMessage, ...]

    @property
    def option_set(self) -> str:
        return self.file.removesuffix(".json").split("_", 1)[1]

    @property
    def id(self) -> str:
        return f"pg{self.server_major}-{self.option_set}-{self.workload}"


@cache
def load_captures() -> tuple[Capture, ...]:
    """Every capture of every fixture file, sorted by file then workload order."""
    captures = []
    for path in sorted(GOLDEN_DIR.glob("pg*_*.json")):
        document = json.loads(path.read_text())
        options = ProtocolOptions(**document["options"])
        major = document["server_version_num"] // 10000
        for workload in document["workloads"]:
            captures.append(
                Capture(
                    file=path.name,
                    server_major=major,
                    server_version=document["server_version"],
                    options=options,
                    workload=workload["workload"],
                    sql=tuple(workload["sql"]),
                    messages=tuple(
                        GoldenMessage(parse_lsn(lsn), xid, bytes.fromhex(payload))
                        for lsn, xid, payload in workload["messages"]
                    ),
                )
            )
    return tuple(captures)


def capture(server_major: int, option_set: str, workload: str) -> Capture:
    """The capture of one workload for one server and option set."""
    for found in load_captures():
        key = (found.server_major, found.option_set, found.workload)
        if key == (server_major, option_set, workload):
            return found
    raise KeyError(f"no capture pg{server_major}_{option_set} / {workload}")
