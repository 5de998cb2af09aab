"""Which form of the decoder's hottest loop runs: the compiled kernel or the Python one.

Theory of operation: a TupleData is walked once per layer - the decoder validates a row
message when it arrives (``parser.row_message_is_valid``), and the sink converts its values
(``values.load_tuple_wire``, or the sink's own kernel); only an UPDATE carrying an old
tuple is walked once more when it is read back, to find where its new tuple starts
(``parser.row_parts``). Why not once in all:
docs/decisions/0102-a-tupledata-is-walked-once-per-layer.md. The walk is also written in C
(``decoder/_tuplewalk.c``), built
when the package is installed. The Python functions stay the reference (the ``*_reference``
names); both forms give the same answer for every input
(``tests/unit/decoder/test_native.py``), and whatever the C walk cannot finish is done
again by the reference, which words the error.

The kernel also holds ``absorb`` and ``replay_rows``, the receive and replay loops' bulk
paths (``spill.FileChangeBuffer.absorb_frames``, ``replay.ReplayQueue._chunks``; without
the kernel every frame is fed and every record replayed one by one, the reference
paths). The sink's columnar planner has a kernel of its own (``sink.kernel``); the two
share the TupleData wire helpers of ``decoder/_tuplewire.h``.

The extension is optional at install (a machine without a C compiler still gets a
working, slower daemon); ``KERNEL`` says which form runs, and the daemon reports it in
its startup log and in ``wal2delta_build_info{decoder_kernel=...}``. Setting
``WAL2DELTA_PURE_PYTHON=1`` in the environment runs the Python reference even when the
extension is there (to compare, or to rule the kernel out).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Final, Literal

PURE_PYTHON_ENV: Final = "WAL2DELTA_PURE_PYTHON"


def load_kernel(module: str) -> ModuleType | None:
    """The compiled extension ``module`` (``decoder._tuplewalk``, ``sink._columnar``), or
    None when it was not built (no compiler at install) or ``PURE_PYTHON_ENV`` is set."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in {"", "0"}:
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


COMPILED: Final[ModuleType | None] = load_kernel("decoder._tuplewalk")
"""The compiled kernel, or None when the Python reference runs."""

KERNEL: Final[Literal["compiled", "python"]] = "python" if COMPILED is None else "compiled"
"""Which form of the walk runs in this process."""
