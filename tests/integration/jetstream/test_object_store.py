"""nats-py's object store against the server, unchanged: bucket OBJ_<bucket>, chunks on
$O.<bucket>.C.<nuid>, metadata on $O.<bucket>.M.<name> written with rollups, read back through
an ordered consumer and get_last_msg."""

from __future__ import annotations

import asyncio

import nats
import nats.js.errors
import pytest

from tests.integration.jetstream.js_helpers import api


async def test_put_get_info_list_delete(nc: nats.NATS) -> None:
    js = nc.jetstream()
    obs = await js.create_object_store(bucket="FILES", description="blobs")
    info = await api(nc, "STREAM.INFO.OBJ_FILES")
    assert info["config"]["subjects"] == ["$O.FILES.C.>", "$O.FILES.M.>"]
    assert info["config"]["allow_rollup_hdrs"] is True

    small = b"hello object store"
    await obs.put("small.txt", small)
    big = bytes(range(256)) * 4096  # 1 MiB: many chunks
    put_info = await obs.put("big.bin", big)
    assert put_info.size == len(big)
    assert put_info.chunks > 1

    got = await asyncio.wait_for(obs.get("big.bin"), 10)
    assert got.data == big
    assert (await obs.get("small.txt")).data == small
    meta = await obs.get_info("big.bin")
    assert (meta.name, meta.size) == ("big.bin", len(big))
    assert sorted(i.name for i in await obs.list()) == ["big.bin", "small.txt"]

    await obs.delete("small.txt")
    with pytest.raises(nats.js.errors.ObjectNotFoundError):
        await obs.get("small.txt")
    assert [i.name for i in await obs.list(ignore_deletes=True)] == ["big.bin"]


async def test_overwrite_replaces_chunks(nc: nats.NATS) -> None:
    js = nc.jetstream()
    obs = await js.create_object_store(bucket="OVR")
    await obs.put("doc", b"a" * 300_000)
    first = (await js.stream_info("OBJ_OVR")).state.messages
    await obs.put("doc", b"b" * 1000)
    assert (await obs.get("doc")).data == b"b" * 1000
    # The old chunks were purged; what is left is the new chunk and the meta message.
    state = (await js.stream_info("OBJ_OVR")).state
    assert state.messages == 2 < first


async def test_missing_object_and_bucket(nc: nats.NATS) -> None:
    js = nc.jetstream()
    obs = await js.create_object_store(bucket="EMPTY")
    with pytest.raises(nats.js.errors.ObjectNotFoundError):
        await obs.get("nope")
    with pytest.raises(nats.js.errors.BucketNotFoundError):
        await js.object_store("NOSUCH")
    assert await js.delete_object_store("EMPTY")
