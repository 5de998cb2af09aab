"""Connection strings: keeping passwords out of everything that is shown.

A DSN is either libpq key/value pairs (``host=db user=app password=secret``) or a URI
(``postgresql://app:secret@db/app?sslmode=require``). ``redact_dsn`` replaces every
password it can find with ``****`` and leaves the rest as written, so a redacted DSN in a
log line still shows which host and database were meant. It works on text that libpq
would reject too, because the DSN that fails to parse is exactly the one an operator
needs to see in the error message.

It is a textual scrubber, not a parser: it covers ``password=`` pairs (quoted or not,
with spaces around ``=``), the ``user:password@`` part of a URI and a ``password=``
query parameter. The ``SourceConfig`` model uses it in ``repr`` and ``model_dump``.
"""

from __future__ import annotations

import re
from typing import Final

REDACTED: Final = "****"

_URI_PREFIXES: Final = ("postgresql://", "postgres://")
# A key/value ``password`` keyword: at the start or after whitespace, then ``=`` with
# optional spaces, then a single-quoted value (backslash escapes, possibly unterminated)
# or a run of non-space characters, as libpq's conninfo_parse reads it.
_KEYWORD_PASSWORD: Final = re.compile(
    r"(?P<key>(?:^|(?<=\s))password\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*(?:'|\\?$)|[^\s']\S*|(?=\s|$))"
)
_QUERY_PASSWORD: Final = re.compile(r"(?P<key>[?&]password=)(?P<value>[^&#]*)")


def redact_dsn(dsn: str) -> str:
    """Return ``dsn`` with every password replaced by ``****``.

    Args:
        dsn: a libpq key/value connection string or a ``postgresql://`` URI.

    Returns:
        The same text with passwords masked; text without a password is unchanged.
    """
    stripped = dsn.lstrip()
    if stripped.startswith(_URI_PREFIXES):
        return _redact_uri(dsn)
    return _KEYWORD_PASSWORD.sub(lambda m: m.group("key") + REDACTED, dsn)


def _redact_uri(uri: str) -> str:
    """Mask ``user:password@`` in the authority and ``password=`` in the query."""
    scheme_end = uri.index("://") + 3
    # libpq ends the authority at the first '/' or '?'; the userinfo is everything
    # before the last '@' in it, so a password with a stray '@' is still masked whole.
    authority_end = len(uri)
    for stop in ("/", "?"):
        found = uri.find(stop, scheme_end)
        if found != -1:
            authority_end = min(authority_end, found)
    authority = uri[scheme_end:authority_end]
    at = authority.rfind("@")
    if at != -1:
        userinfo = authority[:at]
        colon = userinfo.find(":")
        if colon != -1:
            authority = userinfo[: colon + 1] + REDACTED + authority[at:]
    rest = _QUERY_PASSWORD.sub(lambda m: m.group("key") + REDACTED, uri[authority_end:])
    return uri[:scheme_end] + authority + rest


_SPARK_SECRET_PARAM: Final = re.compile(
    r"(?P<key>;\s*[A-Za-z_]*(?:token|password|secret)[A-Za-z_]*\s*=)[^;]*", re.IGNORECASE
)


def redact_spark_url(url: str) -> str:
    """Return a Spark Connect URL with its secrets masked.

    ``sc://host:15002/;token=abc;user_id=me`` becomes ``sc://host:15002/;token=****;user_id=me``:
    every ``;name=value`` parameter whose name holds ``token``, ``password`` or ``secret``.
    """
    return _SPARK_SECRET_PARAM.sub(lambda m: m.group("key") + REDACTED, url)
