"""User types in binary mode: readers built from catalog descriptions, without a server.

The descriptions below stand for what ``PostgresCatalog.describe_type`` reads; the bytes
follow ``enum_send``, ``array_send`` and ``record_send``. The integration test
``test_binary_text_forms.py`` runs the same kinds of values through a real catalog.

``capture/catalog.py`` imports every kind of type description that ``decoder/__init__.py``
exports, because it builds each kind: the two lists are parallel on purpose
(``duplicates`` reports them as a pair).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import adapt, postgres
from psycopg.pq import Format

from decoder import (
    ArrayType,
    CompositeField,
    CompositeType,
    DomainType,
    EnumType,
    OpaqueType,
    RangeType,
    TypeDescription,
    UnknownBinaryFormatError,
    UserTypeForms,
)

INT4, TEXT, NUMERIC, BOX = 23, 25, 1700, 603
MOOD, MOODS = 90_001, 90_002
POSINT, NESTED, INTS, BOXD, BOXDS = 90_010, 90_011, 90_012, 90_013, 90_014
PAIR, PAIRS, OUTER = 90_020, 90_021, 90_022
CITEXT, TAGGED = 90_030, 90_031
POSRANGE = 90_040

TEXT_ARRAY = adapt.Transformer().get_loader(postgres.types["text"].array_oid, Format.TEXT)

CATALOG: dict[int, TypeDescription] = {
    MOOD: EnumType(MOOD, "public", "mood"),
    MOODS: ArrayType(MOODS, "public", "_mood", MOOD),
    POSINT: DomainType(POSINT, "public", "posint", INT4),
    NESTED: DomainType(NESTED, "public", "nested", POSINT),
    INTS: DomainType(INTS, "public", "ints", 1007),
    BOXD: DomainType(BOXD, "public", "boxd", BOX),
    BOXDS: ArrayType(BOXDS, "public", "_boxd", BOXD, ";"),
    PAIR: CompositeType(
        PAIR, "public", "pair", (CompositeField("a", POSINT), CompositeField("b", TEXT))
    ),
    PAIRS: ArrayType(PAIRS, "public", "_pair", PAIR),
    OUTER: CompositeType(
        OUTER,
        "app",
        "outer",
        (
            CompositeField("pair", PAIR),
            CompositeField("moods", MOODS),
            CompositeField("amount", NUMERIC),
        ),
    ),
    CITEXT: OpaqueType(CITEXT, "public", "citext", "b"),
    TAGGED: CompositeType(
        TAGGED, "public", "tagged", (CompositeField("id", INT4), CompositeField("tag", CITEXT))
    ),
    POSRANGE: RangeType(POSRANGE, "public", "posrange", POSINT),
}


def int4(value: int) -> bytes:
    return struct.pack(">i", value)


def array(element: int, items: Sequence[bytes | None], lower: int = 1) -> bytes:
    out = struct.pack(">iiI", 1, None in items, element) + struct.pack(">ii", len(items), lower)
    for item in items:
        out += struct.pack(">i", -1) if item is None else struct.pack(">i", len(item)) + item
    return out


def record(fields: Sequence[tuple[int, bytes | None]]) -> bytes:
    out = struct.pack(">i", len(fields))
    for type_oid, data in fields:
        out += struct.pack(">Ii", type_oid, -1 if data is None else len(data))
        out += data or b""
    return out


def numeric(digits: Sequence[int], weight: int, dscale: int) -> bytes:
    return struct.pack(f">hhHh{len(digits)}h", len(digits), weight, 0, dscale, *digits)


class CountingLookup:
    """The catalog above, counting the questions it is asked."""

    def __init__(self, catalog: dict[int, TypeDescription] | None = None) -> None:
        self.catalog = CATALOG if catalog is None else catalog
        self.asked: list[int] = []

    def __call__(self, type_oid: int) -> TypeDescription | None:
        self.asked.append(type_oid)
        return self.catalog.get(type_oid)


def read(type_oid: int, data: bytes) -> str:
    return UserTypeForms(CountingLookup()).reader(type_oid)(data)


def test_an_enum_prints_its_label() -> None:
    assert read(MOOD, b"with space") == "with space"


def test_domains_print_as_their_base_type_however_deep() -> None:
    assert read(POSINT, int4(42)) == "42"
    assert read(NESTED, int4(-7)) == "-7"
    assert read(INTS, array(INT4, [int4(1), None])) == "{1,NULL}"


def test_an_array_of_enums_quotes_as_array_out_does() -> None:
    labels = [b"sad", b"with space", None, b"NULL", b"null", b'quo"te', b"", b"a,b", b"{x}"]
    assert read(MOODS, array(MOOD, labels)) == (
        '{sad,"with space",NULL,"NULL","null","quo\\"te","","a,b","{x}"}'
    )
    assert read(MOODS, array(MOOD, [b"sad", b"happy"], lower=0)) == "[0:1]={sad,happy}"


def test_an_array_separates_elements_with_the_element_types_delimiter() -> None:
    box = struct.pack(">4d", 1, 1, 0, 0)
    assert read(BOXDS, array(BOXD, [box, box])) == "{(1,1),(0,0);(1,1),(0,0)}"


def test_a_composite_prints_nulls_as_nothing_and_quotes_as_record_out_does() -> None:
    assert read(PAIR, record([(POSINT, int4(1)), (TEXT, b"x")])) == "(1,x)"
    assert read(PAIR, record([(POSINT, None), (TEXT, None)])) == "(,)"
    assert read(PAIR, record([(POSINT, int4(2)), (TEXT, b"")])) == '(2,"")'
    assert read(PAIR, record([(POSINT, int4(3)), (TEXT, b'a "q", (p) \\ b')])) == (
        '(3,"a ""q"", (p) \\\\ b")'
    )


def test_nested_composites_and_arrays_are_quoted_at_each_level() -> None:
    pair = record([(POSINT, int4(1)), (TEXT, b"a b")])
    moods = array(MOOD, [b"sad", b"with space"])
    outer = record([(PAIR, pair), (MOODS, moods), (NUMERIC, numeric([12, 5000], 0, 2))])
    assert read(OUTER, outer) == '("(1,""a b"")","{sad,""with space""}",12.50)'
    pairs = array(PAIR, [pair, None, record([(POSINT, None), (TEXT, b"")])])
    assert read(PAIRS, pairs) == '{"(1,\\"a b\\")",NULL,"(,\\"\\")"}'


def test_a_range_over_a_domain_prints_its_bounds_as_the_base_type() -> None:
    data = b"\x02" + struct.pack(">i", 4) + int4(1) + struct.pack(">i", 4) + int4(10)
    assert read(POSRANGE, data) == "[1,10)"


def test_each_type_is_described_once_whatever_the_number_of_values() -> None:
    lookup = CountingLookup()
    forms = UserTypeForms(lookup)
    reader = forms.reader(OUTER)
    pair = record([(POSINT, int4(1)), (TEXT, b"x")])
    value = record([(PAIR, pair), (MOODS, array(MOOD, [b"sad"])), (NUMERIC, None)])
    for _ in range(3):
        assert reader(value) == '("(1,x)",{sad},)'
        assert forms.reader(OUTER) is reader
    assert sorted(lookup.asked) == sorted({OUTER, PAIR, POSINT, MOODS, MOOD})


def test_a_type_without_a_known_layout_fails_naming_it_and_its_container() -> None:
    forms = UserTypeForms(CountingLookup())
    value = record([(INT4, int4(1)), (CITEXT, b"x")])
    with pytest.raises(UnknownBinaryFormatError) as caught:
        forms.reader(TAGGED)(value)
    message = str(caught.value)
    assert caught.value.type_name == "public.tagged"
    assert "field 'tag'" in message
    assert "public.citext" in message
    assert "binary: false" in message


@pytest.mark.parametrize(
    ("forms", "reason"),
    [
        (UserTypeForms(None), "no source catalog describes it"),
        (UserTypeForms(CountingLookup({})), "the source catalog has no such type"),
    ],
    ids=["no catalog", "gone"],
)
def test_an_undescribed_user_type_fails_when_its_value_arrives(
    forms: UserTypeForms, reason: str
) -> None:
    reader = forms.reader(MOOD)  # building the reader never fails: text mode needs none
    with pytest.raises(UnknownBinaryFormatError, match=reason) as caught:
        reader(b"sad")
    assert caught.value.type_name == f"type OID {MOOD}"


def test_builtin_types_whose_text_needs_the_server_are_named_with_the_reason() -> None:
    forms = UserTypeForms(None)
    with pytest.raises(UnknownBinaryFormatError, match="name the catalog gives"):
        forms.reader(2205)(struct.pack(">I", 1259))


def test_builtin_types_need_no_catalog() -> None:
    lookup = CountingLookup()
    forms = UserTypeForms(lookup)
    assert forms.reader(INT4)(int4(5)) == "5"
    assert forms.reader(1007)(array(INT4, [int4(1)])) == "{1}"
    assert lookup.asked == []


def test_a_type_that_contains_itself_is_built_without_recursing_for_ever() -> None:
    loop = 90_099
    lookup = CountingLookup(
        {loop: CompositeType(loop, "public", "loop", (CompositeField("self", loop),))}
    )
    reader = UserTypeForms(lookup).reader(loop)
    assert reader(record([(loop, record([(loop, None)]))])) == '("()")'
    assert lookup.asked == [loop]


@given(
    st.lists(
        st.one_of(st.none(), st.sampled_from(["sad", "with space", "NULL", "", "a\\b", 'q"'])),
        min_size=1,
    )
)
def test_arrays_of_enums_parse_back_to_their_labels(labels: list[str | None]) -> None:
    data = array(MOOD, [None if label is None else label.encode() for label in labels])
    assert TEXT_ARRAY.load(read(MOODS, data).encode()) == labels
