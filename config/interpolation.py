"""``${VAR}`` interpolation of configuration values, before validation.

Every *string value* in the loaded document (not the keys) is scanned once, left to
right:

- ``${NAME}`` is replaced by the environment variable ``NAME``; when it is not set, the
  field is reported as an error naming the variable.
- ``${NAME:-default}`` uses ``default`` when ``NAME`` is unset *or empty*, as the shell
  does. The default is literal text: it is not interpolated again.
- ``$$`` is a literal ``$``. A ``$`` followed by anything else than ``{`` or ``$`` is kept
  as written, so a password like ``pa$word`` typed straight into the file survives.
- ``${`` that does not form one of the above (``${1X}``, an unclosed brace) is an error
  rather than literal text, because it is almost always a typo in a variable reference.

The replacement is never re-scanned, so a variable whose value contains ``${...}`` is
inserted verbatim. The result stays a string; pydantic converts ``"5432"`` to an
integer or ``"true"`` to a boolean where the field asks for one.

Errors are collected for the whole document and carry the dotted field path of the value
(``source.password``), so they read like validation errors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

_TOKEN: Final = re.compile(
    r"\$(?:(?P<dollar>\$)|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}|(?P<bad>\{))"
)


def interpolate(
    data: object, environ: Mapping[str, str], *, path: tuple[str | int, ...] = ()
) -> tuple[object, list[tuple[tuple[str | int, ...], str]]]:
    """Replace variable references in every string value of a loaded document.

    Args:
        data: the document as loaded from YAML: mappings, lists and scalars.
        environ: where variables are looked up.
        path: the location of ``data`` in the whole document, for error paths.

    Returns:
        The document with references replaced (new containers; the input is not
        modified) and the list of ``(location, message)`` problems found.
    """
    problems: list[tuple[tuple[str | int, ...], str]] = []
    result = _walk(data, environ, path, problems)
    return result, problems


def _walk(
    data: object,
    environ: Mapping[str, str],
    path: tuple[str | int, ...],
    problems: list[tuple[tuple[str | int, ...], str]],
) -> object:
    if isinstance(data, str):
        return _substitute(data, environ, path, problems)
    if isinstance(data, Mapping):
        return {
            key: _walk(value, environ, (*path, _path_key(key)), problems)
            for key, value in data.items()
        }
    if isinstance(data, list | tuple):
        return [_walk(item, environ, (*path, index), problems) for index, item in enumerate(data)]
    return data


def _path_key(key: object) -> str | int:
    return key if isinstance(key, str | int) else str(key)


def _substitute(
    text: str,
    environ: Mapping[str, str],
    path: tuple[str | int, ...],
    problems: list[tuple[tuple[str | int, ...], str]],
) -> str:
    """Interpolate one string value, recording problems under ``path``."""

    def replace(match: re.Match[str]) -> str:
        if match.group("dollar") is not None:
            return "$"
        if match.group("bad") is not None:
            problems.append(
                (
                    path,
                    "invalid variable reference: write ${NAME} or ${NAME:-default} with NAME "
                    "made of letters, digits and underscores, or $$ for a literal $",
                )
            )
            return match.group(0)
        name = match.group("name")
        default = match.group("default")
        value = environ.get(name)
        if default is not None:
            return value if value else default
        if value is None:
            problems.append((path, f"environment variable {name} is not set"))
            return ""
        return value

    return _TOKEN.sub(replace, text)
