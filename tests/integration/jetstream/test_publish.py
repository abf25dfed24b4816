"""Publishing into streams: PubAcks, dedupe, Nats-Expected-* headers, limits and discard
policies, rollups, sealed streams, max_age expiry, per-message TTL, retention policies with
real consumers, and many outstanding async publishes."""

from __future__ import annotations

import asyncio
import json

import nats
import nats.js.errors
import pytest
from nats.js.api import ConsumerConfig, StreamConfig

from tests.integration.jetstream.js_helpers import VS_NATS, api, wait_for

SEC = 1_000_000_000


async def raw_pub(nc: nats.NATS, subject: str, data: bytes = b"x", **headers: str) -> dict:
    hdrs = {k.replace("_", "-"): v for k, v in headers.items()} or None
    msg = await nc.request(subject, data, timeout=2, headers=hdrs)
    out: dict = json.loads(msg.data)
    return out


async def test_puback_and_duplicates(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    ack = await js.publish("s.a", b"1", headers={"Nats-Msg-Id": "id-1"})
    assert (ack.stream, ack.seq, ack.duplicate) == ("S", 1, None)
    dup = await js.publish("s.a", b"1", headers={"Nats-Msg-Id": "id-1"})
    assert (dup.seq, dup.duplicate) == (1, True)
    assert await raw_pub(nc, "s.b") == {"stream": "S", "seq": 2}
    # No reply subject: stored silently.
    await nc.publish("s.c", b"quiet")
    await wait_for(lambda: _msgs(js, "S", 3))


async def _msgs(js: nats.js.JetStreamContext, name: str, n: int) -> bool:
    return (await js.stream_info(name)).state.messages == n


async def test_dedupe_window_expires(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="W", subjects=["w"], duplicate_window=0.5))
    assert await raw_pub(nc, "w", Nats_Msg_Id="a") == {"stream": "W", "seq": 1}
    duplicate = {"stream": "W", "seq": 1, "duplicate": True}
    assert await raw_pub(nc, "w", Nats_Msg_Id="a") == duplicate
    # Within the window the id keeps being a duplicate of seq 1; once the window passed, the
    # same id is stored again as a new message. Poll (bounded) instead of sleeping a guess.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while (ack := await raw_pub(nc, "w", Nats_Msg_Id="a")) == duplicate:
        assert loop.time() < deadline, "dedupe window never passed"
        await asyncio.sleep(0.02)
    assert ack == {"stream": "W", "seq": 2}
    # The new message opened a new window for the id.
    assert await raw_pub(nc, "w", Nats_Msg_Id="a") == {"stream": "W", "seq": 2, "duplicate": True}
    assert (await js.stream_info("W")).state.messages == 2


async def test_max_msgs_per_subject_discard_old_keeps_the_newest(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(
        StreamConfig(name="PS", subjects=["ps.*"], max_msgs_per_subject=2, metadata={"k": "v"})
    )
    for i, subject in enumerate(("ps.a", "ps.b", "ps.a", "ps.a", "ps.b", "ps.a")):
        await js.publish(subject, f"{subject}-{i}".encode())
    info = await js.stream_info("PS", subjects_filter=">")
    assert info.state.subjects == {"ps.a": 2, "ps.b": 2}
    assert info.state.messages == 4
    assert info.config.metadata is not None and info.config.metadata["k"] == "v"
    assert (await js.get_msg("PS", 4)).data == b"ps.a-3"
    assert (await js.get_last_msg("PS", "ps.a")).data == b"ps.a-5"
    with pytest.raises(nats.js.errors.NotFoundError):
        await js.get_msg("PS", 3)  # the older ps.a messages were discarded


async def test_expected_headers(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="E", subjects=["e.*"])
    with pytest.raises(nats.js.errors.BadRequestError) as exc:
        await js.publish("e.a", b"", stream="OTHER")
    assert exc.value.err_code == 10060
    assert (await js.publish("e.a", b"", stream="E")).seq == 1
    resp = await raw_pub(nc, "e.a", Nats_Expected_Last_Sequence="5")
    assert resp["error"] == {
        "code": 400,
        "err_code": 10071,
        "description": "wrong last sequence: 1",
    }
    assert resp["seq"] == 0
    assert (await raw_pub(nc, "e.a", Nats_Expected_Last_Sequence="1"))["seq"] == 2
    resp = await raw_pub(nc, "e.b", Nats_Expected_Last_Subject_Sequence="0")
    assert resp["seq"] == 3
    resp = await raw_pub(nc, "e.b", Nats_Expected_Last_Subject_Sequence="0")
    assert resp["error"]["description"] == "wrong last sequence: 3"
    resp = await raw_pub(
        nc,
        "e.c",
        Nats_Expected_Last_Subject_Sequence="2",
        Nats_Expected_Last_Subject_Sequence_Subject="e.a",
    )
    assert resp["seq"] == 4
    await raw_pub(nc, "e.a", Nats_Msg_Id="m1")
    resp = await raw_pub(nc, "e.a", Nats_Expected_Last_Msg_Id="m0")
    assert resp["error"] == {"code": 400, "err_code": 10070, "description": "wrong last msg ID: m1"}
    assert "seq" in await raw_pub(nc, "e.a", Nats_Expected_Last_Msg_Id="m1")
    assert (await js.stream_info("E")).state.messages == 6


async def test_limits_discard_old_and_new(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="OLD", subjects=["old"], max_msgs=3))
    for _ in range(5):
        await js.publish("old", b"x")
    state = (await js.stream_info("OLD")).state
    assert (state.messages, state.first_seq, state.last_seq) == (3, 3, 5)
    await js.add_stream(StreamConfig(name="NEW", subjects=["new"], max_msgs=2, discard="new"))
    await js.publish("new", b"x")
    await js.publish("new", b"x")
    resp = await raw_pub(nc, "new")
    assert resp["error"] == {
        "code": 503,
        "err_code": 10077,
        "description": "maximum messages exceeded",
    }
    await js.add_stream(StreamConfig(name="B", subjects=["b"], max_bytes=60, discard="new"))
    await js.publish("b", b"x")
    resp = await raw_pub(nc, "b", b"y" * 40)
    assert resp["error"]["description"] == "maximum bytes exceeded"
    await js.add_stream(
        StreamConfig(
            name="PER",
            subjects=["per.*"],
            max_msgs_per_subject=1,
            discard="new",
            discard_new_per_subject=True,
        )
    )
    await js.publish("per.a", b"x")
    resp = await raw_pub(nc, "per.a")
    assert resp["error"]["description"] == "maximum messages per subject exceeded"
    assert (await js.publish("per.b", b"x")).seq == 2
    await js.add_stream(StreamConfig(name="SZ", subjects=["sz"], max_msg_size=8))
    resp = await raw_pub(nc, "sz", b"123456789")
    assert resp["error"] == {
        "code": 400,
        "err_code": 10054,
        "description": "message size exceeds maximum allowed",
    }


