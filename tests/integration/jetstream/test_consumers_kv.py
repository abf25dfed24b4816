"""The consumer side of KV and object store through nats-py: watch (initial values and the
end-of-initial-data marker), keys (headers only), history, object get (ordered consumer)."""

from __future__ import annotations

import asyncio

import nats


async def test_kv_watch_keys_history(nc: nats.NATS) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="B", history=5)
    await kv.put("a", b"1")
    await kv.put("b", b"2")
    await kv.put("a", b"3")
    await kv.delete("b")

    assert sorted(await kv.keys()) == ["a"]
    history = await kv.history("a")
    assert [e.value for e in history] == [b"1", b"3"]

    watcher = await kv.watchall()
    initial = []
    while True:
        entry = await watcher.updates(timeout=2)
        if entry is None:  # end of initial data
            break
        initial.append((entry.key, entry.value, entry.operation))
    assert [(k, v) for k, v, _ in initial] == [("a", b"3"), ("b", b"")]
    await kv.put("c", b"4")
    entry = await watcher.updates(timeout=2)
    assert entry is not None and (entry.key, entry.value) == ("c", b"4")
    await watcher.stop()


async def test_kv_watch_empty_bucket_signals_no_initial_values(nc: nats.NATS) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="E")
    watcher = await kv.watchall()
    assert await watcher.updates(timeout=2) is None
    await kv.put("k", b"v")
    entry = await watcher.updates(timeout=2)
    assert entry is not None and entry.value == b"v"
    await watcher.stop()


async def test_object_store_get_reads_all_chunks(nc: nats.NATS) -> None:
    js = nc.jetstream()
    obs = await js.create_object_store(bucket="OBJ")
    blob = bytes(range(256)) * 2000  # 512 KB: several chunks
    await obs.put("file", blob)
    got = await asyncio.wait_for(obs.get("file"), 10)
    assert got.data == blob
    infos = await obs.list()
    assert [i.name for i in infos] == ["file"]
