"""Sources and a mirror side by side with a real nats-server: the same origin, the same
publishes; the sourcing stream's and the mirror's stored messages (subjects, sequences,
headers, bodies) must be the same. Only the last token of Nats-Stream-Source differs by
nature (a hash of the origin's creation time), so it is compared by shape."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import StreamSource

from tests.integration.jetstream.consumer_support import nats_server_binary, on_both_servers
from tests.integration.jetstream.js_helpers import api
from tests.integration.jetstream.test_sources import _msgs

pytestmark = pytest.mark.skipif(
    not Path(nats_server_binary()).exists(), reason="nats-server binary not installed"
)


def _without_ident(m: dict[str, Any]) -> tuple[Any, ...]:
    lines = []
    for line in m["hdrs"].split("\r\n"):
        if line.startswith("Nats-Stream-Source:"):
            fields = line.split(" ")
            assert len(fields) == 7 and len(fields[-1]) == 8, line  # name: 5 fields + ident
            line = " ".join(fields[:-1])
        lines.append(line)
    return m["subject"], m["seq"], "\r\n".join(lines), m["data"]


async def _scenario(url: str) -> dict[str, Any]:
    nc = await nats.connect(url, allow_reconnect=False)
    js = nc.jetstream()
    await js.add_stream(name="O", subjects=["o.>"])
    await js.publish("o.a", b"1", headers={"Nats-Msg-Id": "one"})
    await js.publish("o.b", b"2", headers={"Nats-Expected-Stream": "O", "X-Custom": "kept"})
    await js.publish("o.a", b"3")
    await js.publish("o.c", b"4", headers={"Nats-Expected-Last-Sequence": "3"})
    await js.delete_msg("O", 3)
    await js.add_stream(name="S", sources=[StreamSource(name="O", filter_subject="o.b"),
                                           StreamSource(name="O", filter_subject="o.a")])
    await js.add_stream(name="M", mirror=StreamSource(name="O"))
    await js.add_stream(name="O2", subjects=["p"])
    await js.publish("p", b"5")
    await js.add_stream(name="S2", sources=[StreamSource(name="O2")])
    deadline = time.monotonic() + 15
    while True:
        s = await api(nc, "STREAM.INFO.S")
        m = await api(nc, "STREAM.INFO.M")
        s2 = await api(nc, "STREAM.INFO.S2")
        if (s["state"]["messages"], m["state"]["messages"], s2["state"]["messages"]) == (2, 3, 1):
            break
        assert time.monotonic() < deadline, (s["state"], m["state"])
        await asyncio.sleep(0.05)
    # Sources are read concurrently: compare S as a set of messages in origin order.
    out = {
        "S": sorted((_without_ident(x)[2], x["subject"], x["data"]) for x in await _msgs(nc, "S")),
        "M": [_without_ident(x) for x in await _msgs(nc, "M")],
        "S2": [_without_ident(x) for x in await _msgs(nc, "S2")],
        "M state": {k: m["state"][k] for k in ("messages", "first_seq", "last_seq")},
    }
    await nc.close()
    return out


async def test_sources_and_mirror_match_nats_server(tmp_path: Path) -> None:
    theirs, ours = await on_both_servers(tmp_path, _scenario)
    assert ours == theirs
    # What the comparison rests on (nats-server's own answers):
    assert theirs["S2"][0][2] == "NATS/1.0\r\nNats-Stream-Source: O2 1 > > p\r\n\r\n"
    assert [x[1] for x in theirs["M"]] == [1, 2, 4]
