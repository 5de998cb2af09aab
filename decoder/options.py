"""The pgoutput options a stream was started with, which decide the byte layout.

The layout of some messages depends on the negotiated options and not only on the protocol
version: ``pgoutput.c`` writes ``abort_lsn`` and ``abort_time`` into STREAM ABORT only when
``streaming`` is ``parallel`` (``write_abort_info``), so the parser takes this value
instead of a bare version number. The checks mirror ``pgoutput_startup``: an option the
requested protocol version cannot carry is refused here, before any byte is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

StreamingMode = Literal["off", "on", "parallel"]

MIN_PROTOCOL_VERSION: Final = 1
MAX_PROTOCOL_VERSION: Final = 4
# logicalproto.h: LOGICALREP_PROTO_STREAM_VERSION_NUM, ..._TWOPHASE_..., ..._STREAM_PARALLEL_...
STREAM_PROTOCOL_VERSION: Final = 2
TWO_PHASE_PROTOCOL_VERSION: Final = 3
PARALLEL_PROTOCOL_VERSION: Final = 4
_STREAMING_MODES: Final = ("off", "on", "parallel")


@dataclass(frozen=True, slots=True)
class ProtocolOptions:
    """The pgoutput options of one replication stream (``START_REPLICATION ... (...)``).

    Attributes:
        proto_version: ``proto_version``, 1 to 4.
        streaming: ``streaming``: ``off``, ``on`` (protocol 2+) or ``parallel`` (4+).
        two_phase: ``two_phase`` (protocol 3+): prepared transactions are sent at PREPARE.
        binary: ``binary``: column values in the types' binary send format.
        messages: ``messages``: logical decoding messages are sent.

    Raises:
        ValueError: the combination is one ``pgoutput`` itself refuses.
    """

    proto_version: int = 1
    streaming: StreamingMode = "off"
    two_phase: bool = False
    binary: bool = False
    messages: bool = False

    def __post_init__(self) -> None:
        version = self.proto_version
        if not MIN_PROTOCOL_VERSION <= version <= MAX_PROTOCOL_VERSION:
            raise ValueError(
                f"proto_version {version} is not supported; choose a version from "
                f"{MIN_PROTOCOL_VERSION} to {MAX_PROTOCOL_VERSION}."
            )
        if self.streaming not in _STREAMING_MODES:
            raise ValueError(
                f"streaming {self.streaming!r} is not one of 'off', 'on' or 'parallel'."
            )
        if self.streaming == "on" and version < STREAM_PROTOCOL_VERSION:
            raise ValueError(
                f"streaming 'on' needs proto_version {STREAM_PROTOCOL_VERSION} or higher; "
                f"proto_version {version} was requested."
            )
        if self.streaming == "parallel" and version < PARALLEL_PROTOCOL_VERSION:
            raise ValueError(
                f"streaming 'parallel' needs proto_version {PARALLEL_PROTOCOL_VERSION} or "
                f"higher; proto_version {version} was requested."
            )
        if self.two_phase and version < TWO_PHASE_PROTOCOL_VERSION:
            raise ValueError(
                f"two_phase needs proto_version {TWO_PHASE_PROTOCOL_VERSION} or higher; "
                f"proto_version {version} was requested."
            )

    @property
    def stream_abort_has_abort_info(self) -> bool:
        """True when STREAM ABORT carries ``abort_lsn`` and ``abort_time`` (see F4)."""
        return self.streaming == "parallel" and self.proto_version >= PARALLEL_PROTOCOL_VERSION
