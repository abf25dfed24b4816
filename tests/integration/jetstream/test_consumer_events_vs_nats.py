"""A consumer's delivery events, side by side with a real nats-server: the MSG_NAKED and
MAX_DELIVERIES advisories (dead-letter handlers watch the latter), the sampled ack metric
(``sample_freq``), the PAUSE advisory, and the JetStream domain named in them. nats.py
drives both servers through the same scenario; the same events are expected."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import nats
import pytest

from jetraft.jetstream.consumer_config import parse_rfc3339_ns
from tests.integration.jetstream.consumer_support import nats_server_binary, on_both_servers

pytestmark = pytest.mark.skipif(
    not Path(nats_server_binary()).exists(), reason="nats-server binary not installed"
)


def _event(msg: Any) -> dict[str, Any]:
    """An advisory's body without what is fresh per event, with its subject."""
    body = json.loads(msg.data)
    assert len(body.pop("id")) >= 16
    parse_rfc3339_ns(body.pop("timestamp"))
    return {"subject": msg.subject, **body}


async def _deliveries_scenario(url: str) -> list[dict[str, Any]]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await nc.request("$JS.API.STREAM.CREATE.D", b'{"name":"D","subjects":["d.*"]}', timeout=2)
        consumer = {
            "stream_name": "D",
            "config": {
                "durable_name": "c",
                "ack_policy": "explicit",
                "max_deliver": 2,
                "ack_wait": 1_000_000_000,
                "sample_freq": "100%",
            },
        }
        await nc.request("$JS.API.CONSUMER.CREATE.D.c", json.dumps(consumer).encode(), timeout=2)
        events = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.>")
        metrics = await nc.subscribe("$JS.EVENT.METRIC.CONSUMER.ACK.>")
        await nc.flush()
        for subject in ("d.1", "d.2", "d.3"):
            await nc.request(subject, b"x", timeout=2)
        sub = await nc.jetstream().pull_subscribe_bind("c", "D")
        one, two, three = await sub.fetch(3, timeout=2)
        await one.ack_sync()
        await two.nak()
        seen = [_event(await events.next_msg(timeout=5))]  # the nak
        seen.append(_event(await metrics.next_msg(timeout=5)))  # the ack of 1
        # 2 comes back at once (nakked) and is acked; 3 once its ack wait ran out, and is not.
        (again,) = await sub.fetch(1, timeout=5)
        assert again.metadata.sequence.stream == 2
        await again.ack_sync()
        (again,) = await sub.fetch(1, timeout=5)
        assert again.metadata.sequence.stream == 3
        seen.append(_event(await metrics.next_msg(timeout=5)))  # the ack of 2, delivered twice
        # 3 runs out of deliveries when its second ack wait ends; nats-server only notices
        # while a pull request waits, so one does (and gets nothing).
        waiting = asyncio.create_task(sub.fetch(1, timeout=4))
        seen.append(_event(await events.next_msg(timeout=5)))
        assert not waiting.done()  # nothing more was delivered
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        for event in seen:
            if "ack_time" in event:
                assert event.pop("ack_time") > 0
        del three
        return seen
    finally:
        await nc.close()


async def test_nak_ack_metric_and_max_deliveries_events(tmp_path: Path) -> None:
    theirs, ours = await on_both_servers(tmp_path, _deliveries_scenario)
    assert ours == theirs
    assert [(e["subject"].split(".")[3:5], e["stream_seq"], e["deliveries"]) for e in ours] == [
        (["CONSUMER", "MSG_NAKED"], 2, 1),
        (["CONSUMER", "ACK"], 1, 1),
        (["CONSUMER", "ACK"], 2, 2),
        (["CONSUMER", "MAX_DELIVERIES"], 3, 2),
    ]


