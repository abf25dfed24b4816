"""Sourcing and mirroring resume where they stopped after a SIGKILL of the server: every
origin message is in the sourcing stream exactly once (its Nats-Stream-Source sequences are
1..N with no repeat), and the mirror holds the origin's sequences."""

from __future__ import annotations

from pathlib import Path

import nats
from nats.js.api import StreamSource

from tests.integration.jetstream.js_helpers import ProcServer, api, wait_for
from tests.integration.jetstream.test_sources import _msgs, _source_header

N = 300


async def _messages(nc: nats.NATS, stream: str) -> int:
    info = await api(nc, f"STREAM.INFO.{stream}")
    return int(info["state"]["messages"])


async def test_sourcing_resumes_after_sigkill(tmp_path: Path) -> None:
    conf = 'jetstream { store_dir: "%s" }' % (tmp_path / "js")
    server = ProcServer(tmp_path, conf)
    await server.start()
    try:
        nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=5)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="O", subjects=["o.>"])
        for i in range(N):
            await js.publish(f"o.{i % 7}", str(i).encode())
        await js.add_stream(name="S", sources=[StreamSource(name="O")])
        await js.add_stream(name="M", mirror=StreamSource(name="O"))

        async def some_copied() -> bool:
            return await _messages(nc, "S") >= 20

        await wait_for(some_copied, timeout_s=20)
        await nc.close()
        server.kill()  # mid-stream: S and M are still copying
        await server.start()
        nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=5)
        js = nc.jetstream(timeout=10)
        for i in range(N, N + 5):  # followed after the restart too
            await js.publish(f"o.{i % 7}", str(i).encode())

        async def all_copied() -> bool:
            return await _messages(nc, "S") >= N + 5 and await _messages(nc, "M") >= N + 5

        await wait_for(all_copied, timeout_s=60)
        msgs = await _msgs(nc, "S")
        seqs = [int(_source_header(m["hdrs"])[1]) for m in msgs]
        assert seqs == list(range(1, N + 6))
        assert [m["data"] for m in msgs] == [str(i) for i in range(N + 5)]
        mirror = await _msgs(nc, "M")
        assert [(m["seq"], m["data"]) for m in mirror] == [(i + 1, str(i)) for i in range(N + 5)]
        await nc.close()
    finally:
        server.stop()
