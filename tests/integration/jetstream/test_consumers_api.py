"""The CONSUMER.* API: create forms, errors with nats-server's codes, info, names/list paging,
delete, pause, stepdown, and fuzzed configs (errors only, the server stays up)."""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any

import nats
import nats.js.errors
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.js.api import AckPolicy, ConsumerConfig

from jetraft.jetstream.errors import CATALOGUE

SEC = 1_000_000_000


async def api(nc: nats.NATS, subject: str, body: Any = None) -> dict[str, Any]:
    data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    msg = await nc.request("$JS.API." + subject, data, timeout=2)
    out: dict[str, Any] = json.loads(msg.data)
    return out


def err(resp: dict[str, Any]) -> tuple[int, int]:
    return resp["error"]["code"], resp["error"]["err_code"]


async def setup_stream(nc: nats.NATS) -> None:
    resp = await api(nc, "STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
    assert "error" not in resp


async def test_create_forms_and_response_shape(nc: nats.NATS) -> None:
    await setup_stream(nc)
    eph = await api(nc, "CONSUMER.CREATE.S", {"stream_name": "S", "config": {}})
    assert eph["type"] == "io.nats.jetstream.api.v1.consumer_create_response"
    assert len(eph["name"]) == 8 and "name" not in eph["config"]
    assert eph["config"]["inactive_threshold"] == 5 * SEC
    assert eph["config"]["ack_policy"] == "none"

    dur = await api(
        nc,
        "CONSUMER.CREATE.S.D",
        {"stream_name": "S", "config": {"durable_name": "D", "ack_policy": "explicit"}},
    )
    cfg = dur["config"]
    assert (cfg["durable_name"], cfg["name"], cfg["ack_wait"], cfg["max_ack_pending"]) == (
        "D",
        "D",
        30 * SEC,
        1000,
    )
    assert cfg["max_waiting"] == 512 and cfg["num_replicas"] == 0
    assert "inactive_threshold" not in cfg
    for key in (
        "stream_name",
        "name",
        "created",
        "config",
        "delivered",
        "ack_floor",
        "num_ack_pending",
        "num_redelivered",
        "num_waiting",
        "num_pending",
        "ts",
    ):
        assert key in dur
    assert dur["created"].endswith("Z")

    legacy = await api(
        nc, "CONSUMER.DURABLE.CREATE.S.L", {"stream_name": "S", "config": {"durable_name": "L"}}
    )
    assert legacy["name"] == "L"
    filt = await api(
        nc,
        "CONSUMER.CREATE.S.F.s.a",
        {"stream_name": "S", "config": {"name": "F", "filter_subject": "s.a"}},
    )
    assert filt["config"]["filter_subject"] == "s.a"

    # Same config again is fine (idempotent); action create with a different one is not.
    again = await api(
        nc,
        "CONSUMER.CREATE.S.D",
        {
            "stream_name": "S",
            "config": {"durable_name": "D", "ack_policy": "explicit"},
            "action": "create",
        },
    )
    assert again["name"] == "D" and "error" not in again


@pytest.mark.parametrize(
    ("subject", "body", "expected"),
    [
        (
            "CONSUMER.CREATE.S.G",
            {
                "stream_name": "S",
                "config": {"name": "G", "filter_subject": "s.a", "filter_subjects": ["s.b"]},
            },
            (400, 10136),
        ),
        (
            "CONSUMER.CREATE.S.H.s.a",
            {"stream_name": "S", "config": {"name": "H", "filter_subjects": ["s.b"]}},
            (400, 10137),
        ),
        (
            "CONSUMER.CREATE.S.H.s.a",
            {"stream_name": "S", "config": {"name": "H", "filter_subject": "s.b"}},
            (400, 10131),
        ),
        (
            "CONSUMER.CREATE.S.I",
            {"stream_name": "S", "config": {"name": "I", "bogus": 1}},
            (400, 10025),
        ),
        (
            "CONSUMER.CREATE.S.I",
            {"stream_name": "S", "config": {"ack_policy": "bogus"}},
            (400, 10025),
        ),
        ("CONSUMER.CREATE.S.I", b"not json", (400, 10025)),
        (
            "CONSUMER.CREATE.S.I",
            {"stream_name": "S", "config": {"name": "I", "deliver_policy": "by_start_sequence"}},
            (400, 10094),
        ),
        (
            "CONSUMER.CREATE.S.I",
            {
                "stream_name": "S",
                "config": {"name": "I", "flow_control": True, "deliver_subject": "q"},
            },
            (400, 10108),
        ),
        (
            "CONSUMER.CREATE.S.I",
            {"stream_name": "S", "config": {"name": "I", "max_waiting": 5, "deliver_subject": "q"}},
            (400, 10080),
        ),
        (
            "CONSUMER.CREATE.S.I",
            {
                "stream_name": "S",
                "config": {"name": "I", "backoff": [SEC, 2 * SEC], "max_deliver": 1},
            },
            (400, 10116),
        ),
        (
            "CONSUMER.CREATE.S.Z",
            {"stream_name": "S", "config": {"durable_name": "Z"}, "action": "update"},
            (400, 10149),
        ),
        ("CONSUMER.CREATE.S", {"stream_name": "S", "config": {"durable_name": "X"}}, (400, 10020)),
        ("CONSUMER.DURABLE.CREATE.S.X", {"stream_name": "S", "config": {}}, (400, 10018)),
        (
            "CONSUMER.DURABLE.CREATE.S.X",
            {"stream_name": "S", "config": {"durable_name": "Y"}},
            (400, 10017),
        ),
        (
            "CONSUMER.CREATE.S.X",
            {"stream_name": "T", "config": {"durable_name": "X"}},
            (400, 10056),
        ),
        (
            "CONSUMER.CREATE.T.X",
            {"stream_name": "T", "config": {"durable_name": "X"}},
            (404, 10059),
        ),
        (
            "CONSUMER.CREATE.S.X",
            {"stream_name": "S", "config": {"name": "X", "num_replicas": 3}},
            (500, 10074),
        ),
        ("CONSUMER.INFO.S.nope", None, (404, 10014)),
        ("CONSUMER.DELETE.S.nope", None, (404, 10014)),
        ("CONSUMER.INFO.T.nope", None, (404, 10059)),
        ("CONSUMER.NAMES.T", None, (404, 10059)),
    ],
)
async def test_errors(nc: nats.NATS, subject: str, body: Any, expected: tuple[int, int]) -> None:
    await setup_stream(nc)
    assert err(await api(nc, subject, body)) == expected


async def test_update_rules(nc: nats.NATS) -> None:
    await setup_stream(nc)
    base = {"durable_name": "D", "ack_policy": "explicit"}
    await api(nc, "CONSUMER.CREATE.S.D", {"stream_name": "S", "config": base})
    resp = await api(
        nc, "CONSUMER.CREATE.S.D", {"stream_name": "S", "config": {**base, "deliver_policy": "new"}}
    )
    assert resp["error"] == {
        "code": 500,
        "err_code": 10012,
        "description": "deliver policy can not be updated",
    }
    resp = await api(
        nc,
        "CONSUMER.CREATE.S.D",
        {"stream_name": "S", "config": {**base, "max_deliver": 3}, "action": "create"},
    )
    assert err(resp) == (400, 10148)
    resp = await api(
        nc,
        "CONSUMER.CREATE.S.D",
        {
            "stream_name": "S",
            "config": {**base, "max_deliver": 3, "description": "now"},
            "action": "update",
        },
    )
    assert resp["config"]["max_deliver"] == 3 and resp["config"]["description"] == "now"


async def test_names_list_paging_and_delete(nc: nats.NATS) -> None:
    await setup_stream(nc)
    for i in range(5):
        await api(
            nc, f"CONSUMER.CREATE.S.C{i}", {"stream_name": "S", "config": {"durable_name": f"C{i}"}}
        )
    names = await api(nc, "CONSUMER.NAMES.S")
    assert names["type"] == "io.nats.jetstream.api.v1.consumer_names_response"
    assert (names["total"], names["offset"], names["limit"]) == (5, 0, 1024)
    assert names["consumers"] == [f"C{i}" for i in range(5)]
    page = await api(nc, "CONSUMER.LIST.S", {"offset": 3})
    assert (page["total"], page["offset"], page["limit"]) == (5, 3, 256)
    assert [c["name"] for c in page["consumers"]] == ["C3", "C4"]
    resp = await api(nc, "CONSUMER.DELETE.S.C1")
    assert resp == {"type": "io.nats.jetstream.api.v1.consumer_delete_response", "success": True}
    assert (await api(nc, "CONSUMER.NAMES.S"))["total"] == 4


async def test_pause_and_stepdown(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await setup_stream(nc)
    await js.publish("s.a", b"x")
    await api(
        nc,
        "CONSUMER.CREATE.S.P",
        {"stream_name": "S", "config": {"durable_name": "P", "ack_policy": "explicit"}},
    )
    resp = await api(nc, "CONSUMER.PAUSE.S.P", {"pause_until": "2099-01-01T00:00:00Z"})
    assert resp["paused"] is True and resp["pause_until"] == "2099-01-01T00:00:00Z"
    assert resp["pause_remaining"] > 0
    info = await api(nc, "CONSUMER.INFO.S.P")
    assert info["paused"] is True and info["config"]["pause_until"] == "2099-01-01T00:00:00Z"
    sub = await js.pull_subscribe_bind("P", stream="S")
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=0.5)
    resp = await api(nc, "CONSUMER.PAUSE.S.P", {})
    assert resp["paused"] is False
    (m,) = await sub.fetch(1, timeout=2)
    assert m.data == b"x"
    resp = await api(nc, "CONSUMER.LEADER.STEPDOWN.S.P")
    assert resp["error"] == {
        "code": 503,
        "err_code": 10010,
        "description": "JetStream clustering support required",
    }


async def test_consumers_info_via_nats_py(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    await js.add_consumer(
        "S",
        ConsumerConfig(
            durable_name="A", ack_policy=AckPolicy.ALL, description="d", metadata={"k": "v"}
        ),
    )
    infos = await js.consumers_info("S")
    assert [i.name for i in infos] == ["A"]
    assert infos[0].config.ack_policy == AckPolicy.ALL
    assert infos[0].config.metadata is not None and infos[0].config.metadata["k"] == "v"
    assert await js.delete_consumer("S", "A")
    with pytest.raises(nats.js.errors.NotFoundError):
        await js.consumer_info("S", "A")


_durations = st.one_of(st.none(), st.integers(min_value=-2, max_value=10 * SEC))
_fuzz_config = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.text(max_size=6), st.sampled_from(["ok", "a.b", "x*"])),
        "durable_name": st.one_of(st.text(max_size=6), st.just("dur")),
        "deliver_policy": st.sampled_from(
            ["all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject", "?"]
        ),
        "opt_start_seq": st.integers(min_value=-1, max_value=5),
        "opt_start_time": st.sampled_from(["2020-01-01T00:00:00Z", "nope", None]),
        "ack_policy": st.sampled_from(["none", "all", "explicit", "bad"]),
        "ack_wait": _durations,
        "max_deliver": st.integers(min_value=-3, max_value=4),
        "backoff": st.lists(st.integers(min_value=-1, max_value=SEC), max_size=3),
        "filter_subject": st.sampled_from(["", "s.a", "s.*", "s.>", "x.y", ">", "bad..s"]),
        "filter_subjects": st.lists(st.sampled_from(["s.a", "s.b", "s.>", ""]), max_size=3),
        "replay_policy": st.sampled_from(["instant", "original", "fast"]),
        "max_waiting": st.integers(min_value=-1, max_value=3),
        "max_ack_pending": st.integers(min_value=-2, max_value=3),
        "flow_control": st.booleans(),
        "idle_heartbeat": _durations,
        "deliver_subject": st.sampled_from(["", "d.x", "d.*", "s.z"]),
        "deliver_group": st.sampled_from(["", "g"]),
        "headers_only": st.booleans(),
        "max_batch": st.integers(min_value=-1, max_value=3),
        "max_expires": _durations,
        "inactive_threshold": _durations,
        "num_replicas": st.integers(min_value=-1, max_value=3),
        "metadata": st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
        "unknown_key": st.integers(),
    },
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    config=_fuzz_config,
    action=st.sampled_from(["", "create", "update", "weird"]),
    form=st.sampled_from(["legacy", "named", "filtered", "durable"]),
)
async def test_fuzzed_configs_get_answers_not_crashes(
    nc: nats.NATS,
    caplog: pytest.LogCaptureFixture,
    config: dict[str, Any],
    action: str,
    form: str,
) -> None:
    await api(nc, "STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
    # Every create subject form; names that cannot be a token are sent as "bad".
    name = str(config.get("name") or config.get("durable_name") or "fz")
    token = name if name.isalnum() and name.isascii() else "bad"
    subject = {
        "legacy": "CONSUMER.CREATE.S",
        "named": f"CONSUMER.CREATE.S.{token}",
        "filtered": f"CONSUMER.CREATE.S.{token}.s.a",
        "durable": f"CONSUMER.DURABLE.CREATE.S.{token}",
    }[form]
    resp = await api(nc, subject, {"stream_name": "S", "config": config, "action": action})
    assert resp["type"] == "io.nats.jetstream.api.v1.consumer_create_response"
    if "error" in resp:
        e = resp["error"]
        assert isinstance(e["err_code"], int) and e["code"] in (400, 404, 500, 503)
        assert e["err_code"] in CATALOGUE and CATALOGUE[e["err_code"]][0] == e["code"], e
        assert e["description"] and "internal error" not in e["description"]
    else:
        info = await api(nc, f"CONSUMER.INFO.S.{resp['name']}")
        if "error" in info:
            # Only an ephemeral with a tiny inactive_threshold may be gone already.
            assert info["error"]["err_code"] == 10014
            assert 0 < resp["config"].get("inactive_threshold", 0) < SEC, resp["config"]
        else:
            assert info["name"] == resp["name"] and info["config"] == resp["config"]
            await api(nc, f"CONSUMER.DELETE.S.{resp['name']}")
    # The server still answers, and nothing failed inside it.
    assert "consumers" in await api(nc, "CONSUMER.NAMES.S")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


_json_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=5),
)
_pull_bodies = st.one_of(
    st.binary(max_size=40),
    st.integers(min_value=-5, max_value=10**20).map(lambda i: str(i).encode()),
    st.fixed_dictionaries(
        {},
        optional={
            k: _json_values for k in ("batch", "expires", "no_wait", "max_bytes", "idle_heartbeat")
        },
    ).map(lambda d: json.dumps(d).encode()),
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=_pull_bodies, ack=st.binary(max_size=20))
async def test_fuzzed_pull_requests_and_acks(
    nc: nats.NATS, caplog: pytest.LogCaptureFixture, body: bytes, ack: bytes
) -> None:
    await api(nc, "STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
    await api(
        nc,
        "CONSUMER.CREATE.S.F",
        {"stream_name": "S", "config": {"durable_name": "F", "ack_policy": "explicit"}},
    )
    await nc.publish("s.a", b"x")
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.F", body, reply=inbox)
    with contextlib.suppress(nats.errors.TimeoutError):
        msg = await sub.next_msg(timeout=0.05)
        if msg.reply:
            await nc.publish(msg.reply, ack)
    await sub.unsubscribe()
    info = await api(nc, "CONSUMER.INFO.S.F")
    assert info["name"] == "F"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
