"""Stream ``subject_transform`` and ``republish`` through nats-py, as nats-server does them
(``JETRAFT_VS_NATS=1`` runs the same tests against the real nats-server)."""

from __future__ import annotations

import asyncio
from typing import Any

import nats
import nats.js.api
import pytest
from nats.js.errors import NotFoundError

from tests.integration.jetstream.js_helpers import api, err, wait_for


async def test_subject_transform_as_nats_py_tests_it(nc: nats.NATS) -> None:
    """The first half of nats.py's V210FeaturesTest.test_subject_transforms."""
    js = nc.jetstream()
    await js.add_stream(
        name="TRANSFORMS",
        subjects=["test", "foo"],
        subject_transform=nats.js.api.SubjectTransform(src=">", dest="transformed.>"),
    )
    for i in range(10):
        ack = await js.publish("test", f"{i}".encode())
        assert ack.seq == i + 1
    # A consumer on the published subject sees nothing: messages are stored transformed.
    psub = await js.pull_subscribe("test")
    assert (await psub.consumer_info()).num_pending == 0
    with pytest.raises(asyncio.TimeoutError):
        await psub.fetch(1, timeout=0.5)
    # Finding the stream by subject uses its configured subjects, not the transformed ones.
    with pytest.raises(NotFoundError):
        await js.pull_subscribe("transformed.>")
    psub = await js.pull_subscribe("transformed.test", stream="TRANSFORMS")
    assert (await psub.consumer_info()).num_pending == 10
    msgs = await psub.fetch(10, timeout=1)
    assert [m.subject for m in msgs] == ["transformed.test"] * 10
    assert [m.data for m in msgs] == [f"{i}".encode() for i in range(10)]
    info = await js.stream_info("TRANSFORMS")
    assert info.config.subject_transform is not None
    assert (info.config.subject_transform.src, info.config.subject_transform.dest) == (
        ">",
        "transformed.>",
    )
    assert info.state.messages == 10


