"""Answers that confirm a change leave only once the change is durable, and a change that
could not be made durable is reported with nats-server's error: STREAM.PURGE, MSG.DELETE
(secure erase unless no_erase), CONSUMER.DELETE, STREAM.DELETE, STREAM.CREATE (whose fsyncs
leave the event loop), acks sent as requests, and PubAcks at shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy

from jetraft.jetstream.store.types import StreamStore
from jetraft.server.js import consumer_runtime as js_consumer_runtime
from jetraft.server.js import consumers as js_consumers
from jetraft.server.js import store_glue
from jetraft.server.js import streams as js_streams
from tests.integration.jetstream.js_helpers import VS_NATS, api, err
from tests.rawclient import RawClient

pytestmark = pytest.mark.skipif(VS_NATS, reason="instruments jetraft's commit path")

SECRET = b"a secret that must leave the disk"


def held_syncs(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Hold every stream fsync back until the returned event is set."""
    gate = threading.Event()
    real = js_streams.prepare_sync

    def held(store: StreamStore) -> Callable[[], None] | None:
        work = real(store)

        def slow() -> None:
            gate.wait(10)
            if work is not None:
                work()

        return slow

    monkeypatch.setattr(js_streams, "prepare_sync", held)
    return gate


async def start(make_server: Any, tmp_path: Path) -> tuple[Any, nats.NATS, Path]:
    store_dir = tmp_path / "js"
    server = await make_server(f'jetstream {{ store_dir: "{store_dir}" }}')
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    return server, nc, store_dir / "jetstream" / "$G" / "streams"