async def test_rollups(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="NR", subjects=["nr"])
    resp = await raw_pub(nc, "nr", Nats_Rollup="sub")
    assert resp["error"] == {"code": 500, "err_code": 10111, "description": "rollup not permitted"}
    await js.add_stream(StreamConfig(name="R", subjects=["r.*"], allow_rollup_hdrs=True))
    for subject in ("r.a", "r.a", "r.b", "r.b"):
        await js.publish(subject, b"x")
    await js.publish("r.a", b"latest", headers={"Nats-Rollup": "sub"})
    info = await js.stream_info("R", subjects_filter=">")
    assert info.state.subjects == {"r.a": 1, "r.b": 2}
    resp = await raw_pub(nc, "r.a", Nats_Rollup="bogus")
    assert resp["error"]["description"] == 'rollup value invalid: "bogus"'
    await js.publish("r.c", b"all", headers={"Nats-Rollup": "all"})
    state = (await js.stream_info("R")).state
    assert (state.messages, state.first_seq, state.last_seq) == (1, 6, 6)


async def test_sealed_deny_delete_deny_purge(nc: nats.NATS) -> None:
    js = nc.jetstream()
    cfg = StreamConfig(name="SEAL", subjects=["seal"], deny_delete=True, deny_purge=True)
    await js.add_stream(cfg)
    await js.publish("seal", b"x")
    resp = await api(nc, "STREAM.MSG.DELETE.SEAL", {"seq": 1})
    assert resp["error"]["description"] == "message delete not permitted"
    resp = await api(nc, "STREAM.PURGE.SEAL")
    assert resp["error"] == {
        "code": 500,
        "err_code": 10110,
        "description": "stream purge not permitted",
    }
    cfg.sealed = True
    info = await js.update_stream(cfg)
    assert info.config.sealed
    resp = await raw_pub(nc, "seal")
    assert resp["error"] == {
        "code": 400,
        "err_code": 10109,
        "description": "invalid operation on sealed stream",
    }
    resp = await api(nc, "STREAM.PURGE.SEAL")
    assert resp["error"]["err_code"] == 10109


async def test_max_age_expires_messages(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="AGE", subjects=["age"], max_age=0.3))
    await js.publish("age", b"x")
    await js.publish("age", b"y")
    assert (await js.stream_info("AGE")).state.messages == 2
    await wait_for(lambda: _msgs(js, "AGE", 0), timeout_s=5)
    state = (await js.stream_info("AGE")).state
    assert (state.first_seq, state.last_seq) == (3, 2)


async def test_message_ttl(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="NOTTL", subjects=["nottl"])
    resp = await raw_pub(nc, "nottl", Nats_TTL="5")
    assert resp["error"] == {
        "code": 400,
        "err_code": 10166,
        "description": "per-message TTL is disabled",
    }
    await js.add_stream(StreamConfig(name="TTL", subjects=["ttl.*"], allow_msg_ttl=True))
    resp = await raw_pub(nc, "ttl.a", Nats_TTL="abc")
    assert resp["error"] == {
        "code": 400,
        "err_code": 10165,
        "description": "invalid per-message TTL",
    }
    await js.publish("ttl.a", b"short", msg_ttl=1)
    await js.publish("ttl.b", b"stays")
    await wait_for(lambda: _msgs(js, "TTL", 1), timeout_s=5)
    assert (await js.get_last_msg("TTL", "ttl.b")).data == b"stays"


