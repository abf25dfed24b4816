"""SIGHUP: read the configuration again and apply what can change in a running server.

What can change today is how the server logs (``debug``, ``trace``, ``trace_verbose``,
``logtime``, ``logtime_utc``). Any other change is refused as a whole, the way nats-server
refuses a reload it does not support: the error names the fields and the server goes on
with the configuration it runs, so a reload never half-applies. Users, permissions and
accounts are among the refused: restart the server to apply them (say so in the log, at
ERROR, so an operator who tightened access is not misled).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from jetraft.config import ConfigError, ServerConfig

if TYPE_CHECKING:
    from jetraft.server.server import Server

log = logging.getLogger("jetraft")

LOGGING_FIELDS = frozenset({"debug", "trace", "trace_verbose", "logtime", "logtime_utc"})


def changed_fields(old: ServerConfig, new: ServerConfig) -> list[str]:
    """The compared fields whose values differ, in declaration order."""
    return [
        f.name
        for f in dataclasses.fields(ServerConfig)
        if f.compare and getattr(old, f.name) != getattr(new, f.name)
    ]


def plan(old: ServerConfig, new: ServerConfig) -> tuple[list[str], str]:
    """(fields to apply, error): an error refuses the whole reload."""
    changed = changed_fields(old, new)
    refused = [name for name in changed if name not in LOGGING_FIELDS]
    if refused:
        return [], "config reload not supported for " + ", ".join(refused)
    return changed, ""


def reload(
    server: Server,
    load: Callable[[], ServerConfig],
    setup_logging: Callable[[ServerConfig], None],
) -> bool:
    """Apply a SIGHUP; True when the configuration running now is the file's."""
    try:
        new = load()
    except (ConfigError, OSError) as exc:
        log.error("Failed to reload server configuration: %s", exc)
        return False
    apply, error = plan(server.config, new)
    if error:
        log.error(
            "Failed to reload server configuration: %s (restart the server to apply it)", error
        )
        return False
    if apply:
        server.config = dataclasses.replace(
            server.config, **{name: getattr(new, name) for name in apply}
        )
        setup_logging(server.config)
        for conn in list(server.clients.values()):
            conn.set_trace(server.config.trace)
    log.info("Reloaded server configuration")
    return True
