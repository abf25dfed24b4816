"""Durability: acknowledged messages survive SIGKILL of a subprocess server; streams,
their config and dedupe state survive restarts; memory streams do not; damaged stream
directories are reported and left alone, never deleted."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.integration.jetstream.js_helpers import VS_NATS, ProcServer, api, err

pytestmark = pytest.mark.skipif(VS_NATS, reason="restarts a jetraft server")

PAYLOAD_PAD = b"." * 100


def payload(i: int) -> bytes:
    return b"msg-%08d" % i + PAYLOAD_PAD


async def read_all(nc: nats.NATS, stream: str, last_seq: int) -> dict[int, bytes]:
    """Every stored message by sequence, through batched direct gets."""
    out: dict[int, bytes] = {}
    seq = 1
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        while seq <= last_seq:
            body = json.dumps({"seq": seq, "batch": 500}).encode()
            await nc.publish(f"$JS.API.DIRECT.GET.{stream}", body, reply=inbox)
            while True:
                msg = await sub.next_msg(timeout=5)
                status = msg.headers.get("Status") if msg.headers else None
                if status == "204" or status == "404":
                    break
                assert msg.headers is not None
                got = int(msg.headers["Nats-Sequence"])
                out[got] = msg.data
                seq = got + 1
            if status == "404":
                break
    finally:
        await sub.unsubscribe()
    return out


async def test_acked_messages_survive_sigkill(tmp_path: Path) -> None:
    conf = 'jetstream { store_dir: "%s" }' % (tmp_path / "js")
    server = ProcServer(tmp_path, conf)
    await server.start()
    acked: dict[int, bytes] = {}
    try:
        nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=5)
        js = nc.jetstream(timeout=10, publish_async_max_pending=256)
        await js.add_stream(name="CRASH", subjects=["crash.>"], allow_direct=True)
        enough = asyncio.Event()

        async def publisher() -> None:
            i = 0
            while True:
                data = payload(i)
                fut = await js.publish_async("crash.x", data)

                def done(f: asyncio.Future[Any], data: bytes = data) -> None:
                    if not f.cancelled() and f.exception() is None:
                        acked[f.result().seq] = data
                        if len(acked) >= 3000:
                            enough.set()

                fut.add_done_callback(done)
                i += 1

        task = asyncio.create_task(publisher())
        await asyncio.wait_for(enough.wait(), 60)
        server.kill()  # mid-stream: hundreds of publishes are in flight
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        with contextlib.suppress(Exception):
            await nc.close()
    finally:
        server.kill()
    assert len(acked) >= 3000

    await server.start()
    try:
        nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=5)
        js = nc.jetstream()
        state = (await js.stream_info("CRASH")).state
        assert state.last_seq >= max(acked)
        stored = await read_all(nc, "CRASH", state.last_seq)
        missing = [seq for seq in acked if stored.get(seq) != acked[seq]]
        assert not missing, f"{len(missing)} acknowledged messages lost, first {missing[:5]}"
        # Nothing half written: every stored message is one the publisher sent, whole.
        assert len(stored) == state.messages
        for seq, data in stored.items():
            assert data.endswith(PAYLOAD_PAD) and data.startswith(b"msg-"), seq
        # The restarted stream goes on from where it was.
        ack = await js.publish("crash.x", b"after")
        assert ack.seq == state.last_seq + 1
        await nc.close()
    finally:
        server.stop()


async def test_restart_keeps_streams_and_dedupe(make_server: Any, tmp_path: Path) -> None:
    conf = 'jetstream { store_dir: "%s" }' % (tmp_path / "js")
    server = await make_server(conf)
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream()
    await js.add_stream(name="KEEP", subjects=["keep.*"], max_msgs=100, description="kept")
    await js.add_stream(name="MEM", subjects=["mem"], storage="memory")
    for i in range(5):
        await js.publish("keep.a", b"%d" % i, headers={"Nats-Msg-Id": f"id{i}"})
    await js.publish("mem", b"x")
    await api(nc, "STREAM.MSG.DELETE.KEEP", {"seq": 2})
    before = await api(nc, "STREAM.INFO.KEEP")
    await nc.close()
    await server.stop()

    server = await make_server(conf)
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream()
    after = await api(nc, "STREAM.INFO.KEEP")
    assert after["config"] == before["config"]
    assert after["created"] == before["created"]
    assert after["state"] == before["state"]
    dup = await js.publish("keep.a", b"again", headers={"Nats-Msg-Id": "id4"})
    assert (dup.seq, dup.duplicate) == (5, True)
    # Memory streams vanish with the server, as in nats-server.
    assert err(await api(nc, "STREAM.INFO.MEM"))[1] == 10059
    names = await api(nc, "STREAM.NAMES")
    assert names["streams"] == ["KEEP"]
    await nc.close()


def _stream_dir(tmp_path: Path, name: str) -> Path:
    return tmp_path / "js" / "jetstream" / "$G" / "streams" / name


async def test_damaged_stream_is_reported_and_left_alone(make_server: Any, tmp_path: Path) -> None:
    conf = 'jetstream { store_dir: "%s" }' % (tmp_path / "js")
    server = await make_server(conf, http=True)
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream()
    await js.add_stream(name="GOOD", subjects=["good"])
    await js.add_stream(name="BADMETA", subjects=["badmeta"])
    await js.add_stream(name="BADDATA", subjects=["baddata"])
    for _ in range(50):
        await js.publish("good", b"x" * 100)
        await js.publish("baddata", b"y" * 100)
    await nc.close()
    await server.stop()

    meta = _stream_dir(tmp_path, "BADMETA") / "meta.json"
    meta.write_text(meta.read_text().replace('"badmeta"', '"edited"'))
    block = next((_stream_dir(tmp_path, "BADDATA") / "msgs").glob("*.dat"))
    raw = bytearray(block.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # a bad record in the middle, not a torn tail
    block.write_bytes(bytes(raw))
    files_before = {p: p.read_bytes() for p in (tmp_path / "js").rglob("*") if p.is_file()}

    server = await make_server(conf, http=True)
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream()
    assert (await js.stream_info("GOOD")).state.messages == 50
    names = await api(nc, "STREAM.NAMES")
    assert names["streams"] == ["GOOD"]
    # The names stay taken: nothing may overwrite the damaged directories.
    resp = await api(nc, "STREAM.CREATE.BADMETA", {"name": "BADMETA", "subjects": ["badmeta"]})
    assert err(resp)[:2] == (500, 10194)
    jsz = server.jetstream.jsz({"accounts": "1"})
    offline = jsz["account_details"][0]["offline_streams"]
    assert set(offline) == {"BADMETA", "BADDATA"}
    await nc.close()
    await server.stop()
    for path, blob in files_before.items():
        if path.name == "LOCK":
            continue
        assert path.exists() and path.read_bytes() == blob, f"{path} was changed"


async def test_damaged_consumer_is_offline_reserved_and_left_alone(
    make_server: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = 'jetstream { store_dir: "%s" }' % (tmp_path / "js")
    server = await make_server(conf)
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s"])
    await js.publish("s", b"x")
    await js.add_consumer("S", durable_name="FINE")
    await js.add_consumer("S", durable_name="BROKEN")
    await nc.close()
    await server.stop()

    state = _stream_dir(tmp_path, "S") / "obs" / "BROKEN" / "consumer.dat"
    raw = bytearray(state.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    state.write_bytes(bytes(raw))

    server = await make_server(conf)
    assert "consumer S > BROKEN is offline" in caplog.text
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream()
    assert (await js.consumer_info("S", "FINE")).num_pending == 1
    names = await api(nc, "CONSUMER.NAMES.S")
    assert names["consumers"] == ["FINE"]
    # The name stays taken, with nats-server's offline error.
    resp = await api(
        nc, "CONSUMER.CREATE.S.BROKEN", {"stream_name": "S", "config": {"name": "BROKEN"}}
    )
    code, err_code, text = err(resp)
    assert (code, err_code) == (500, 10195) and "checksum" in text
    jsz = server.jetstream.jsz({"accounts": "1"})
    offline = jsz["account_details"][0]["offline_consumers"]
    assert list(offline) == ["S"] and list(offline["S"]) == ["BROKEN"]
    await nc.close()
    await server.stop()
    assert state.read_bytes() == bytes(raw)  # untouched


async def test_jsz_monitor_endpoint(make_server: Any, tmp_path: Path) -> None:
    server = await make_server('jetstream { store_dir: "%s" }' % (tmp_path / "js"), http=True)
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream()
    await js.add_stream(name="M1", subjects=["m1"])
    await js.publish("m1", b"x")
    await nc.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.monitor.port)
    writer.write(b"GET /jsz?streams=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    await writer.drain()
    raw = await reader.read()
    writer.close()
    body = json.loads(raw.split(b"\r\n\r\n", 1)[1])
    assert (body["streams"], body["messages"]) == (1, 1)
    assert body["bytes"] == 30 + 2 + 1
    assert body["api"]["total"] >= 1
    detail = body["account_details"][0]["stream_detail"][0]
    assert detail["name"] == "M1"


async def test_a_create_a_crash_interrupted_is_set_aside_and_its_name_is_free(
    make_server: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """STREAM.CREATE writes the stream's directory, ``msgs/`` and ``meta.json`` before it
    syncs them and answers: a crash in between leaves any prefix of that. Such a directory
    was never confirmed to anyone, so it must not block the name (nats-server skips a stream
    directory without its meta file); a damaged meta file of a real stream still does."""
    conf = 'jetstream { store_dir: "%s" }' % (tmp_path / "js")
    server = await make_server(conf)
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream()
    for name in ("TORN", "EMPTYMETA", "NOMETA", "KEPT"):
        await js.add_stream(name=name, subjects=[name.lower()])
    await js.publish("kept", b"x")
    await nc.close()
    await server.stop()

    meta = _stream_dir(tmp_path, "TORN") / "meta.json"
    torn_meta = meta.read_bytes()[:40]  # a first write cut short
    meta.write_bytes(torn_meta)
    (_stream_dir(tmp_path, "EMPTYMETA") / "meta.json").write_bytes(b"")
    (_stream_dir(tmp_path, "NOMETA") / "meta.json").unlink()
    bare = _stream_dir(tmp_path, "BARE")
    bare.mkdir()  # the crash hit right after the directory was made
    # A stream that stored a message keeps its name even with its meta file gone.
    (_stream_dir(tmp_path, "KEPT") / "meta.json").unlink()

    caplog.set_level("WARNING")
    server = await make_server(conf)
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream()
    assert (await api(nc, "STREAM.NAMES"))["streams"] is None
    for name in ("TORN", "EMPTYMETA", "NOMETA", "BARE"):
        assert f"{name}: a create that never finished" in caplog.text
        info = await js.add_stream(name=name, subjects=[name.lower()])
        assert info.state.messages == 0
        ack = await js.publish(name.lower(), b"after")
        assert (ack.stream, ack.seq) == (name, 1)
    resp = await api(nc, "STREAM.CREATE.KEPT", {"name": "KEPT", "subjects": ["kept"]})
    assert err(resp)[:2] == (500, 10194)
    await nc.close()
    await server.stop()
    # Set aside, not deleted: the torn meta file is still there to look at.
    aside = [p.name for p in _stream_dir(tmp_path, "TORN").parent.iterdir()]
    torn = [n for n in aside if n.startswith(".unfinished-TORN.")]
    assert len(torn) == 1
    assert (_stream_dir(tmp_path, torn[0]) / "meta.json").read_bytes() == torn_meta
