"""Differential test: the same consumer scenario against a real nats-server and jetraft; the
ConsumerInfo answers must agree (times, server metadata and inbox names aside)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.integration.jetstream.consumer_support import (
    nats_server_binary,
    on_both_servers,
    wait_for,
)

pytestmark = pytest.mark.skipif(
    not os.path.exists(nats_server_binary()), reason="nats-server binary not installed"
)


def _normalise(d: dict[str, Any]) -> dict[str, Any]:
    for key in ("created", "ts"):
        d.pop(key, None)
    for key in ("delivered", "ack_floor"):
        if key in d:
            d[key].pop("last_active", None)
    cfg = d.get("config", {})
    if isinstance(cfg.get("metadata"), dict):
        cfg["metadata"] = {k: v for k, v in cfg["metadata"].items() if not k.startswith("_nats")}
        if not cfg["metadata"]:
            del cfg["metadata"]
    if "deliver_subject" in cfg:
        cfg["deliver_subject"] = "<inbox>"
    return d


async def _scenario(url: str) -> dict[str, Any]:
    nc = await nats.connect(url, allow_reconnect=False)
    js = nc.jetstream()
    out: dict[str, Any] = {}

    async def api(subject: str, body: Any = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else b""
        msg = await nc.request("$JS.API." + subject, data, timeout=2)
        return _normalise(json.loads(msg.data))

    async def fetch_ack(name: str, n: int, ack: list[int]) -> list[Any]:
        sub = await js.pull_subscribe_bind(name, stream="S")
        msgs = await sub.fetch(n, timeout=0.5)

        async def request_gone() -> bool:
            info = await nc.request(f"$JS.API.CONSUMER.INFO.S.{name}", b"", timeout=2)
            return bool(json.loads(info.data)["num_waiting"] == 0)

        # The fetch's pull request ends on the server when its expiry passes, which races
        # with an ack sent right after the client gave up: wait for it to be gone, so that
        # an ack freeing max_ack_pending cannot deliver into the abandoned request.
        await wait_for(request_gone)
        for i in ack:
            await msgs[i].ack_sync()
        return msgs

    await js.add_stream(name="S", subjects=["s.>"])
    for subject in ["s.a", "s.b", "s.a", "s.c", "s.b", "s.a"]:
        await js.publish(subject, subject.encode())
    await js.add_consumer("S", durable_name="F", filter_subject="s.b", ack_policy="explicit")
    await fetch_ack("F", 5, [0, 1])
    out["filtered"] = await api("CONSUMER.INFO.S.F")
    for name, extra in [
        ("N", {"deliver_policy": "new"}),
        ("L", {"deliver_policy": "last"}),
        ("P", {"deliver_policy": "last_per_subject", "filter_subject": "s.*"}),
        ("Q", {"deliver_policy": "by_start_sequence", "opt_start_seq": 4}),
        ("M", {"filter_subjects": ["s.a", "s.c"], "max_ack_pending": 2}),
    ]:
        config = {"durable_name": name, "ack_policy": "explicit", **extra}
        out[f"create {name}"] = await api(
            f"CONSUMER.CREATE.S.{name}", {"stream_name": "S", "config": config}
        )
    await fetch_ack("M", 5, [1])
    out["max ack pending"] = await api("CONSUMER.INFO.S.M")
    await js.add_consumer("S", durable_name="A", ack_policy="all")
    await fetch_ack("A", 4, [2])
    out["ack all"] = await api("CONSUMER.INFO.S.A")
    await js.add_consumer("S", durable_name="R", ack_policy="explicit", ack_wait=0.2, max_deliver=2)
    await fetch_ack("R", 2, [1])
    sub = await js.pull_subscribe_bind("R", stream="S")
    await sub.fetch(1, timeout=1)
    out["redelivered"] = await api("CONSUMER.INFO.S.R")
    inbox = nc.new_inbox()
    push = await nc.subscribe(inbox)
    await js.add_consumer("S", durable_name="Z", ack_policy="none", deliver_subject=inbox)
    for _ in range(6):
        await push.next_msg(timeout=1)
    out["push ack none"] = await api("CONSUMER.INFO.S.Z")
    await js.purge_stream("S")
    out["filtered after purge"] = await api("CONSUMER.INFO.S.F")
    await js.publish("s.b", b"new")
    # nats-server tells its consumers of a new message after the PubAck: on a loaded machine
    # an info right after it can still say 0 pending. Ask until the count moved (at most 5 s).
    for _ in range(100):
        out["filtered after new"] = await api("CONSUMER.INFO.S.F")
        if out["filtered after new"]["num_pending"]:
            break
        await asyncio.sleep(0.05)
    await nc.close()
    return out


async def test_consumer_info_matches_nats_server(tmp_path: Path) -> None:
    theirs, ours = await on_both_servers(tmp_path, _scenario)
    assert ours.keys() == theirs.keys()
    for key in theirs:
        assert ours[key] == theirs[key], key