async def test_interest_retention(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="INT", subjects=["int.*"], retention="interest"))
    await js.publish("int.a", b"nobody")  # no consumer: not kept
    state = (await js.stream_info("INT")).state
    assert (state.messages, state.last_seq) == (0, 1)
    await js.add_consumer("INT", ConsumerConfig(durable_name="c1", ack_policy="explicit"))
    await js.add_consumer(
        "INT",
        ConsumerConfig(durable_name="c2", ack_policy="explicit", filter_subject="int.b"),
    )
    await js.publish("int.a", b"for c1")
    await js.publish("int.b", b"for both")
    assert (await js.stream_info("INT")).state.messages == 2
    sub1 = await js.pull_subscribe_bind("c1", stream="INT")
    for msg in await sub1.fetch(2, timeout=2):
        await msg.ack_sync()
    # int.a is gone (only c1 wanted it); int.b waits for c2.
    await wait_for(lambda: _msgs(js, "INT", 1))
    sub2 = await js.pull_subscribe_bind("c2", stream="INT")
    for msg in await sub2.fetch(1, timeout=2):
        await msg.ack_sync()
    await wait_for(lambda: _msgs(js, "INT", 0))


async def test_interest_retention_consumer_delete_releases(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="INT2", subjects=["int2"], retention="interest"))
    await js.add_consumer("INT2", ConsumerConfig(durable_name="only", ack_policy="explicit"))
    await js.publish("int2", b"x")
    assert (await js.stream_info("INT2")).state.messages == 1
    await js.delete_consumer("INT2", "only")
    await wait_for(lambda: _msgs(js, "INT2", 0))


async def test_workqueue_retention(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="WQ", subjects=["wq.*"], retention="workqueue"))
    for i in range(3):
        await js.publish("wq.a", str(i).encode())
    sub = await js.pull_subscribe("wq.a", durable="worker", stream="WQ")
    msgs = await sub.fetch(2, timeout=2)
    for msg in msgs:
        await msg.ack_sync()
    await wait_for(lambda: _msgs(js, "WQ", 1))
    with pytest.raises(nats.js.errors.BadRequestError) as exc:
        await js.add_consumer("WQ", ConsumerConfig(durable_name="second", ack_policy="explicit"))
    assert exc.value.err_code == 10099


async def test_many_outstanding_async_publishes(nc: nats.NATS) -> None:
    js = nc.jetstream(publish_async_max_pending=512)
    await js.add_stream(name="ASYNC", subjects=["async"])
    futures = [await js.publish_async("async", str(i).encode()) for i in range(2000)]
    await asyncio.wait_for(js.publish_async_completed(), 20)
    seqs = sorted(f.result().seq for f in futures)
    assert seqs == list(range(1, 2001))
    assert (await js.stream_info("ASYNC")).state.messages == 2000


@pytest.mark.skipif(VS_NATS, reason="checks jetraft's lazy sync configuration")
async def test_lazy_sync_interval_still_acks(make_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    server = await make_server(
        'jetstream { store_dir: "%s", sync_interval: "100ms" }' % (tmp_path / "js")
    )
    conn = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    try:
        js = conn.jetstream()
        await js.add_stream(name="LAZY", subjects=["lazy"])
        for i in range(50):
            assert (await js.publish("lazy", b"x")).seq == i + 1
    finally:
        await conn.close()


async def test_no_ack_stream_sends_no_puback(nc: nats.NATS) -> None:
    await api(nc, "STREAM.CREATE.NOACK", {"name": "NOACK", "subjects": ["noack"], "no_ack": True})
    with pytest.raises(nats.errors.TimeoutError):
        await nc.request("noack", b"x", timeout=0.3)
    js = nc.jetstream()
    assert (await js.stream_info("NOACK")).state.messages == 1


@pytest.mark.skipif(VS_NATS, reason="injects a fault into jetraft")
async def test_a_failing_apply_still_answers_the_publisher(
    make_server,
    tmp_path,
    monkeypatch,
    caplog,  # type: ignore[no-untyped-def]
) -> None:
    from jetraft.jetstream.stream import Stream

    server = await make_server('jetstream { store_dir: "%s" }' % (tmp_path / "js"))
    conn = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    try:
        js = conn.jetstream()
        await js.add_stream(name="BUG", subjects=["bug"])

        def broken(self: Stream, entry: object) -> object:
            raise RuntimeError("injected")

        with monkeypatch.context() as m:
            m.setattr(Stream, "apply", broken)
            with pytest.raises(nats.js.errors.ServiceUnavailableError) as exc:
                await js.publish("bug", b"x")
            assert exc.value.err_code == 10077
        assert "injected" in caplog.text
        assert (await js.publish("bug", b"y")).seq == 1  # and the stream goes on
    finally:
        await conn.close()
