"""Positions in config sources and the one error type the config package raises."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pos:
    """A place in a config source. ``line`` and ``col`` are 1-based; col counts characters."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def short(self) -> str:
        """``line:col``, for pointing back at another place in the same file."""
        return f"{self.line}:{self.col}"


class ConfigError(Exception):
    """A config that cannot be used. ``str()`` is ``file:line:col: message``.

    ``pos`` is None for problems that have no single place (command-line flags,
    cross-field checks); then the text is prefixed by the file name when known.
    """

    def __init__(self, message: str, pos: Pos | None = None, *, file: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos
        self.file = pos.file if pos is not None else file

    @property
    def line(self) -> int:
        return self.pos.line if self.pos is not None else 0

    @property
    def column(self) -> int:
        return self.pos.col if self.pos is not None else 0

    def __str__(self) -> str:
        if self.pos is not None:
            return f"{self.pos}: {self.message}"
        if self.file:
            return f"{self.file}: {self.message}"
        return self.message