async def test_purge_and_msg_delete_answer_after_the_fsync(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, nc, _ = await start(make_server, tmp_path)
    js = nc.jetstream()
    await js.add_stream(name="P", subjects=["p.>"])
    for i in range(5):
        await js.publish("p.a", b"%d" % i)
    gate = held_syncs(monkeypatch)
    purge = asyncio.ensure_future(api(nc, "STREAM.PURGE.P", {"seq": 3}, timeout=5))
    delete = asyncio.ensure_future(api(nc, "STREAM.MSG.DELETE.P", {"seq": 4}, timeout=5))
    await asyncio.sleep(0.3)  # bounded negative wait: no answer while the fsync is held
    assert not purge.done() and not delete.done()
    gate.set()
    assert (await purge)["purged"] == 2
    assert (await delete)["success"] is True
    await nc.close()


async def test_msg_delete_erases_the_bytes_unless_no_erase(
    make_server: Any, tmp_path: Path
) -> None:
    _, nc, streams = await start(make_server, tmp_path)
    js = nc.jetstream()
    await js.add_stream(name="E", subjects=["e.>"])
    await js.publish("e.a", SECRET + b" one")
    await js.publish("e.a", SECRET + b" two")
    await js.publish("e.a", b"stays")

    def on_disk() -> bytes:
        return b"".join(p.read_bytes() for p in (streams / "E" / "msgs").glob("*.dat"))

    assert SECRET + b" one" in on_disk()
    assert (await api(nc, "STREAM.MSG.DELETE.E", {"seq": 1}))["success"] is True
    # The answer came after the erase was durable: the bytes are gone from the file.
    assert SECRET + b" one" not in on_disk()
    assert (await api(nc, "STREAM.MSG.DELETE.E", {"seq": 2, "no_erase": True}))["success"]
    assert SECRET + b" two" in on_disk()  # removed, not overwritten (as asked)
    info = await js.stream_info("E")
    assert (info.state.messages, info.state.first_seq) == (1, 3)
    await nc.close()


async def test_ack_sync_waits_for_the_consumer_commit(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, nc, streams = await start(make_server, tmp_path)
    js = nc.jetstream()
    await js.add_stream(name="A", subjects=["a.>"])
    await js.publish("a.x", b"1")
    await js.add_consumer("A", durable_name="C", ack_policy=AckPolicy.EXPLICIT)
    gate = threading.Event()
    real = js_consumer_runtime.write_state

    def held(*args: Any) -> None:
        gate.wait(10)
        real(*args)

    monkeypatch.setattr(js_consumer_runtime, "write_state", held)
    sub = await js.pull_subscribe_bind("C", stream="A")
    (msg,) = await sub.fetch(1, timeout=2)
    ack = asyncio.ensure_future(nc.request(msg.reply, b"", timeout=5))
    await asyncio.sleep(0.3)  # bounded negative wait: the state write is held back
    assert not ack.done()
    gate.set()
    await ack
    state = (streams / "A" / "obs" / "C" / "consumer.dat").read_bytes()
    from jetraft.jetstream import consumer_state

    assert consumer_state.decode(state).ack_floor == (1, 1)
    await nc.close()


async def test_acks_sent_together_as_requests_wait_for_the_consumer_commit(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ack requests that arrive in one read (taken together by the consumer) are answered
    only once a state write covering all of them is on disk, each once."""
    server, nc, streams = await start(make_server, tmp_path)
    js = nc.jetstream()
    await js.add_stream(name="A", subjects=["a.>"])
    for i in range(5):
        await js.publish("a.x", b"%d" % i)
    await js.add_consumer("A", durable_name="C", ack_policy=AckPolicy.EXPLICIT)
    sub = await js.pull_subscribe_bind("C", stream="A")
    msgs = await sub.fetch(5, timeout=2)
    gate = threading.Event()
    real = js_consumer_runtime.write_state

    def held(*args: Any) -> None:
        gate.wait(10)
        real(*args)

    monkeypatch.setattr(js_consumer_runtime, "write_state", held)
    raw = await RawClient.connect("127.0.0.1", server.client_port)
    await raw.send(b"SUB _INBOX.acked.* 1\r\n")
    await raw.ping()
    await raw.send(b"".join(
        f"PUB {m.reply} _INBOX.acked.{i} 0\r\n\r\n".encode() for i, m in enumerate(msgs)
    ))
    await raw.ping()  # the server has taken every ack
    answer = asyncio.ensure_future(raw.read_frames(1))
    await asyncio.sleep(0.3)  # bounded negative wait: the state write is held back
    assert not answer.done()
    gate.set()
    first = await answer
    rest = await raw.read_frames(4)
    assert sorted(f.subject for f in first + rest) == [f"_INBOX.acked.{i}" for i in range(5)]
    await raw.ping()  # each answered once
    from jetraft.jetstream import consumer_state

    state = (streams / "A" / "obs" / "C" / "consumer.dat").read_bytes()
    assert consumer_state.decode(state).ack_floor == (5, 5)
    await raw.close()
    await nc.close()


async def test_consumer_delete_answers_after_removal_and_reports_failure(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, nc, streams = await start(make_server, tmp_path)
    js = nc.jetstream()
    await js.add_stream(name="C", subjects=["c.>"])
    await js.add_consumer("C", durable_name="GONE")
    await js.add_consumer("C", durable_name="STUCK")
    assert (streams / "C" / "obs" / "GONE" / "consumer.dat").exists()
    assert (await api(nc, "CONSUMER.DELETE.C.GONE"))["success"] is True
    assert not (streams / "C" / "obs" / "GONE").exists()

    def broken(disk: Any, dirname: str) -> None:
        raise OSError(13, "Permission denied", dirname)

    monkeypatch.setattr(js_consumers, "remove_dir", broken)
    resp = await api(nc, "CONSUMER.DELETE.C.STUCK")
    code, err_code, text = err(resp)
    assert (code, err_code) == (500, 10051) and "Permission denied" in text
    assert resp["type"] == "io.nats.jetstream.api.v1.consumer_delete_response"
    assert (streams / "C" / "obs" / "STUCK" / "consumer.dat").exists()
    await nc.close()


async def test_stream_delete_is_durable_and_a_failure_keeps_the_name_offline(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, nc, streams = await start(make_server, tmp_path)
    js = nc.jetstream()
    await js.add_stream(name="D1", subjects=["d1"])
    await js.add_stream(name="D2", subjects=["d2"])
    await js.publish("d1", b"x")
    assert (await api(nc, "STREAM.DELETE.D1"))["success"] is True
    assert sorted(p.name for p in streams.iterdir()) == ["D2"]

    def broken(stream_dir: Path) -> None:
        raise OSError(30, "Read-only file system", str(stream_dir))

    monkeypatch.setattr(js_streams, "remove_stream_dir", broken)
    resp = await api(nc, "STREAM.DELETE.D2")
    code, err_code, text = err(resp)
    assert (code, err_code) == (500, 10050) and "Read-only file system" in text
    # The name stays reserved: nothing is created over what is left on disk.
    again = await api(nc, "STREAM.CREATE.D2", {"name": "D2", "subjects": ["d2"]})
    assert err(again)[1] == 10194
    assert (streams / "D2").exists()
    await nc.close()


async def test_shutdown_answers_pubacks_only_after_the_running_fsync(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, nc, _ = await start(make_server, tmp_path)
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s"])
    gate = held_syncs(monkeypatch)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("s", b"in flight", reply=inbox)
    await nc.flush()
    stream = server.jetstream.accounts["$G"].runtimes["S"]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while stream.commits._running is None:  # the held fsync is running
        assert loop.time() < deadline
        await asyncio.sleep(0.01)
    stopping = asyncio.ensure_future(server.jetstream.stop())
    await asyncio.sleep(0.3)  # bounded negative wait: shutdown waits for the held fsync
    assert not stopping.done()
    with pytest.raises(nats.errors.TimeoutError):
        await sub.next_msg(timeout=0.01)
    gate.set()
    await stopping
    ack = await sub.next_msg(timeout=5)
    assert b'"seq":1' in ack.data
    await nc.close()


def held_create_syncs(monkeypatch: pytest.MonkeyPatch, fail: str = "") -> threading.Event:
    """Hold back the directory fsyncs of STREAM.CREATE until the event is set; with
    ``fail``, fail those of directories inside that stream's."""
    gate = threading.Event()
    real = store_glue.fsync_dir

    def held(path: Path) -> None:
        gate.wait(10)
        if fail and fail in path.parts:
            raise OSError(5, "Input/output error", str(path))
        real(path)

    monkeypatch.setattr(store_glue, "fsync_dir", held)
    return gate


async def test_create_answers_after_its_fsyncs_and_the_loop_keeps_serving(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, nc, streams = await start(make_server, tmp_path)
    js = nc.jetstream()
    await js.add_stream(name="OLD", subjects=["old"])
    gate = held_create_syncs(monkeypatch)
    body = {"name": "NEW", "subjects": ["new"]}
    create = asyncio.ensure_future(api(nc, "STREAM.CREATE.NEW", body, timeout=15))
    deadline = asyncio.get_running_loop().time() + 5
    while "NEW" not in ((await api(nc, "STREAM.NAMES"))["streams"] or []):  # being created
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("new", b"early", reply=inbox)  # stored at once, acknowledged only later
    # Other clients are served while the create waits for the disk: the sync is not on the
    # event loop (a slow disk used to stall every client of the server).
    other = await nats.connect(nc.connected_url.geturl())
    assert (await other.jetstream().publish("old", b"x")).seq == 1
    info = await api(other, "STREAM.INFO.OLD")
    assert info["config"]["name"] == "OLD"
    await other.close()
    await asyncio.sleep(0.3)  # bounded negative wait: nothing confirms the new stream yet
    assert not create.done()
    with pytest.raises(nats.errors.TimeoutError):
        await sub.next_msg(timeout=0.01)
    gate.set()
    assert (await create)["config"]["name"] == "NEW"
    assert b'"seq":1' in (await sub.next_msg(timeout=5)).data
    assert (streams / "NEW" / "meta.json").exists()
    await nc.close()


async def test_create_whose_fsync_fails_is_answered_with_the_error_and_undone(
    make_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, nc, streams = await start(make_server, tmp_path)
    gate = held_create_syncs(monkeypatch, fail="BAD")
    gate.set()
    resp = await api(nc, "STREAM.CREATE.BAD", {"name": "BAD", "subjects": ["bad"]})
    code, err_code, text = err(resp)
    assert (code, err_code) == (500, 10049) and "Input/output error" in text
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_create_response"
    names = await api(nc, "STREAM.NAMES")
    assert not names["streams"]
    monkeypatch.undo()
    # Nothing is left that would block the name.
    again = await api(nc, "STREAM.CREATE.BAD", {"name": "BAD", "subjects": ["bad"]})
    assert again["config"]["name"] == "BAD", again
    assert sorted(p.name for p in streams.iterdir()) == ["BAD"]
    await nc.close()
