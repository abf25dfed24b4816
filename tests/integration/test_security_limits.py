"""Bounded memory under bad clients: every per-connection structure a client can grow has a
limit a test drives into (subscriptions, reply permissions, DIRECT.GET batches). Pending pull
requests (max_waiting) and parser buffers (max_control_line, max_payload) are driven in
test_consumers_pull.py and test_core_errors.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

from jetraft.server.core import client_conn

from .conftest import ServerFactory, connect, wait_for
from .test_core_errors import Raw


async def test_max_subscriptions_per_connection(make_server: ServerFactory) -> None:
    server = await make_server("max_subscriptions: 2")
    raw = await Raw.open(server)
    await raw.send(b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\nSUB a 1\r\nPING\r\n")
    # As nats-server: each SUB over the limit is told, the connection stays up.
    assert await raw.line() == b"-ERR 'maximum subscriptions exceeded'\r\n"
    assert await raw.line() == b"-ERR 'maximum subscriptions exceeded'\r\n"
    assert await raw.line() == b"PONG\r\n"
    conn = server.clients[max(server.clients)]
    assert sorted(s.subject for s in conn.subs.values()) == ["a", "b"]
    await raw.send(b"UNSUB 1\r\nSUB c 3\r\nPING\r\n")  # room again after an UNSUB
    assert await raw.line() == b"PONG\r\n"
    assert sorted(s.subject for s in conn.subs.values()) == ["b", "c"]


RESPONDER = """
authorization { users = [
  {user: svc, password: s, permissions: {subscribe: "req.>", allow_responses: %s}}
  {user: cli, password: c}
] }
"""


async def requests_in(
    make_server: ServerFactory, allow: str, count: int
) -> client_conn.ClientConnection:
    """A responder that never answers gets ``count`` requests; returns its connection."""
    server = await make_server(RESPONDER % allow)
    svc = await connect(server, user="svc", password="s")
    got: list[object] = []

    async def on_request(msg: object) -> None:
        got.append(msg)

    await svc.subscribe("req.x", cb=on_request)
    await svc.flush()
    conn = next(c for c in server.clients.values() if c.user and c.user.name == "svc")
    cli = await connect(server, user="cli", password="c")
    for i in range(count):
        await cli.publish("req.x", b"", reply=f"_INBOX.r.{i}")
    await cli.flush()
    await wait_for(lambda: len(got) == count, what=f"{count} requests delivered")
    return conn


async def test_reply_permissions_are_pruned_when_expired(make_server: ServerFactory) -> None:
    conn = await requests_in(make_server, '{max: 1, expires: "50ms"}', 300)
    assert 0 < conn.reply_permissions <= 300
    # nats-server prunes every 4096 new entries or every second; a shorter interval keeps
    # the test quick without changing what is pruned (the table's own tests cover the rest:
    # tests/unit/server/test_reply_permits.py).
    conn.reply_permits.prune_ns = 50_000_000
    deadline = time.monotonic() + 0.12
    await wait_for(lambda: time.monotonic() > deadline, what="the entries to expire")
    conn._track_reply(conn.perms, "_INBOX.late")  # type: ignore[arg-type]
    assert conn.reply_permissions == 1


async def direct_batch(nc: object, stream: str, body: dict[str, object]) -> list[object]:
    inbox = nc.new_inbox()  # type: ignore[attr-defined]
    sub = await nc.subscribe(inbox)  # type: ignore[attr-defined]
    await nc.publish(f"$JS.API.DIRECT.GET.{stream}", json.dumps(body).encode(),  # type: ignore[attr-defined]
                     reply=inbox)
    out: list[object] = []
    while True:
        msg = await sub.next_msg(timeout=5)
        out.append(msg)
        if msg.headers and msg.headers.get("Status") == "204":
            return out


async def test_direct_get_batch_is_bounded_by_bytes(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    # nats-server bounds a batch without max_bytes by its max_pending.
    server = await make_server(f'max_pending: 64KB\nmax_payload: 8KB\njetstream {{ store_dir: '
                               f'"{tmp_path}" }}')
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="BIG", subjects=["big.>"], allow_direct=True)
    for i in range(200):
        await js.publish(f"big.{i}", b"x" * 1024)
    replies = await direct_batch(nc, "BIG", {"seq": 1, "batch": 100_000})
    data = replies[:-1]
    eob = replies[-1].headers  # type: ignore[attr-defined]
    # nats-server counts the stored subject, headers and data of each message sent.
    sizes = [len(m.headers["Nats-Subject"]) + len(m.data) for m in data]  # type: ignore[attr-defined]
    assert sum(sizes[:-1]) < 64 * 1024 <= sum(sizes)  # stops at the first message past it
    assert int(eob["Nats-Num-Pending"]) == 200 - len(data)
    assert int(eob["Nats-Last-Sequence"]) == len(data)
    # An explicit max_bytes and batch count bound it too.
    replies = await direct_batch(nc, "BIG", {"seq": 1, "batch": 5, "max_bytes": 10**9})
    assert len(replies) == 6
    replies = await direct_batch(nc, "BIG", {"seq": 1, "batch": 500, "max_bytes": 3000})
    assert len(replies) == 4  # three messages reach 3000 bytes, then EOB
    await nc.close()


async def test_direct_get_stops_when_the_requester_is_gone(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    server = await make_server(f'jetstream {{ store_dir: "{tmp_path}" }}')
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"], allow_direct=True)
    for i in range(100):
        await js.publish(f"s.{i}", b"y" * 8192)
    other = await connect(server)
    inbox = other.new_inbox()
    await other.subscribe(inbox)
    await other.flush()
    stats = server.auth.global_account().stats
    before = stats.in_msgs
    await other.publish("$JS.API.DIRECT.GET.S", b'{"seq": 1, "batch": 100}', reply=inbox)
    await other.close()  # leaves while the answer is being sent in slices
    await nc.flush()
    await nc.flush()
    # Every message the server sends counts as published in the account, received or not:
    # far fewer than the 100 asked for went out once nobody was listening.
    sent = stats.in_msgs - before - 1
    assert 0 < sent < 100
    await nc.close()
