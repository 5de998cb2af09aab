"""wal_end_position: the insert position a page header past a record that ends on a page
boundary is that boundary; every other position is itself."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from capture.slots import LONG_PAGE_HEADER, SHORT_PAGE_HEADER, wal_end_position

BLOCK = 8192
SEGMENT = 16 * 1024 * 1024


def end(lsn: int) -> int:
    return wal_end_position(lsn, block_size=BLOCK, segment_size=SEGMENT)


def test_a_short_page_header_past_a_page_boundary_is_the_boundary() -> None:
    # 0x2A8 = 0x290 of records, the last ending on a page boundary, + the 0x18 header.
    boundary = 0x4D_6000
    assert end(boundary + SHORT_PAGE_HEADER) == boundary


def test_a_long_page_header_past_a_segment_boundary_is_the_boundary() -> None:
    boundary = 3 * SEGMENT
    assert end(boundary + LONG_PAGE_HEADER) == boundary
    # 40 bytes into any other page is inside a record.
    assert end(boundary + BLOCK + LONG_PAGE_HEADER) == boundary + BLOCK + LONG_PAGE_HEADER


def test_the_rules_follow_the_server_s_block_and_segment_sizes() -> None:
    # 8 kB into a 32 kB page is inside a record; 32 kB in is a page boundary.
    assert wal_end_position(0x100_2018, block_size=32768, segment_size=SEGMENT) == 0x100_2018
    assert wal_end_position(0x100_8018, block_size=32768, segment_size=SEGMENT) == 0x100_8000
    # 1 MB into a 16 MB segment is a page start; into 1 MB segments, a segment start.
    assert wal_end_position(0x110_0028, block_size=BLOCK, segment_size=SEGMENT) == 0x110_0028
    assert wal_end_position(0x110_0028, block_size=BLOCK, segment_size=0x10_0000) == 0x110_0000


@given(st.integers(min_value=1, max_value=2**40).map(lambda n: n * 8))
def test_positions_off_a_page_start_are_kept_and_none_moves_forward(lsn: int) -> None:
    result = end(lsn)
    assert result <= lsn
    in_page, in_segment = lsn % BLOCK, lsn % SEGMENT
    if in_segment != LONG_PAGE_HEADER and in_page != SHORT_PAGE_HEADER:
        assert result == lsn
    else:
        assert result % BLOCK == 0
