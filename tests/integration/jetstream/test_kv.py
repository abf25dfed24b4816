"""nats-py's KeyValue API against the server, unchanged: buckets are streams KV_<bucket>
on $KV.<bucket>.>, written with expected-last-subject-sequence and rollups, read by direct get
(last by subject), watched and listed through ordered push consumers."""

from __future__ import annotations

import asyncio

import nats
import nats.js.errors
import pytest
from nats.js.kv import KeyValue

from tests.integration.jetstream.js_helpers import api


async def test_bucket_is_a_stream_with_kv_conventions(nc: nats.NATS) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="CFG", history=5, description="settings", direct=True)
    assert kv._direct  # nats-py reads through direct get iff the server echoes allow_direct
    info = await api(nc, "STREAM.INFO.KV_CFG")
    cfg = info["config"]
    assert cfg["subjects"] == ["$KV.CFG.>"]
    assert (cfg["max_msgs_per_subject"], cfg["discard"]) == (5, "new")
    assert (cfg["allow_rollup_hdrs"], cfg["deny_delete"], cfg["allow_direct"]) == (
        True,
        True,
        True,
    )
    status = await kv.status()
    assert (status.bucket, status.history, status.values) == ("CFG", 5, 0)
    again = await js.key_value("CFG")
    assert again._stream == "KV_CFG"
    with pytest.raises(nats.js.errors.BucketNotFoundError):
        await js.key_value("MISSING")


@pytest.mark.parametrize("direct", [False, True])
async def test_put_get_update_create_delete_purge(nc: nats.NATS, direct: bool) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="B", history=10, direct=direct)
    rev1 = await kv.put("color", b"red")
    rev2 = await kv.put("color", b"blue")
    assert (rev1, rev2) == (1, 2)
    entry = await kv.get("color")
    assert (entry.key, entry.value, entry.revision) == ("color", b"blue", 2)
    assert (await kv.get("color", revision=1)).value == b"red"
    # update: only from the expected revision.
    assert await kv.update("color", b"green", last=2) == 3
    with pytest.raises(nats.js.errors.KeyWrongLastSequenceError) as exc:
        await kv.update("color", b"pink", last=2)
    assert "wrong last sequence: 3" in str(exc.value)
    # create: only when the key does not exist (or was deleted).
    assert await kv.create("shape", b"round") == 4
    with pytest.raises(nats.js.errors.KeyWrongLastSequenceError):
        await kv.create("shape", b"square")
    await kv.delete("shape")
    with pytest.raises(nats.js.errors.KeyNotFoundError):
        await kv.get("shape")
    assert await kv.create("shape", b"square") == 6
    # purge: a rollup marker that removes the key's history.
    await kv.purge("color")
    with pytest.raises(nats.js.errors.KeyNotFoundError):
        await kv.get("color")
    info = await js.stream_info("KV_B", subjects_filter="$KV.B.color")
    assert info.state.subjects == {"$KV.B.color": 1}  # only the purge marker is left
    with pytest.raises(nats.js.errors.KeyNotFoundError):
        await kv.get("never-written")


async def test_history_keys_and_purge_deletes(nc: nats.NATS) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="H", history=3)
    for value in (b"1", b"2", b"3", b"4"):
        await kv.put("k", value)
    await kv.put("other", b"x")
    await kv.put("gone", b"x")
    await kv.delete("gone")
    history = await kv.history("k")
    assert [e.value for e in history] == [b"2", b"3", b"4"]  # history=3 keeps the newest 3
    assert sorted(await kv.keys()) == ["k", "other"]
    await kv.purge_deletes(olderthan=-1)
    info = await js.stream_info("KV_H", subjects_filter=">")
    assert "$KV.H.gone" not in (info.state.subjects or {})


async def test_watch_sees_updates(nc: nats.NATS) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="WATCH")
    await kv.put("a", b"1")
    watcher = await kv.watch("a")
    first = await watcher.updates(timeout=2)
    assert first is not None and first.value == b"1"
    assert await watcher.updates(timeout=2) is None  # end of initial values
    await kv.put("a", b"2")
    await kv.delete("a")
    update = await watcher.updates(timeout=2)
    assert update is not None and update.value == b"2"
    deleted = await watcher.updates(timeout=2)
    assert deleted is not None and deleted.operation == "DEL"
    await watcher.stop()


async def test_bucket_ttl_expires_values(nc: nats.NATS) -> None:
    js = nc.jetstream()
    kv: KeyValue = await js.create_key_value(bucket="TTL", ttl=0.5)
    await kv.put("k", b"v")
    assert (await kv.get("k")).value == b"v"
    deadline = asyncio.get_running_loop().time() + 5
    while True:
        try:
            await kv.get("k")
        except nats.js.errors.KeyNotFoundError:
            break
        assert asyncio.get_running_loop().time() < deadline, "value did not expire"
        await asyncio.sleep(0.05)


async def test_delete_bucket(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.create_key_value(bucket="DEL")
    assert await js.delete_key_value("DEL")
    with pytest.raises(nats.js.errors.BucketNotFoundError):
        await js.key_value("DEL")
