"""What a consumer's runtime (``consumer_runtime``) works with: its environment, the
owner that holds it (a stream's consumer set on one server, a consumer replica in a
cluster), where its changes go when clustered, and the small helpers of delivery and
persistence."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from jetraft.jetstream.consumer import Entry, MsgSource
from jetraft.jetstream.store.cipher import RecordCipher
from jetraft.jetstream.store.disk import StoreDisk
from jetraft.server.core.accounts import Account
from jetraft.server.core.internal import InternalClient
from jetraft.server.core.router import Router
from jetraft.server.js.commit import Callback, Durable


@dataclass(slots=True)
class ConsumerEnv:
    router: Router
    account: Account
    rng: random.Random
    domain: str = ""  # the JetStream domain, named in the consumer's advisories


class ConsumerOwner(Protocol):
    """The consumer set of one stream (``consumers.StreamConsumers`` provides it)."""

    @property
    def env(self) -> ConsumerEnv: ...

    @property
    def retention(self) -> str: ...

    @property
    def persistent(self) -> bool: ...

    def source(self) -> MsgSource: ...

    def consumer_ack(self, seq: int) -> None: ...

    def new_client(self, name: str) -> InternalClient: ...

    def state_path(self, name: str) -> Path | None: ...

    @property
    def disk(self) -> StoreDisk: ...

    @property
    def cipher(self) -> RecordCipher | None:
        """The stream's record cipher (encryption at rest), None when stored in clear."""
        ...

    def disk_gate(self, name: str) -> asyncio.Future[None] | None:
        """Done once a deleted consumer of that name no longer touches its files."""
        ...

    def delete(self, name: str) -> bool: ...


class Replicator(Durable, Protocol):
    """A clustered consumer's RAFT group: entries are proposed to it and applied to the
    consumer's state machine once committed (on every replica, this one included)."""

    def propose(self, entry: Entry) -> bool:
        """False when the group refused it at once (this replica no longer leads). One the
        group drops later while the proposing runtime still runs is handed back to it
        (``ConsumerRuntime.refused``)."""
        ...

    def after_durable(self, callback: Callback) -> None: ...


# --- routing helpers -----------------------------------------------------------------------


def now_ns() -> int:
    return time.time_ns()


def has_interest(account: Account, subject: str) -> bool:
    m = account.sublist.match(subject)
    return bool(m.plain or m.queues)


def deliver_as(
    env: ConsumerEnv, dsubj: str, subject: str, reply: str | None, hdr: bytes | None, data: bytes
) -> int:
    """Route by ``dsubj`` but show the client the message's own ``subject`` (nats-server's
    delivery of stream messages). Returns how many subscriptions got it."""
    return env.router.route_message(None, env.account, subject, reply, hdr, data, route_by=dsubj)


def headers_only(hdr: bytes | None, data: bytes) -> bytes:
    """The stored headers plus ``Nats-Msg-Size``, for headers_only consumers."""
    line = f"Nats-Msg-Size: {len(data)}\r\n\r\n".encode()
    if not hdr:
        return b"NATS/1.0\r\n" + line
    return hdr[:-2] + line


# --- persistence ---------------------------------------------------------------------------


def write_state(disk: StoreDisk, path: Path, blob: bytes) -> None:
    """Replace the state file crash-safely (a worker thread; ``Disk.write_atomic``: temp
    file, fsync, rename, directory fsync). Creates the consumer's directory when new."""
    disk.makedirs(str(path.parent))
    disk.write_atomic(str(path), blob)
