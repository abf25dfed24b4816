"""Message tracing across a cluster: every server a traced message passes reports, the
origin names the routes it left by with hop ids, and each server behind a route reports
that hop id, so a tool can put the events in order (nats-server's ``Nats-Trace-Hop``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cluster.conftest import ClusterFactory
from tests.cluster.harness import wait_until

pytestmark = pytest.mark.timeout(180)

TRACE = {"Nats-Trace-Dest": "traces"}


async def _events(sub: Any, count: int) -> dict[str, dict[str, Any]]:
    """The next ``count`` trace events, by the name of the server that sent them."""
    out = {}
    for _ in range(count):
        body = json.loads((await sub.next_msg(timeout=10)).data)
        out[body["server"]["name"]] = body
    return out


def _strip(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events without times and connection ids (checked to be there)."""
    out = []
    for event in events:
        event = dict(event)
        assert event.pop("ts") and isinstance(event.pop("cid"), int)
        out.append(event)
    return out


async def test_a_traced_message_is_reported_by_every_server_it_reaches(
    make_cluster: ClusterFactory,
) -> None:
    cl = make_cluster(3, jetstream=lambda i: False)
    await cl.start()
    n1, n2, n3 = cl.nodes
    a = await cl.connect(n1, name="pub")
    b = await cl.connect(n2, name="plain")
    c = await cl.connect(n3, name="worker")
    traces = await a.subscribe("traces")
    plain = await b.subscribe("t.>")
    queued = await c.subscribe("t.>", queue="q")
    for conn in (a, b, c):
        await conn.flush()
    await wait_until(lambda: n1.http("/subsz")["num_subscriptions"] >= 3, what="interest at n1")

    await a.publish("t.x", b"hi", headers=TRACE)
    events = await _events(traces, 3)
    assert set(events) == {n1.name, n2.name, n3.name}
    origin = events[n1.name]
    assert origin["hops"] == 2 and origin["request"] == {
        "header": {"Nats-Trace-Dest": ["traces"]},
        "msgsize": len(b"NATS/1.0\r\nNats-Trace-Dest: traces\r\n\r\n") + 2,
    }
    first, *egress = _strip(origin["events"])
    assert first == {"type": "in", "kind": 0, "name": "pub", "acc": "$G", "subj": "t.x"}
    hops = {e["name"]: e["hop"] for e in egress}
    assert sorted(egress, key=lambda e: e["name"]) == [
        {"type": "eg", "kind": 1, "name": n2.name, "hop": hops[n2.name]},
        {"type": "eg", "kind": 1, "name": n3.name, "hop": hops[n3.name]},
    ]
    assert sorted(hops.values()) == ["1", "2"]
    for node, sub, queue in ((n2, "plain", None), (n3, "worker", "q")):
        got = events[node.name]
        assert got["request"]["header"]["Nats-Trace-Hop"] == [hops[node.name]]
        assert "hops" not in got  # it sent the message over no route
        eg: dict[str, Any] = {"type": "eg", "kind": 0, "name": sub, "sub": "t.>"}
        if queue:
            eg["queue"] = queue
        assert _strip(got["events"]) == [
            {"type": "in", "kind": 1, "name": n1.name, "acc": "$G", "subj": "t.x"},
            eg,
        ]
    assert (await plain.next_msg(timeout=5)).subject == "t.x"
    assert (await queued.next_msg(timeout=5)).subject == "t.x"

    # Tracing only: the servers behind the routes report where it would have gone and
    # deliver nothing (the next message the subscribers get is a later, untraced one).
    await a.publish("t.only", b"", headers={**TRACE, "Nats-Trace-Only": "true"})
    events = await _events(traces, 3)
    assert [e["type"] for e in events[n2.name]["events"]] == ["in", "eg"]
    assert [e["type"] for e in events[n3.name]["events"]] == ["in", "eg"]
    await a.publish("t.after", b"")
    assert (await plain.next_msg(timeout=5)).subject == "t.after"
    assert (await queued.next_msg(timeout=5)).subject == "t.after"
    for conn in (a, b, c):
        await conn.close()
