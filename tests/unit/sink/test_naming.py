"""Lake locations and Delta column names: every PostgreSQL identifier, reversibly."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sink.values.naming import (
    DELTA_INVALID_CHARACTERS,
    column_map,
    decode,
    delta_can_hold,
    delta_column_name,
    mapped_column_name,
    name_of_path_part,
    path_part,
    source_column_name,
    table_of_path,
    table_path,
)

PATH_SAFE = set(string.ascii_letters + string.digits + "_-.")
# Characters that build escape-lookalikes and everything the encodings treat specially,
# mixed with arbitrary Unicode (no NUL, no surrogates: PostgreSQL allows neither).
TRICKY = list("_xX0123456789ABCDEFabcdef .-/`'\"%~#?*[]\\,;{}()=\t\n")
characters = st.one_of(
    st.sampled_from(TRICKY),
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
)
identifiers = st.text(characters, min_size=1, max_size=63).filter(
    lambda name: len(name.encode()) <= 63  # NAMEDATALEN - 1
)
roots = st.sampled_from(["/lake", "/lake/", "s3://bucket/lake", "abfss://c@acct.dfs/x/"])


@given(identifiers)
def test_a_location_part_is_safe_ascii_and_decodes_to_the_name(name: str) -> None:
    part = path_part(name)
    assert set(part) <= PATH_SAFE
    assert not part.startswith(".")
    assert part != "_delta_log"
    assert not part.startswith("_wal2delta")
    assert decode(part) == name
    assert name_of_path_part(part) == name


@given(identifiers, identifiers)
def test_two_names_never_share_a_location_part(first: str, second: str) -> None:
    if first != second:
        assert path_part(first) != path_part(second)


@given(roots, identifiers, identifiers)
def test_table_of_path_inverts_table_path(root: str, schema: str, table: str) -> None:
    path = table_path(root, schema, table)
    assert path.startswith(root.rstrip("/") + "/")
    assert path.count("/") == root.rstrip("/").count("/") + 2
    assert table_of_path(root, path) == (schema, table)


@given(identifiers, identifiers, identifiers, identifiers)
def test_two_tables_never_share_a_location(s1: str, t1: str, s2: str, t2: str) -> None:
    if (s1, t1) != (s2, t2):
        assert table_path("/lake", s1, t1) != table_path("/lake", s2, t2)


@given(st.text(st.sampled_from(sorted(PATH_SAFE - {"_"})), min_size=1, max_size=63))
def test_names_of_safe_characters_keep_their_location(name: str) -> None:
    if not name.startswith("."):
        assert path_part(name) == name


@pytest.mark.parametrize(
    ("name", "part"),
    [
        ("public", "public"),
        ("order_items", "order_items"),
        ("Orders-2024.v2", "Orders-2024.v2"),
        ("Sales EU", "Sales_x0020_EU"),
        ("sp ace", "sp_x0020_ace"),
        ("заказы", "_x0437__x0430__x043A__x0430__x0437__x044B_"),
        ("back`tick", "back_x0060_tick"),
        ("a/b", "a_x002F_b"),
        (".", "_x002E_"),
        ("..", "_x002E_."),
        (".hidden", "_x002E_hidden"),
        ("q?m", "q_x003F_m"),
        ("100%", "100_x0025_"),
        ("😀", "_x0001F600_"),
        ("a_x0020_b", "a_x005F_x0020_b"),  # looks like an escape: its _ is escaped
        ("price_x1000", "price_x1000"),  # cannot be read as one: stays
        ("_delta_log", "_x005F_delta_log"),
        ("_wal2delta_messages", "_x005F_wal2delta_messages"),
    ],
)
def test_location_parts(name: str, part: str) -> None:
    assert path_part(name) == part
    assert name_of_path_part(part) == name


def test_table_path_joins_root_schema_and_table() -> None:
    assert table_path("s3://bucket/lake/", "Sales EU", "orders") == (
        "s3://bucket/lake/Sales_x0020_EU/orders"
    )
    assert table_path("/lake", "public", "orders") == "/lake/public/orders"


@pytest.mark.parametrize(
    "path",
    [
        "/lake/_wal2delta_messages",  # the lake's own table
        "/lake/_wal2delta_snapshots",
        "/lake/public",
        "/lake/public/orders/extra",
        "/lake/sp%20ace/orders",  # percent-encoded by an engine: not ours
        "/lake/public/a b",
        "/lake/public/a~b",  # a character no location part holds
        "/lake/public/_x0061_",  # 'a' is never escaped
        "/elsewhere/public/orders",
    ],
)
def test_table_of_path_refuses_what_no_table_maps_to(path: str) -> None:
    assert table_of_path("/lake", path) is None


@given(identifiers)
def test_a_mapped_column_name_is_one_delta_can_hold_and_decodes_to_the_name(name: str) -> None:
    mapped = mapped_column_name(name)
    assert delta_can_hold(mapped)
    assert DELTA_INVALID_CHARACTERS.isdisjoint(mapped)
    assert source_column_name(mapped) == name


@given(identifiers, identifiers)
def test_two_columns_never_share_a_mapped_name(first: str, second: str) -> None:
    if first != second:
        assert mapped_column_name(first) != mapped_column_name(second)


@pytest.mark.parametrize(
    ("name", "mapped"),
    [
        ("id", "id"),
        ("имя", "имя"),  # Delta holds non-ASCII names
        ("a.b", "a.b"),
        ("back`tick", "back`tick"),
        ("unit price", "unit_x0020_price"),
        ("f(x)", "f_x0028_x_x0029_"),
        ("k=v", "k_x003D_v"),
        ("a,b;c", "a_x002C_b_x003B_c"),
        ("{x}", "_x007B_x_x007D_"),
        ("tab\there", "tab_x0009_here"),
        ("line\nbreak", "line_x000A_break"),
        ("a_x0020_b", "a_x005F_x0020_b"),
        ("pos_x", "pos_x"),
    ],
)
def test_mapped_column_names(name: str, mapped: str) -> None:
    assert mapped_column_name(name) == mapped
    assert source_column_name(mapped) == name


def test_only_the_map_policy_renames_columns() -> None:
    assert delta_column_name("unit price", "error") == "unit price"
    assert delta_column_name("unit price", "map") == "unit_x0020_price"
    names = ["id", "unit price", "f(x)", "имя"]
    assert column_map(names, "error") == {}
    assert column_map(names, "map") == {
        "unit price": "unit_x0020_price",
        "f(x)": "f_x0028_x_x0029_",
    }


def test_source_column_name_refuses_names_the_map_does_not_produce() -> None:
    assert source_column_name("a_x0061_") is None  # 'a' would not be escaped
    assert source_column_name("a b") is None  # not a Delta name the map produces
