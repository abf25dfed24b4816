"""RAFT over the routes: a registry of this server's groups and their transports.

Node ids are server names. A group's transport encodes each message and hands it to the
mesh, which batches everything for one server into one route frame per loop turn. What
arrives is decoded and given to the local node of that group; a message for a group this
server does not hold goes to ``on_unknown`` (the meta layer may be about to create it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from jetraft.raft.messages import DecodeError, Message, decode_message, encode_message

log = logging.getLogger("jetraft.raftnet")


class RaftSender(Protocol):
    """The mesh's side: where frames go (``mesh.RouteMesh``)."""

    def send_raft(self, to_server: str, group: str, data: bytes) -> None: ...

    def push_raft(self) -> None:
        """Write the frames batched so far to their routes now."""


class Receiver(Protocol):
    def receive(self, msg: Message) -> None: ...


class GroupTransport:
    """The Transport of one group's RaftNode."""

    __slots__ = ("group", "net")

    def __init__(self, net: RaftNet, group: str) -> None:
        self.net = net
        self.group = group

    def send(self, msg: Message) -> None:
        self.net.sender.send_raft(msg.to, self.group, encode_message(msg))

    def flush(self) -> None:
        self.net.sender.push_raft()


class RaftNet:
    def __init__(self, sender: RaftSender) -> None:
        self.sender = sender
        self._nodes: dict[str, Receiver] = {}
        self.on_unknown: Callable[[str, str, Message], None] | None = None
        self.received = 0
        self.dropped = 0

    def transport(self, group: str) -> GroupTransport:
        return GroupTransport(self, group)

    def register(self, group: str, node: Receiver) -> None:
        self._nodes[group] = node

    def unregister(self, group: str, node: Receiver | None = None) -> None:
        if node is None or self._nodes.get(group) is node:
            self._nodes.pop(group, None)

    def groups(self) -> list[str]:
        return list(self._nodes)

    def deliver(self, frm: str, group: str, data: bytes) -> None:
        """A message from server ``frm`` for ``group`` arrived over a route."""
        try:
            msg = decode_message(data)
        except DecodeError as exc:
            log.warning("bad RAFT message for %s from %s: %s", group, frm, exc)
            self.dropped += 1
            return
        if msg.frm != frm:
            # A route speaks for one server only.
            log.warning("RAFT message for %s claims to be from %s but came from %s",
                        group, msg.frm, frm)
            self.dropped += 1
            return
        self.received += 1
        node = self._nodes.get(group)
        if node is not None:
            node.receive(msg)
        elif self.on_unknown is not None:
            self.on_unknown(frm, group, msg)
        else:
            self.dropped += 1