async def _pause_scenario(url: str) -> list[tuple[str, bool, str]]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await nc.request("$JS.API.STREAM.CREATE.P", b'{"name":"P","subjects":["p"]}', timeout=2)
        consumer = {"stream_name": "P", "config": {"durable_name": "c", "ack_policy": "explicit"}}
        await nc.request("$JS.API.CONSUMER.CREATE.P.c", json.dumps(consumer).encode(), timeout=2)
        events = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.>")
        await nc.flush()
        out: list[tuple[str, bool, str]] = []

        async def pause(until_ns: int) -> None:
            body = {}
            if until_ns:
                text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(until_ns // 10**9))
                body = {"pause_until": f"{text}.{until_ns % 10**9:09d}Z"}
            await nc.request("$JS.API.CONSUMER.PAUSE.P.c", json.dumps(body).encode(), timeout=2)

        async def next_event(asked_ns: int) -> None:
            event = _event(await events.next_msg(timeout=5))
            assert (event["stream"], event["consumer"]) == ("P", "c")
            until = parse_rfc3339_ns(event["pause_until"])
            what = "as asked" if until == asked_ns else "zero" if until <= 0 else str(until)
            out.append((event["subject"], event["paused"], what))

        # A long pause, lifted by hand; then a short one that runs out by itself.
        far = time.time_ns() + 3600 * 10**9
        await pause(far)
        await next_event(far)
        await pause(0)
        await next_event(0)
        soon = time.time_ns() + 700_000_000
        await pause(soon)
        await next_event(soon)
        await next_event(soon)  # it ran out
        return out
    finally:
        await nc.close()


async def test_pause_advisories(tmp_path: Path) -> None:
    """Pausing, resuming and a pause running out are each advised, as nats-server does
    (``pause_until`` Go's zero time once lifted)."""
    theirs, ours = await on_both_servers(tmp_path, _pause_scenario)
    assert ours == theirs
    assert [(paused, until) for _, paused, until in ours] == [
        (True, "as asked"),
        (False, "zero"),
        (True, "as asked"),
        (False, "as asked"),
    ]


async def test_no_sampling_without_sample_freq(tmp_path: Path) -> None:
    """Without sample_freq no ack metric is published (the default)."""

    async def scenario(url: str) -> int:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            await nc.request("$JS.API.STREAM.CREATE.N", b'{"name":"N","subjects":["n"]}', timeout=2)
            consumer = {
                "stream_name": "N",
                "config": {"durable_name": "c", "ack_policy": "explicit"},
            }
            await nc.request(
                "$JS.API.CONSUMER.CREATE.N.c", json.dumps(consumer).encode(), timeout=2
            )
            metrics = await nc.subscribe("$JS.EVENT.METRIC.CONSUMER.ACK.>")
            events = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.>")
            await nc.flush()
            for _ in range(3):
                await nc.request("n", b"x", timeout=2)
            sub = await nc.jetstream().pull_subscribe_bind("c", "N")
            msgs = await sub.fetch(3, timeout=2)
            for msg in msgs[:2]:
                await msg.ack_sync()
            await msgs[2].nak()
            # The nak's advisory comes after anything the acks published.
            await events.next_msg(timeout=5)
            await nc.flush()
            return metrics.pending_msgs
        finally:
            await nc.close()

    theirs, ours = await on_both_servers(tmp_path, scenario)
    assert ours == theirs == 0


async def test_advisories_name_the_jetstream_domain(tmp_path: Path) -> None:
    """With a JetStream domain configured, advisories carry it (``domain``), as nats-server's
    do; the API answers on the domain's prefix too."""
    from jetraft.config import parse_config
    from jetraft.server.server import Server

    server = Server(
        parse_config(
            f'listen: 127.0.0.1:-1\njetstream {{ store_dir: "{tmp_path}", domain: hub }}\n'
        )
    )
    await server.start()
    try:
        nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}", allow_reconnect=False)
        try:
            events = await nc.subscribe("$JS.EVENT.ADVISORY.>")
            await nc.flush()
            await nc.request(
                "$JS.hub.API.STREAM.CREATE.H", b'{"name":"H","subjects":["h"]}', timeout=2
            )
            consumer = {
                "stream_name": "H",
                "config": {"durable_name": "c", "ack_policy": "explicit"},
            }
            await nc.request(
                "$JS.hub.API.CONSUMER.CREATE.H.c", json.dumps(consumer).encode(), timeout=2
            )
            await nc.request("h", b"x", timeout=2)
            sub = await nc.jetstream(domain="hub").pull_subscribe_bind("c", "H")
            (msg,) = await sub.fetch(1, timeout=2)
            await msg.nak()
            seen = [_event(await events.next_msg(timeout=5)) for _ in range(3)]
        finally:
            await nc.close()
    finally:
        await server.stop()
    assert [(e["subject"].split(".")[3:5], e.get("domain")) for e in seen] == [
        (["STREAM", "CREATED"], "hub"),
        (["CONSUMER", "CREATED"], "hub"),
        (["CONSUMER", "MSG_NAKED"], "hub"),
    ]


async def _inactive_scenario(url: str) -> list[dict[str, Any]]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await nc.request("$JS.API.STREAM.CREATE.I", b'{"name":"I","subjects":["i"]}', timeout=2)
        events = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.>")
        await nc.flush()
        config = {"name": "gone", "ack_policy": "explicit", "inactive_threshold": 300_000_000}
        await nc.request(
            "$JS.API.CONSUMER.CREATE.I.gone",
            json.dumps({"stream_name": "I", "config": config}).encode(),
            timeout=2,
        )
        return [_event(await events.next_msg(timeout=5)) for _ in range(2)]
    finally:
        await nc.close()


async def test_an_inactivity_delete_is_advised(tmp_path: Path) -> None:
    """A consumer removed for inactivity (no pull requests for inactive_threshold) is
    advised as deleted, as one removed through the API is."""
    theirs, ours = await on_both_servers(tmp_path, _inactive_scenario)
    assert ours == theirs
    assert [e["action"] for e in ours] == ["create", "delete"]
