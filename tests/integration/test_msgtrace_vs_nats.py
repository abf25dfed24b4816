"""Message tracing (``Nats-Trace-Dest``), side by side with a real nats-server: the same
configuration and the same nats-py scenario on both, the same trace events expected (their
times and connection ids aside), the same deliveries and stored messages.

nats.js's ``publish tracing`` and ``request tracing`` tests wait for these events; without
them they hang until their file's time limit."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest

from jetraft.jetstream.consumer_config import parse_rfc3339_ns
from tests.integration.jetstream.consumer_support import nats_server_binary, on_both_configs

pytestmark = pytest.mark.skipif(
    not Path(nats_server_binary()).exists(), reason="nats-server binary not installed"
)

CONF = """
server_name: tracer
listen: 127.0.0.1:{port}
jetstream {{ store_dir: "{store}" }}
mappings {{ "map.a": "foo.mapped" }}
authorization {{
  users: [
    {{user: a, password: a, permissions: {{publish: {{deny: ["forbidden.>"]}}}}}}
    {{user: b, password: b}}
  ]
}}
"""
TRACE = {"Nats-Trace-Dest": "traces"}
ONLY = {**TRACE, "Nats-Trace-Only": "true"}


def _event(data: bytes) -> dict[str, Any]:
    """A trace event without what differs between runs (times, connection ids, the
    server's identity beyond its name), its egress events in a fixed order."""
    body = json.loads(re.sub(rb"_INBOX\.[A-Za-z0-9.]+", b"_INBOX.x", data))
    server = body.pop("server")
    assert server["name"] == "tracer" and server["id"] and server["ver"]
    for event in body["events"]:
        parse_rfc3339_ns(event.pop("ts"))
        assert isinstance(event.pop("cid", 0), int)
    # The order of the egress events is the order of a subject match: not meaningful.
    events = body["events"]
    egress = sorted((e for e in events if e["type"] == "eg"), key=json.dumps)
    body["events"] = [e for e in events if e["type"] != "eg"] + egress
    return body


async def _scenario(url: str) -> dict[str, Any]:
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    pub = await nats.connect(
        url, name="pub", user="a", password="a", no_echo=True, error_cb=on_error,
        allow_reconnect=False,
    )  # fmt: skip
    sub = await nats.connect(url, name="sub", user="b", password="b", allow_reconnect=False)
    try:
        traces = await sub.subscribe("traces")
        plain = await sub.subscribe("foo.*")
        queue = await sub.subscribe("foo.>", queue="q")
        await pub.subscribe("foo.*")  # not delivered: no echo

        async def answer(msg: Any) -> None:
            await msg.respond(b"pong")

        await sub.subscribe("svc", cb=answer)
        await sub.flush()
        js = pub.jetstream()
        await js.add_stream(name="S", subjects=["js.>"])
        await pub.flush()
        out: dict[str, Any] = {}

        async def traced(name: str, subject: str, headers: dict[str, str]) -> None:
            await pub.publish(subject, b"hi", headers=headers)
            msg = await traces.next_msg(timeout=5)
            out[name] = _event(msg.data)

        await traced("delivered", "foo.bar", {**TRACE, "X": "1"})
        await traced("trace only", "foo.bar", ONLY)
        await traced("stored", "js.x", TRACE)
        await traced("not stored", "js.y", {**TRACE, "Nats-Trace-Only": "1"})
        await traced("mapped", "map.a", TRACE)
        # Untraced: a disabled destination, an invalid one (a trace-only message with one is
        # delivered to nobody), the retired origin-account header. The next traced message
        # is the next event, so these made none.
        await pub.publish("foo.off", b"1", headers={"Nats-Trace-Dest": "trace disabled"})
        await pub.publish("foo.bad", b"2", headers={"Nats-Trace-Dest": "a.*"})
        await pub.publish(
            "foo.bad", b"3", headers={"Nats-Trace-Dest": "a.*", "Nats-Trace-Only": "true"}
        )
        await pub.publish("foo.old", b"4", headers={**TRACE, "Nats-Trace-Origin-Account": "B"})
        await traced("after untraced", "foo.next", TRACE)
        # A destination the publisher may not publish to: refused, nothing delivered.
        await pub.publish("foo.denied", b"5", headers={"Nats-Trace-Dest": "forbidden.t"})
        await traced("after denied", "foo.last", TRACE)
        # Compressed events.
        await pub.publish("foo.gz", b"", headers={**TRACE, "Accept-Encoding": "gzip"})
        msg = await traces.next_msg(timeout=5)
        assert msg.headers == {"Content-Encoding": "gzip"}
        out["gzip"] = _event(gzip.decompress(msg.data))
        await pub.publish("foo.sn", b"", headers={**TRACE, "Accept-Encoding": "snappy"})
        msg = await traces.next_msg(timeout=5)
        out["snappy"] = (msg.headers, msg.data[:10])
        # Requests: answered when traced, not even delivered when tracing only.
        # (nats-py's respond() sends the request's headers back: the reply is traced too.)
        reply = await pub.request("svc", b"ping", timeout=5, headers=TRACE)
        out["request"] = (reply.data, _event((await traces.next_msg(timeout=5)).data))
        out["reply"] = _event((await traces.next_msg(timeout=5)).data)
        with pytest.raises(nats.errors.TimeoutError):
            await pub.request("svc", b"ping", timeout=0.5, headers=ONLY)
        out["request only"] = _event((await traces.next_msg(timeout=5)).data)

        async def drain(s: Any) -> list[tuple[str, bytes, dict[str, str] | None]]:
            await sub.flush()
            got = []
            while s.pending_msgs:
                m = await s.next_msg(timeout=1)
                got.append((m.subject, m.data, m.headers))
            return got

        out["plain got"] = await drain(plain)
        out["queue got"] = await drain(queue)
        out["errors"] = errors
        stored = []
        info = await js.stream_info("S")
        for seq in range(1, info.state.last_seq + 1):
            m = await js.get_msg("S", seq)
            stored.append((m.subject, m.headers))
        out["stored msgs"] = stored
        return out
    finally:
        await pub.close()
        await sub.close()


async def test_trace_events_as_nats_server(tmp_path: Path) -> None:
    theirs, ours = await on_both_configs(tmp_path, CONF, _scenario)

    assert 'permissions violation for publish to "forbidden.t"' in str(theirs["errors"])
    # What the servers answered, case by case, then as a whole.
    for key in theirs:
        assert ours[key] == theirs[key], json.dumps([key, ours[key], theirs[key]])
    # The events say what happened: one sample checked by hand.
    delivered = ours["delivered"]
    assert [e["type"] for e in delivered["events"]] == ["in", "eg", "eg", "eg"]
    assert delivered["events"][1]["error"] == "Not delivered because of no echo"
    assert ours["stored msgs"] == [("js.x", {"Nats-Trace-Dest": "trace disabled"})]
    assert [m[0] for m in ours["plain got"]] == [
        "foo.bar", "foo.mapped", "foo.off", "foo.bad", "foo.old", "foo.next", "foo.last",
        "foo.gz", "foo.sn",
    ]  # fmt: skip


IMPORT_CONF = """
server_name: tracer
listen: 127.0.0.1:{port}
accounts {{
  A {{ users: [{{user: a, password: a}}], exports: [{{stream: "a.>"}}] }}
  B {{
    users: [{{user: b, password: b}}]
    imports: [{{stream: {{account: A, subject: "a.>"}}, prefix: p}}]
  }}
}}
"""


async def _import_scenario(url: str) -> dict[str, Any]:
    pub = await nats.connect(url, name="pub", user="a", password="a", allow_reconnect=False)
    sub = await nats.connect(url, name="sub", user="b", password="b", allow_reconnect=False)
    try:
        traces = await pub.subscribe("traces")
        imported = await sub.subscribe("p.a.>")
        await sub.flush()
        # nats-server, just started, now and then misses the first messages of a stream
        # import: probe until one arrives (jetraft delivers the first).
        for _ in range(50):
            await pub.publish("a.probe", b"")
            await pub.flush()
            try:
                await imported.next_msg(timeout=0.1)
                break
            except nats.errors.TimeoutError:
                continue
        while imported.pending_msgs:
            await imported.next_msg(timeout=1)
        out: dict[str, Any] = {}
        await pub.publish("a.x", b"hi", headers=TRACE)
        out["crossed"] = _event((await traces.next_msg(timeout=5)).data)
        got = await imported.next_msg(timeout=5)
        out["delivered"] = (got.subject, got.data, got.headers)
        await pub.publish("a.y", b"", headers=ONLY)
        out["crossed, only"] = _event((await traces.next_msg(timeout=5)).data)
        await pub.publish("a.z", b"after")
        out["next"] = (await imported.next_msg(timeout=5)).subject
        return out
    finally:
        await pub.close()
        await sub.close()


async def test_a_stream_import_is_traced_as_nats_server(tmp_path: Path) -> None:
    theirs, ours = await on_both_configs(tmp_path, IMPORT_CONF, _import_scenario)
    # jetraft also reports where the message went in the importing account (an egress
    # naming that account); nats-server 2.15 reports the crossing only.
    egress = {"type": "eg", "kind": 0, "name": "sub", "acc": "B", "sub": "p.a.>"}
    for key in ("crossed", "crossed, only"):
        assert ours[key]["events"][-1] == egress
        del ours[key]["events"][-1]
    for key in theirs:
        assert ours[key] == theirs[key], json.dumps([key, ours[key], theirs[key]])
    assert [e["type"] for e in ours["crossed"]["events"]] == ["in", "se"]
    assert ours["next"] == "p.a.z"  # the trace-only message reached nobody
