"""Output: aligned "label: value" sections, tables, JSON, and time-stamped log lines.

On a terminal, tables are drawn by Rich with borders and section titles are bold. When stdout
is not a terminal the same content is printed as plain, stable text (no colour, no borders,
no wrapping) so scripts can rely on it; ``--json`` is the machine-readable form.
Log lines (``14:32:17 Requesting leader step down ...``) go to stderr, as the nats CLI's do.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text


def stdout_is_tty() -> bool:
    if os.environ.get("JETRAFT_FORCE_PLAIN"):
        return False
    return sys.stdout.isatty()


def stdin_is_tty() -> bool:
    return sys.stdin.isatty()


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def log(message: str) -> None:
    """``HH:MM:SS message`` on stderr."""
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def log_step_down(leader: str, peers: int) -> None:
    """The line every step-down starts with, as the seeds show it."""
    log(f'Requesting leader step down of "{leader or "<unknown>"}" in a {peers} peer RAFT group')


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def strip_api_type(reply: dict[str, Any]) -> dict[str, Any]:
    """An API reply without its ``type`` marker, for ``--json`` output."""
    return {k: v for k, v in reply.items() if k != "type"}


@dataclass
class _Row:
    kind: str  # "row" | "title" | "line"
    label: str = ""
    value: str = ""


@dataclass
class Columns:
    """A heading, then sections of right-aligned ``Label: value`` rows.

    Every label in the writer is padded to the longest one plus two spaces, so a whole info
    page lines up on its colons (the layout the seeds show).
    """

    heading: str
    rows: list[_Row] = field(default_factory=list)

    def row(self, label: str, value: object) -> None:
        self.rows.append(_Row("row", label, _cell(value)))

    def row_if(self, label: str, value: object, condition: bool) -> None:
        if condition:
            self.row(label, value)

    def row_if_set(self, label: str, value: str | None) -> None:
        if value:
            self.row(label, value)

    def title(self, text: str) -> None:
        self.rows.append(_Row("title", text))

    def line(self, text: str = "") -> None:
        self.rows.append(_Row("line", value=text))

    def render(self) -> str:
        width = max((len(r.label) for r in self.rows if r.kind == "row"), default=0) + 2
        out = [self.heading, ""] if self.heading else []
        prev = ""
        for i, r in enumerate(self.rows):
            if r.kind == "title":
                if i and prev not in ("title", "blank"):
                    out.append("")
                out += [f"{r.label}:", ""]
            elif r.kind == "row":
                pad = " " * (width - len(r.label))
                out.append(
                    f"{pad}{r.label}: {r.value}" if r.label else f"{' ' * (width + 1)} {r.value}"
                )
            else:
                if prev == "title" and not r.value:
                    continue
                out.append(r.value)
            prev = "blank" if r.kind == "line" and not r.value else r.kind
        return "\n".join(out)

    def print(self) -> None:
        text = self.render()
        if stdout_is_tty():
            con = _console()
            for line in text.split("\n"):
                styled = Text(line)
                if line.endswith(":") and not line.startswith(" "):
                    styled.stylize("bold")
                con.print(styled)
        else:
            print(text)


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


@dataclass
class Table:
    """A titled table; Rich borders on a terminal, aligned plain columns otherwise."""

    title: str
    headers: Sequence[str]
    rows: list[list[str]] = field(default_factory=list)
    footer: list[str] | None = None

    def add(self, *cells: object) -> None:
        self.rows.append([_cell(c) for c in cells])

    def set_footer(self, *cells: object) -> None:
        self.footer = [_cell(c) for c in cells]

    def render_plain(self) -> str:
        body = [list(self.headers), *self.rows]
        if self.footer is not None:
            body.append(self.footer)
        widths = [max(len(r[i]) for r in body if i < len(r)) for i in range(len(self.headers))]
        lines = [self.title, ""] if self.title else []
        for r in body:
            cells = [c.ljust(widths[i]) for i, c in enumerate(r)]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)

    def print(self) -> None:
        if not stdout_is_tty():
            print(self.render_plain())
            return
        table = RichTable(title=self.title or None, show_footer=self.footer is not None)
        for i, h in enumerate(self.headers):
            foot = self.footer[i] if self.footer is not None and i < len(self.footer) else ""
            table.add_column(h, footer=foot)
        for r in self.rows:
            table.add_row(*r)
        _console().print(table)
