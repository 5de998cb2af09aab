"""Loading a configuration: file -> YAML -> ``${VAR}`` interpolation -> ``AppConfig``.

Theory of operation
-------------------
``load_config`` reads one file and hands the parsed document to ``parse_config``, which
interpolates environment variables into string values (``config.interpolation``) and
validates the result against ``AppConfig``. Every stage reports problems as
``(path, message)`` pairs and nothing stops at the first one: a file with a missing
variable, an unknown key and a bad duration yields one ``ConfigError`` listing all three.

Paths are dotted field paths as pydantic locates them, list items by index
(``source.tables.1.key``); problems with the file itself carry the file name, and YAML
syntax errors its line and column (``config.yaml:4:9``), both 1-based as editors count.

The YAML loader is PyYAML's safe loader with one change: a key repeated in the same
mapping is an error. PyYAML keeps the last value silently, which turns a pasted
``source:`` block into a configuration nobody wrote.

Pydantic's messages are kept (``Input should be a valid integer``) with three
improvements: an unknown key lists the allowed keys and the closest match, a rule
between fields points at the field to change (``FieldRuleError``), and enum errors show the
value given, except for ``dsn`` and ``password`` whose values are never echoed.

Nothing here has side effects besides reading the configuration file and, through the
model, the password file.
"""

from __future__ import annotations

import difflib
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from config.errors import ConfigError
from config.interpolation import interpolate
from config.models import AppConfig, FieldRuleError, Location

# Fields whose input value must never appear in an error message.
_SECRET_FIELDS: Final = frozenset({"dsn", "password", "conf"})
# Error types whose message reads better with the rejected input next to it.
_ECHO_INPUT: Final = frozenset(
    {"literal_error", "int_parsing", "bool_parsing", "float_parsing", "enum"}
)


class _StrictSafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key that appears twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[object, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                # An unhashable key (a list as key); let the base class report it.
                break
            if duplicate:
                first = seen[key].start_mark
                raise yaml.constructor.ConstructorError(
                    f"while constructing a mapping (first {key!r} on line {first.line + 1})",
                    node.start_mark,
                    f"duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def load_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> AppConfig:
    """Read, interpolate and validate one configuration file.

    Args:
        path: the YAML file.
        environ: environment for ``${VAR}`` references; ``os.environ`` when omitted.

    Returns:
        The validated configuration.

    Raises:
        ConfigError: the file cannot be read, is not valid YAML, or the configuration
            is invalid; ``errors`` lists every problem and ``source`` names the file.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([(source, "file not found")], source=source) from None
    except IsADirectoryError:
        raise ConfigError([(source, "is a directory, not a file")], source=source) from None
    except PermissionError:
        raise ConfigError([(source, "permission denied")], source=source) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [(source, f"not UTF-8 text (invalid byte at offset {exc.start})")], source=source
        ) from None
    except OSError as exc:
        raise ConfigError([(source, f"cannot read: {exc.strerror}")], source=source) from None
    try:
        document = yaml.load(text, Loader=_StrictSafeLoader)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([_yaml_problem(source, exc)], source=source) from None
    except yaml.YAMLError as exc:
        raise ConfigError([(source, f"invalid YAML: {exc}")], source=source) from None
    return _parse(document, environ=environ, source=source)


def parse_config(
    data: Mapping[str, object], *, environ: Mapping[str, str] | None = None
) -> AppConfig:
    """Interpolate and validate an already loaded configuration document.

    Args:
        data: the document, as ``yaml.safe_load`` returns it.
        environ: environment for ``${VAR}`` references; ``os.environ`` when omitted.

    Returns:
        The validated configuration.

    Raises:
        ConfigError: the configuration is invalid; ``errors`` lists every problem.
    """
    return _parse(data, environ=environ, source=None)


def _parse(document: object, *, environ: Mapping[str, str] | None, source: str | None) -> AppConfig:
    if document is None:
        raise ConfigError([("", "the configuration is empty")], source=source)
    if not isinstance(document, Mapping):
        raise ConfigError(
            [("", f"expected a mapping of sections (source:, sink:, ...), got {_kind(document)}")],
            source=source,
        )
    interpolated, interpolation_problems = interpolate(
        document, os.environ if environ is None else environ
    )
    problems: list[tuple[Location, str]] = list(interpolation_problems)
    try:
        config = AppConfig.model_validate(interpolated)
    except ValidationError as exc:
        # A variable that was not set was replaced by "", which may fail validation
        # too; the interpolation message is the one that says what to fix.
        unset = {location for location, _ in interpolation_problems}
        for location, message in _validation_problems(exc):
            if not any(location[: len(prefix)] == prefix for prefix in unset):
                problems.append((location, message))
    else:
        if not problems:
            return config
    raise ConfigError(
        [(_format_location(location), message) for location, message in problems], source=source
    )


def _validation_problems(exc: ValidationError) -> list[tuple[Location, str]]:
    """Turn pydantic's errors into ``(location, message)`` pairs, all of them."""
    problems: list[tuple[Location, str]] = []
    for error in exc.errors(include_url=False):
        location: Location = tuple(error["loc"])
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, FieldRuleError):
            problems.extend((location + relative, message) for relative, message in cause.problems)
            continue
        problems.append((location, _message(error, location)))
    return problems


def _message(error: ErrorDetails, location: Location) -> str:
    kind = error["type"]
    message = error["msg"]
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return _unknown_key_message(location)
    secret = any(part in _SECRET_FIELDS for part in location if isinstance(part, str))
    if kind in _ECHO_INPUT and not secret:
        return f"{message} (got {_short_repr(error['input'])})"
    return message


def _unknown_key_message(location: Location) -> str:
    key = location[-1]
    model = _model_at(location[:-1])
    if model is None:
        return "unknown key"
    allowed = list(model.model_fields)
    close = difflib.get_close_matches(str(key), allowed, n=1)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    return f"unknown key (allowed: {', '.join(allowed)})"


def _model_at(location: Location) -> type[BaseModel] | None:
    """The model class that validates the value at ``location``, if there is one."""
    annotation: object = AppConfig
    for part in location:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
            continue
        origin = typing.get_origin(annotation)
        arguments = typing.get_args(annotation)
        if origin in {tuple, list} and isinstance(part, int) and arguments:
            annotation = arguments[0]
        elif origin is dict and len(arguments) == 2:
            annotation = arguments[1]
        else:
            return None
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _unwrap(annotation: object) -> object:
    """Strip ``Annotated`` and ``X | None`` down to the type that carries the fields."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in {typing.Union, types.UnionType}:
            members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _format_location(location: Location) -> str:
    return ".".join(str(part) for part in location)


def _yaml_problem(source: str, exc: yaml.MarkedYAMLError) -> tuple[str, str]:
    mark = exc.problem_mark or exc.context_mark
    where = source if mark is None else f"{source}:{mark.line + 1}:{mark.column + 1}"
    problem = exc.problem or "syntax error"
    context = f" ({exc.context})" if exc.context else ""
    return where, f"invalid YAML: {problem}{context}"


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


def _short_repr(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
