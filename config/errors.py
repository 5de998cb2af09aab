"""The one error the config package raises.

``ConfigError`` collects *every* problem found in a configuration, not only the first,
so an operator fixes a file in one pass. Each problem is a ``(path, message)`` pair: the
dotted field path (``sink.batch.max_rows``, list items by index: ``source.tables.1.key``)
or, for problems with the file itself, the file name with line and column
(``/etc/wal2delta/config.yaml:3:7``).

It derives from ``ValueError`` and not from ``decoder.Wal2DeltaError`` because ``config``
imports nothing of ours (docs/internal-contracts.md); ``capture`` classifies it as terminal
(exit code 2) at its boundary.
"""

from __future__ import annotations

from collections.abc import Iterable

#: How a problem without a field path (the document itself) is shown.
TOP_LEVEL: str = "(top level)"


class ConfigError(ValueError):
    """An invalid configuration: every problem found, each with the field it concerns.

    Attributes:
        errors: ``(field path, message)`` pairs in document order; the path is ``""``
            for a problem with the document as a whole.
        source: the file the configuration came from, when it came from a file.
    """

    def __init__(self, errors: Iterable[tuple[str, str]], *, source: str | None = None) -> None:
        self.errors: list[tuple[str, str]] = list(errors)
        self.source = source
        super().__init__(self.errors, source)

    def __str__(self) -> str:
        return "\n".join(f"{path or TOP_LEVEL}: {message}" for path, message in self.errors)

    def __reduce__(
        self,
    ) -> tuple[type[ConfigError], tuple[list[tuple[str, str]]], dict[str, object]]:
        # Keyword-only ``source`` does not survive the default exception pickling, which
        # replays ``self.args`` positionally; errors cross process boundaries in tests.
        return (type(self), (self.errors,), {"source": self.source})
