"""How Delta values compare when rows are matched: the dictionary-key form of a value."""

from __future__ import annotations

import math
from typing import Final


def hashable(value: object) -> object:
    """A dictionary-key form of a Delta value that compares as Spark's ``<=>`` does.

    Lists become tuples, and NaN, which Spark treats as equal to itself in comparisons,
    becomes one marker.
    """
    if isinstance(value, list):
        return tuple(hashable(v) for v in value)
    if isinstance(value, float) and math.isnan(value):
        return _NAN
    return value


class _NaN:
    def __repr__(self) -> str:
        return "NaN"


_NAN: Final = _NaN()
