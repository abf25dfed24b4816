"""Named connection contexts, stored where and as the nats CLI stores them.

``$XDG_CONFIG_HOME/nats/context/<name>.json`` (``~/.config`` when XDG_CONFIG_HOME is unset)
holds one context each, with the nats CLI's JSON keys, and ``nats/context.txt`` names the
selected one. Sharing the layout means a context saved by ``nats context save`` works with
``jetraft`` and the other way round.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from jetraft.cli.errors import CliError

_NAME = re.compile(r"^[A-Za-z0-9_.@-]+$")


@dataclass
class Context:
    """The fields jetraft uses; unknown keys in a file are kept when it is re-saved."""

    description: str = ""
    url: str = ""
    user: str = ""
    password: str = ""
    token: str = ""
    creds: str = ""
    nkey: str = ""
    cert: str = ""
    key: str = ""
    ca: str = ""
    tls_first: bool = False
    inbox_prefix: str = ""
    jetstream_domain: str = ""
    jetstream_api_prefix: str = ""

    def to_json(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = dict(extra or {})
        for f in fields(self):
            body[f.name] = getattr(self, f.name)
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Context:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in body.items() if k in known and v is not None}
        return cls(**values)


def config_root() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else Path.home() / ".config"
    return base / "nats"


def _context_dir() -> Path:
    return config_root() / "context"


def validate_name(name: str) -> None:
    if not _NAME.match(name) or name in (".", ".."):
        raise CliError(f"invalid context name {name!r}: use letters, digits, '.', '_', '-', '@'")


def context_path(name: str) -> Path:
    validate_name(name)
    return _context_dir() / f"{name}.json"


def known_contexts() -> list[str]:
    folder = _context_dir()
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.json"))


def load_raw(name: str) -> dict[str, Any]:
    path = context_path(name)
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        raise CliError(f"unknown context {name!r}") from None
    except (OSError, ValueError) as exc:
        raise CliError(f"could not read context {name!r} from {path}: {exc}") from None
    if not isinstance(body, dict):
        raise CliError(f"context file {path} does not hold a JSON object")
    return body


def load(name: str) -> Context:
    return Context.from_json(load_raw(name))


def save(name: str, ctx: Context) -> Path:
    path = context_path(name)
    extra: dict[str, Any] = {}
    if path.exists():
        extra = load_raw(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(ctx.to_json(extra), indent=2) + "\n")
    os.chmod(tmp, 0o600)  # contexts may hold passwords
    tmp.replace(path)
    return path


def delete(name: str) -> None:
    path = context_path(name)
    if not path.exists():
        raise CliError(f"unknown context {name!r}")
    path.unlink()


def selected() -> str:
    try:
        return (config_root() / "context.txt").read_text().strip()
    except OSError:
        return ""


def select(name: str) -> None:
    if not context_path(name).exists():
        raise CliError(f"unknown context {name!r}")
    root = config_root()
    root.mkdir(parents=True, exist_ok=True)
    previous = selected()
    if previous and previous != name:
        (root / "previous-context.txt").write_text(previous)
    (root / "context.txt").write_text(name)


def unselect() -> None:
    path = config_root() / "context.txt"
    if path.exists():
        path.unlink()
