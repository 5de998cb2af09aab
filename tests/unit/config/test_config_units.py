"""Durations and byte sizes as operators write them.

``Duration`` and ``NonNegativeDuration`` in ``config/units.py`` are deliberate twins that
differ in their validator and label only: mypy and pydantic need each ``Annotated`` alias
written out, so ``duplicates`` reports them as a pair.
"""

from datetime import timedelta

import pytest

from config import format_byte_size, format_duration, parse_byte_size, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1),
        ("500ms", 0.5),
        ("5m", 300),
        ("1h", 3600),
        ("2d", 172_800),
        ("1h30m", 5400),
        ("1m 30s", 90),
        ("1.5s", 1.5),
        (".5s", 0.5),
        ("10", 10),
        ("0.25", 0.25),
        (" 10S ", 10),
        ("-5s", -5),
        (30, 30),
        (0.5, 0.5),
    ],
)
def test_duration_spellings_parse_to_seconds(text: object, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == pytest.approx(seconds)


def test_timedelta_passes_through_unchanged() -> None:
    assert parse_duration(timedelta(minutes=2)) == timedelta(minutes=2)


@pytest.mark.parametrize(
    "text", ["", "s", "10x", "5 parsecs", "1h-30m", "1.5.5s", "ms", "10s garbage", "nan"]
)
def test_malformed_durations_are_rejected_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize("value", [True, False, None, [1], float("inf")])
def test_booleans_and_non_scalars_are_not_durations(value: object) -> None:
    """YAML reads ``yes`` as True, which must not become one second."""
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (10, "10s"),
        (0.5, "500ms"),
        (300, "5m"),
        (5400, "1h30m"),
        (90061.5, "1d1h1m1s500ms"),
        (0, "0s"),
    ],
)
def test_format_duration_round_trips_through_parse(seconds: float, text: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == text
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        (0, 0),
        (1024, 1024),
        ("1024", 1024),
        ("64MiB", 64 * 1024**2),
        ("64mib", 64 * 1024**2),
        ("64Mi", 64 * 1024**2),
        ("1GB", 1_000_000_000),
        ("1GiB", 1024**3),
        ("512kB", 512_000),
        ("512KiB", 512 * 1024),
        ("1.5GiB", 3 * 512 * 1024**2),
        ("2TB", 2 * 1000**4),
        ("100B", 100),
        (2048.0, 2048),
    ],
)
def test_size_spellings_parse_to_bytes(text: object, size: int) -> None:
    assert parse_byte_size(text) == size


@pytest.mark.parametrize("value", ["-1", -1, "1.5", "64 megs", "MiB", True, None, 1.5, "1PB"])
def test_malformed_sizes_are_rejected(value: object) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_byte_size(value)


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (64 * 1024**2, "64MiB"),
        (1_000_000_000, "1GB"),
        (1_500_000, "1500kB"),
        (512_000, "500KiB"),
        (1000 + 1, "1001"),
        (0, "0"),
    ],
)
def test_format_byte_size_uses_the_exact_largest_unit(size: int, text: str) -> None:
    assert format_byte_size(size) == text
    assert parse_byte_size(text) == size
