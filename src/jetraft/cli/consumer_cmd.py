"""``jetraft consumer`` (``con``, ``c``)."""

from __future__ import annotations

from jetraft.cli.group import group

consumer = group("consumer", "JetStream consumer management")
