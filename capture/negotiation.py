"""Protocol negotiation: configuration + server version -> pgoutput options.

``protocol_version: auto`` picks the highest version the server speaks (PostgreSQL 14: 2,
15: 3, 16 and newer: 4). An option the server cannot do is a clear error, never a silent
downgrade: asking for protocol 4 from PostgreSQL 15 fails at start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from capture.errors import ServerCapabilityError
from decoder import ProtocolOptions

StreamingSetting = Literal["auto", "off", "on", "parallel"]


def max_protocol_version(server_version_num: int) -> int:
    """Highest pgoutput protocol version of a server (``LOGICALREP_PROTO_MAX_VERSION_NUM``)."""
    major = server_version_num // 10000
    if major >= 16:
        return 4
    if major == 15:
        return 3
    if major == 14:
        return 2
    return 1


@dataclass(frozen=True, slots=True)
class ReplicationRequest:
    """Requested protocol options, before negotiation (``source.*`` of the configuration,
    which holds their defaults; ``daemon.wiring.capture_settings`` builds it)."""

    protocol_version: int | Literal["auto"]
    streaming: StreamingSetting
    two_phase: bool
    binary: bool
    messages: bool
    origin: Literal["any", "none"]


MIN_MESSAGES_MAJOR: Final = 14
"""pgoutput's ``messages`` option exists from PostgreSQL 14 on."""


def negotiate(request: ReplicationRequest, server_version_num: int) -> ProtocolOptions:
    """Return the options to use with this server.

    Raises:
        ServerCapabilityError: the server cannot do what was asked; the message names
            the configuration field to change.
    """
    highest = max_protocol_version(server_version_num)
    major = server_version_num // 10000
    if request.protocol_version == "auto":
        version = highest
    else:
        version = request.protocol_version
        if version > highest:
            raise ServerCapabilityError(
                f"source.protocol_version: {version} needs a newer server; PostgreSQL {major} "
                f"speaks up to protocol {highest}."
            )
    streaming: Literal["off", "on", "parallel"]
    if request.streaming == "auto":
        streaming = "on" if version >= 2 else "off"
    else:
        streaming = request.streaming
    if streaming == "on" and version < 2:
        raise ServerCapabilityError("source.streaming: on needs protocol_version 2 or higher.")
    if streaming == "parallel" and version < 4:
        raise ServerCapabilityError(
            f"source.streaming: parallel needs protocol_version 4 (PostgreSQL 16+); "
            f"negotiated {version} with PostgreSQL {major}."
        )
    if request.two_phase and version < 3:
        raise ServerCapabilityError(
            f"source.two_phase: true needs protocol_version 3 (PostgreSQL 15+); "
            f"negotiated {version} with PostgreSQL {major}."
        )
    if request.origin == "none" and major < 16:
        raise ServerCapabilityError(
            f"source.origin: none needs PostgreSQL 16 or newer; the source runs PostgreSQL {major}."
        )
    return ProtocolOptions(
        proto_version=version,
        streaming=streaming,
        two_phase=request.two_phase,
        binary=request.binary,
        # Asked for whenever the server can send them (PostgreSQL 14+): ``wal2delta
        # resync`` requests travel as logical decoding messages (sink/copies/copies.py); the sink
        # keeps other messages only with ``sink.messages: table``.
        messages=request.messages or major >= MIN_MESSAGES_MAJOR,
    )


def start_replication_options(
    options: ProtocolOptions,
    publications: str | Sequence[str],
    origin: Literal["any", "none"],
) -> dict[str, str]:
    """The option list of START_REPLICATION for pgoutput.

    Args:
        options: the negotiated protocol options.
        publications: one publication name or several (a subscription's
            ``publication_names``).
        origin: ``none`` asks the server to skip changes replicated into the source.
    """
    names = (publications,) if isinstance(publications, str) else tuple(publications)
    result = {
        "proto_version": str(options.proto_version),
        # pgoutput splits this list with SplitIdentifierString: quote every name.
        "publication_names": ",".join('"' + name.replace('"', '""') + '"' for name in names),
    }
    if options.streaming != "off":
        result["streaming"] = options.streaming
    if options.two_phase:
        result["two_phase"] = "true"
    if options.binary:
        result["binary"] = "true"
    if options.messages:
        result["messages"] = "true"
    if origin == "none":
        result["origin"] = "none"
    return result
