"""``jetraft server``: administration of running servers."""

from __future__ import annotations

from jetraft.cli.group import group

server = group("server", "Server information and cluster administration (system account)")
