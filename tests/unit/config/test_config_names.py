"""Table names and DSN redaction."""

import pytest

from config import format_table_name, parse_table_name, redact_dsn


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("orders", ("public", "orders")),
        ("sales.orders", ("sales", "orders")),
        ("public.Orders", ("public", "Orders")),
        ('"sales.eu".orders', ("sales.eu", "orders")),
        ('public."say ""hi"""', ("public", 'say "hi"')),
        ('"a b"."c d"', ("a b", "c d")),
    ],
)
def test_table_names_are_exact_catalog_names(text: str, expected: tuple[str, str]) -> None:
    assert parse_table_name(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", ".", "a.", ".b", "a.b.c", '"unterminated', 'a"b.c', '"a"x.b', "public. orders", "x" * 64],
)
def test_malformed_table_names_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="name"):
        parse_table_name(text)


@pytest.mark.parametrize(
    ("schema", "table"), [("public", "orders"), ("sales.eu", "orders"), ("public", 'say "hi"')]
)
def test_format_table_name_round_trips(schema: str, table: str) -> None:
    assert parse_table_name(format_table_name(schema, table)) == (schema, table)


def test_format_table_name_quotes_only_parts_that_need_it() -> None:
    assert format_table_name("public", "orders") == "public.orders"
    assert format_table_name("sales.eu", "Orders") == '"sales.eu".Orders'


@pytest.mark.parametrize(
    ("dsn", "redacted"),
    [
        ("host=db password=secret user=app", "host=db password=**** user=app"),
        ("password = 'se cret' host=db", "password = **** host=db"),
        (r"password='it\'s' host=db", "password=**** host=db"),
        ("password='unterminated", "password=****"),
        ("host=db user=app", "host=db user=app"),
        ("host=db mypassword=x", "host=db mypassword=x"),
        ("postgresql://app:secret@db:5432/app", "postgresql://app:****@db:5432/app"),
        ("postgres://app:p@ss@db/app", "postgres://app:****@db/app"),
        ("postgresql://app@db/app", "postgresql://app@db/app"),
        (
            "postgresql://db/app?user=app&password=secret&sslmode=require",
            "postgresql://db/app?user=app&password=****&sslmode=require",
        ),
    ],
)
def test_redact_dsn_masks_every_password_form(dsn: str, redacted: str) -> None:
    assert redact_dsn(dsn) == redacted
