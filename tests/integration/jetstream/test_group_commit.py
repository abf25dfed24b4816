"""Group commit: a PubAck leaves only after the fsync that covers its message returned, and
one fsync covers many messages when publishers keep many in flight."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest

from jetraft.jetstream.store.types import StreamStore
from jetraft.server.js import streams as js_streams
from tests.integration.jetstream.js_helpers import VS_NATS

pytestmark = pytest.mark.skipif(VS_NATS, reason="instruments jetraft's sync path")


async def test_puback_waits_for_fsync(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    real = js_streams.prepare_sync

    def gated(store: StreamStore) -> Callable[[], None] | None:
        work = real(store)

        def slow() -> None:
            gate.wait(10)
            if work is not None:
                work()

        return slow

    monkeypatch.setattr(js_streams, "prepare_sync", gated)
    server = await make_server('jetstream { store_dir: "%s" }' % (tmp_path / "js"))
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream()
    await js.add_stream(name="G", subjects=["g"])
    pending = asyncio.ensure_future(nc.request("g", b"x", timeout=5))
    await asyncio.sleep(0.3)  # the ack must not come while the fsync is held back
    assert not pending.done()
    gate.set()
    ack = await pending
    assert b'"seq":1' in ack.data
    await nc.close()


async def test_one_fsync_covers_many_messages(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0
    real = js_streams.prepare_sync

    def counted(store: StreamStore) -> Callable[[], None] | None:
        nonlocal calls
        calls += 1
        return real(store)

    monkeypatch.setattr(js_streams, "prepare_sync", counted)
    server = await make_server('jetstream { store_dir: "%s" }' % (tmp_path / "js"))
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream(publish_async_max_pending=1000)
    await js.add_stream(name="GC", subjects=["gc"])
    calls = 0
    for i in range(3000):
        await js.publish_async("gc", b"%d" % i)
    await asyncio.wait_for(js.publish_async_completed(), 30)
    assert (await js.stream_info("GC")).state.messages == 3000
    assert 1 <= calls <= 3000 // 5, f"{calls} syncs for 3000 messages"
    await nc.close()


async def test_lazy_sync_interval_acks_after_the_write_and_syncs_on_the_timer(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sync_interval`` opts out of fsync-before-PubAck: acks come while an fsync is held
    back, but each only once its message was written to the OS (a process crash loses
    nothing acknowledged), and the interval timer still makes the data durable."""
    gate = threading.Event()
    syncs = 0
    real = js_streams.prepare_sync

    def held(store: StreamStore) -> Callable[[], None] | None:
        nonlocal syncs
        work = real(store)

        def slow() -> None:
            nonlocal syncs
            gate.wait(10)
            if work is not None:
                work()
            syncs += 1

        return slow

    monkeypatch.setattr(js_streams, "prepare_sync", held)
    store_dir = tmp_path / "js"
    server = await make_server(f'jetstream {{ store_dir: "{store_dir}", sync_interval: "100ms" }}')
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream()
    await js.add_stream(name="LZ", subjects=["lz"])
    store = server.jetstream.accounts["$G"].streams["LZ"].store
    blocks = list((store_dir / "jetstream" / "$G" / "streams" / "LZ" / "msgs").glob("*.dat"))
    assert len(blocks) == 1
    for i in range(20):
        payload = b"lazy-payload-%03d" % i
        assert (await js.publish("lz", payload)).seq == i + 1
        assert payload in blocks[0].read_bytes()  # in the OS's hands before the ack
    assert syncs == 0
    gate.set()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while store.needs_sync or syncs == 0:
        assert loop.time() < deadline, "the interval timer never synced"
        await asyncio.sleep(0.05)
    assert syncs < 20  # one per interval, not one per message
    await nc.close()
