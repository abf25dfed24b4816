"""A slice of DIRECT.GET answers is framed in one call (``ClientConnection.deliver_replies``);
what reaches the client must be byte for byte what delivering the same messages one by one
writes, also where a subscription stops early (auto-unsubscribe) or the client cannot take
headers."""

from __future__ import annotations

import random

import pytest

from jetraft.server.core.accounts import Subscription
from jetraft.server.core.client_conn import ClientConnection
from jetraft.server.server import Server

from .test_core_errors import Raw

INBOX = "_INBOX.r.7"


async def _subscriber(
    server: Server, headers: bool, max_msgs: int
) -> tuple[Raw, ClientConnection, Subscription]:
    raw = await Raw.open(server, connect_line=False)
    connect = b'CONNECT {"verbose":false,"headers":%s}\r\n' % (b"true" if headers else b"false")
    unsub = b"UNSUB 9 %d\r\n" % max_msgs if max_msgs else b""
    await raw.send(connect + b"SUB _INBOX.r.* 9\r\n" + unsub + b"PING\r\n")
    assert await raw.line() == b"PONG\r\n"
    conn = server.clients[max(server.clients)]
    return raw, conn, conn.subs["9"]


def _items(rng: random.Random) -> list[tuple[bytes | None, bytes]]:
    items: list[tuple[bytes | None, bytes]] = []
    for seq in range(1, rng.randint(1, 40)):
        data = bytes(rng.choice(b"abcxyz\r\n") for _ in range(rng.randint(0, 300)))
        hdr = None
        if rng.random() < 0.8:
            hdr = b"NATS/1.0\r\nNats-Sequence: %d\r\nK: %s\r\n\r\n" % (seq, b"v" * seq)
        items.append((hdr, data))
    return items


async def _received(raw: Raw) -> bytes:
    """Everything the server wrote up to the answer of a PING sent now (no payload here
    holds the letter P)."""
    await raw.send(b"PING\r\n")
    return await raw.reader.readuntil(b"PONG\r\n")


@pytest.mark.parametrize(("headers", "max_msgs"), [(True, 0), (True, 5), (False, 0)])
@pytest.mark.parametrize("seed", range(4))
async def test_a_slice_is_framed_as_message_by_message_delivery(
    server: Server, headers: bool, max_msgs: int, seed: int
) -> None:
    items = _items(random.Random(seed))
    raw_a, conn_a, sub_a = await _subscriber(server, headers, max_msgs)
    raw_b, conn_b, sub_b = await _subscriber(server, headers, max_msgs)
    taken = conn_a.deliver_replies(sub_a, INBOX, items)
    delivered = 0
    for hdr, data in items:  # the reference: what the router did message by message
        if "9" not in conn_b.subs or not conn_b.deliver(sub_b, INBOX, None, hdr, data):
            break
        delivered += 1
    assert taken == delivered == (min(len(items), max_msgs) if max_msgs else len(items))
    got, want = await _received(raw_a), await _received(raw_b)
    assert got == want
    assert want.count(b"MSG " + INBOX.encode()) == delivered
    assert (conn_a.out_msgs, conn_a.out_bytes, sub_a.delivered) == (
        conn_b.out_msgs,
        conn_b.out_bytes,
        sub_b.delivered,
    )