async def test_transform_source_filters_and_functions(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await api(nc, "STREAM.CREATE.ORD", {
        "name": "ORD",
        "subjects": ["orders.>", "other"],
        "subject_transform": {"src": "orders.*.*", "dest": "ord.$2.{{partition(4,1)}}.$1"},
    })
    await js.publish("orders.eu.123", b"a")
    await js.publish("orders.us.7", b"b")
    await js.publish("orders.x.y.z", b"c")  # does not match the source: kept as published
    await js.publish("other", b"d")
    got = [(await js.get_msg("ORD", seq)).subject for seq in range(1, 5)]
    # partition(4, 1) of "eu" and "us": FNV-1a as nats-server computes it.
    assert got == ["ord.123.3.eu", "ord.7.1.us", "orders.x.y.z", "other"]
    last = await js.get_last_msg("ORD", "ord.7.1.us")
    assert last.seq == 2
    # Nats-Expected-Last-Subject-Sequence is checked against the stored (transformed) subject.
    ack = await js.publish("orders.us.7", b"e", headers={
        "Nats-Expected-Last-Subject-Sequence": "2"})
    assert ack.seq == 5


async def test_republish_copies_with_headers(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await api(nc, "STREAM.CREATE.RP", {
        "name": "RP", "subjects": ["rp.>"],
        "republish": {"src": "rp.*", "dest": "out.$1"},
    })
    sub = await nc.subscribe("out.>")
    await nc.flush()
    await js.publish("rp.a", b"one", headers={"X-Mine": "kept"})
    await js.publish("rp.b", b"two")
    await js.publish("rp.a", b"three")
    await js.publish("rp.a.deep", b"not republished")  # no match for the source
    copies = [await sub.next_msg(timeout=2) for _ in range(3)]
    assert [(m.subject, m.data) for m in copies] == [
        ("out.a", b"one"), ("out.b", b"two"), ("out.a", b"three")]
    h0, h2 = copies[0].headers or {}, copies[2].headers or {}
    assert h0["X-Mine"] == "kept"
    assert (h0["Nats-Stream"], h0["Nats-Subject"], h0["Nats-Sequence"]) == ("RP", "rp.a", "1")
    assert h0["Nats-Last-Sequence"] == "0" and "Nats-Msg-Size" not in h0
    assert h2["Nats-Sequence"] == "3" and h2["Nats-Last-Sequence"] == "1"
    assert h2["Nats-Time-Stamp"].endswith("Z")
    msg3 = await js.get_msg("RP", 3)
    assert msg3.headers is None or "Nats-Stream" not in msg3.headers  # the stored one is as sent
    with pytest.raises(nats.errors.TimeoutError):
        await sub.next_msg(timeout=0.3)


async def test_republish_headers_only_and_after_transform(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await api(nc, "STREAM.CREATE.HO", {
        "name": "HO", "subjects": ["in.*"],
        "subject_transform": {"src": "in.*", "dest": "stored.$1"},
        "republish": {"src": "stored.>", "dest": "seen.>", "headers_only": True},
    })
    sub = await nc.subscribe("seen.>")
    await nc.flush()
    await js.publish("in.x", b"12345")
    msg = await sub.next_msg(timeout=2)
    assert msg.subject == "seen.x" and msg.data == b""
    h = msg.headers or {}
    assert (h["Nats-Subject"], h["Nats-Msg-Size"], h["Nats-Sequence"]) == ("stored.x", "5", "1")


async def test_implicit_republish_follows_the_transform(nc: nats.NATS) -> None:
    resp = await api(nc, "STREAM.CREATE.IMP", {
        "name": "IMP", "subjects": ["imp.>"],
        "subject_transform": {"src": "imp.>", "dest": "done.>"},
        "republish": {"src": ">", "dest": ">"},
    })
    assert resp["config"]["republish"] == {"src": "done.>", "dest": "done.>"}
    sub = await nc.subscribe("done.>")
    await nc.flush()
    await nc.jetstream().publish("imp.1", b"x")
    msg = await sub.next_msg(timeout=2)
    assert msg.subject == "done.1" and msg.data == b"x"


async def test_kv_with_republish_as_nats_py_tests_it(nc: nats.NATS) -> None:
    """nats.py's test_kv_republish."""
    js = nc.jetstream()
    kv = await js.create_key_value(
        bucket="TEST_UPDATE", republish=nats.js.api.RePublish(src=">", dest="bar.>"))
    sinfo = await js.stream_info("KV_TEST_UPDATE")
    assert sinfo.config.republish is not None
    sub = await nc.subscribe("bar.>")
    await kv.put("hello.world", b"Hello World!")
    msg = await sub.next_msg(timeout=2)
    assert msg.subject == "bar.$KV.TEST_UPDATE.hello.world"
    assert msg.data == b"Hello World!"
    assert (msg.headers or {}).get("Nats-Msg-Size") is None
    await sub.unsubscribe()
    kv = await js.create_key_value(
        bucket="TEST_UPDATE_HEADERS",
        republish=nats.js.api.RePublish(src=">", dest="quux.>", headers_only=True))
    sub = await nc.subscribe("quux.>")
    await kv.put("hello.world", b"Hello World!")
    msg = await sub.next_msg(timeout=2)
    assert msg.data == b""
    h = msg.headers or {}
    assert (h["Nats-Sequence"], h["Nats-Msg-Size"], h["Nats-Stream"]) == (
        "1", "12", "KV_TEST_UPDATE_HEADERS")
    assert (await kv.get("hello.world")).value == b"Hello World!"


async def test_update_adds_and_removes_transform_and_republish(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await api(nc, "STREAM.CREATE.UP", {"name": "UP", "subjects": ["up.*"]})
    await js.publish("up.a", b"1")
    resp = await api(nc, "STREAM.UPDATE.UP", {
        "name": "UP", "subjects": ["up.*"],
        "subject_transform": {"src": "up.*", "dest": "t.$1"},
        "republish": {"dest": "rp.>"},
    })
    assert "error" not in resp, resp
    assert resp["config"]["republish"] == {"src": ">", "dest": "rp.>"}
    sub = await nc.subscribe("rp.>")
    await nc.flush()
    await js.publish("up.b", b"2")
    assert (await sub.next_msg(timeout=2)).subject == "rp.t.b"
    resp = await api(nc, "STREAM.UPDATE.UP", {"name": "UP", "subjects": ["up.*"]})
    assert "subject_transform" not in resp["config"] and "republish" not in resp["config"]
    await js.publish("up.c", b"3")
    subjects = [(await js.get_msg("UP", s)).subject for s in (1, 2, 3)]
    assert subjects == ["up.a", "t.b", "up.c"]
    with pytest.raises(nats.errors.TimeoutError):
        await sub.next_msg(timeout=0.3)


CONFIG_ERRORS: list[tuple[dict[str, Any], tuple[int, int, str]]] = [
    (
        {"subject_transform": {"src": "a..b", "dest": "x"}},
        (400, 10155, "stream transform source: invalid subject a..b"),
    ),
    (
        {"subject_transform": {"src": "in.*", "dest": "x.$2"}},
        (400, 10156, "stream transform: invalid mapping destination: "
         "wildcard index out of range in $2: [2]"),
    ),
    (
        {"subject_transform": {"src": "in.*", "dest": "x.{{nope(1)}}"}},
        (400, 10156, "stream transform: invalid mapping destination: "
         "unknown function in {{nope(1)}}"),
    ),
    (
        {"subject_transform": {"src": "in.*", "dest": "x.{{wildcard(1,2)}}"}},
        (400, 10156, "stream transform: invalid mapping destination: "
         "too many arguments passed to the function in {{wildcard(1,2)}}"),
    ),
    (
        {"subject_transform": {"src": "in.*", "dest": "x.*"}},
        (400, 10156, "stream transform: invalid subject"),
    ),
    (
        {"subject_transform": {"src": "in.*", "dest": "x..y"}},
        (400, 10156, "stream transform: invalid mapping destination: invalid transform"),
    ),
    (
        {"republish": {"src": ">", "dest": "in.>"}},
        (500, 10052, "stream configuration for republish destination forms a cycle"),
    ),
    (
        {"republish": {"src": "in.*", "dest": "out.$2"}},
        (500, 10052,
         "stream configuration for republish with transform from 'in.*' to 'out.$2' not valid"),
    ),
    (
        {"republish": {"dest": "out.>"}, "pedantic": True},
        (400, 10157, "pedantic mode: republish source can not be empty"),
    ),
    (
        {"subject_transform": {"src": "in.*", "dest": "t.$1"},
         "republish": {"src": ">", "dest": ">"}, "pedantic": True},
        (400, 10157, "pedantic mode: implicit republish based on subject transform"),
    ),
]


async def test_invalid_configs_get_nats_server_errors(nc: nats.NATS) -> None:
    for extra, expected in CONFIG_ERRORS:
        resp = await api(nc, "STREAM.CREATE.BAD", {"name": "BAD", "subjects": ["in.*"], **extra})
        assert err(resp) == expected, extra
    resp = await api(nc, "STREAM.NAMES")
    assert not resp.get("streams")


async def test_republished_copies_can_feed_another_stream(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await api(nc, "STREAM.CREATE.SRC", {
        "name": "SRC", "subjects": ["src.>"], "republish": {"src": ">", "dest": "copy.>"}})
    await js.add_stream(name="DST", subjects=["copy.>"])
    for i in range(5):
        await js.publish(f"src.{i}", b"%d" % i)

    async def copied() -> bool:
        return (await js.stream_info("DST")).state.messages == 5

    await wait_for(copied)
    msg = await js.get_msg("DST", 5)
    assert msg.subject == "copy.src.4" and msg.data == b"4"
    assert msg.headers is not None and msg.headers["Nats-Sequence"] == "5"
