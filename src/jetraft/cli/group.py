"""A click group whose commands have aliases (``stream``/``str``/``s``), as the nats CLI's do."""

from __future__ import annotations

from typing import Any

import click


class AliasGroup(click.Group):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aliases: dict[str, str] = {}

    def alias(self, canonical: str, *names: str) -> None:
        for name in names:
            self.aliases[name] = canonical

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.aliases.get(cmd_name, cmd_name))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        _, cmd, rest = super().resolve_command(ctx, args)
        # Report the canonical name so usage lines and errors use it.
        return (cmd.name if cmd else None), cmd, rest

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        by_target: dict[str, list[str]] = {}
        for alias, target in self.aliases.items():
            by_target.setdefault(target, []).append(alias)
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            label = name + (f" ({', '.join(by_target[name])})" if name in by_target else "")
            rows.append((label, cmd.get_short_help_str(limit=70)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def group(name: str, help_text: str, *aliases: str, parent: AliasGroup | None = None) -> AliasGroup:
    """A new alias-aware group, registered under ``parent`` with ``aliases``."""
    grp = AliasGroup(name=name, help=help_text)
    if parent is not None:
        parent.add_command(grp)
        parent.alias(name, *aliases)
    return grp
