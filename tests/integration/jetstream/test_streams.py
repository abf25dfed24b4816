"""Stream management through nats-py and the raw $JS.API: create (defaults echoed back,
idempotence), update, info, names/list with paging and the subject filter, purge forms,
message get/delete, direct get, account info.

``JETRAFT_VS_NATS=1`` runs these against a real nats-server (see consumer_support.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

import nats
import nats.js.errors
import pytest
from nats.js.api import StreamConfig

from tests.integration.jetstream.js_helpers import VS_NATS, api, err

SEC = 1_000_000_000


def without_metadata(cfg: dict[str, Any]) -> dict[str, Any]:
    # nats-server 2.11+ adds _nats.* metadata keys; jetraft does not.
    return {k: v for k, v in cfg.items() if k != "metadata"}


async def test_create_echoes_normalised_config(nc: nats.NATS) -> None:
    resp = await api(nc, "STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["orders.>"]})
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_create_response"
    assert resp["did_create"] is True
    assert without_metadata(resp["config"]) == {
        "name": "ORDERS",
        "subjects": ["orders.>"],
        "retention": "limits",
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 0,
        "max_msgs_per_subject": -1,
        "max_msg_size": -1,
        "discard": "old",
        "storage": "file",
        "num_replicas": 1,
        "duplicate_window": 120 * SEC,
        "compression": "none",
        "allow_direct": False,
        "mirror_direct": False,
        "sealed": False,
        "deny_delete": False,
        "deny_purge": False,
        "allow_rollup_hdrs": False,
        "consumer_limits": {},
        "allow_msg_ttl": False,
    }
    assert resp["state"] == {
        "messages": 0,
        "bytes": 0,
        "first_seq": 0,
        "first_ts": "0001-01-01T00:00:00Z",
        "last_seq": 0,
        "last_ts": "0001-01-01T00:00:00Z",
        "consumer_count": 0,
    }
    assert resp["created"].endswith("Z")


async def test_defaults_zero_means_default_and_window_capped_by_max_age(nc: nats.NATS) -> None:
    resp = await api(
        nc,
        "STREAM.CREATE.Z",
        {
            "name": "Z",
            "max_msgs": 0,
            "max_bytes": -7,
            "max_msg_size": 0,
            "max_consumers": 0,
            "max_msgs_per_subject": 0,
            "num_replicas": 0,
            "max_age": 5 * SEC,
        },
    )
    cfg = resp["config"]
    assert cfg["subjects"] == ["Z"]  # defaults to the name
    assert (cfg["max_msgs"], cfg["max_bytes"], cfg["max_msg_size"]) == (-1, -1, -1)
    assert (cfg["max_consumers"], cfg["max_msgs_per_subject"], cfg["num_replicas"]) == (-1, -1, 1)
    assert cfg["duplicate_window"] == 5 * SEC


async def test_create_is_idempotent_and_conflicts_are_errors(nc: nats.NATS) -> None:
    js = nc.jetstream()
    first = await js.add_stream(name="S", subjects=["s.>"])
    again = await js.add_stream(name="S", subjects=["s.>"])
    assert again.created == first.created
    with pytest.raises(nats.js.errors.BadRequestError) as exc:
        await js.add_stream(name="S", subjects=["other.>"])
    assert exc.value.err_code == 10058
    with pytest.raises(nats.js.errors.BadRequestError) as exc:
        await js.add_stream(name="T", subjects=["s.a"])
    assert exc.value.err_code == 10065


async def test_nats_py_stream_lifecycle(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="LIFE", subjects=["life.*"], max_msgs=100))
    for i in range(3):
        ack = await js.publish("life.a", f"m{i}".encode())
        assert (ack.stream, ack.seq) == ("LIFE", i + 1)
    info = await js.stream_info("LIFE")
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (3, 1, 3)
    # File store accounting as nats-server: 30 + subject + payload per message.
    assert info.state.bytes == 3 * (30 + len("life.a") + 2)
    updated = await js.update_stream(StreamConfig(name="LIFE", subjects=["life.*"], max_msgs=2))
    assert updated.config.max_msgs == 2
    assert updated.state.messages == 2  # the new limit applies at once
    assert await js.delete_stream("LIFE")
    with pytest.raises(nats.js.errors.NotFoundError):
        await js.stream_info("LIFE")


async def test_update_rules(nc: nats.NATS) -> None:
    await api(nc, "STREAM.CREATE.U", {"name": "U", "subjects": ["u"], "deny_delete": True})
    resp = await api(nc, "STREAM.UPDATE.U", {"name": "U", "subjects": ["u"], "storage": "memory"})
    assert err(resp) == (500, 10052, "stream configuration update can not change storage type")
    resp = await api(nc, "STREAM.UPDATE.U", {"name": "U", "subjects": ["u"]})
    assert err(resp) == (
        500,
        10052,
        "stream configuration update can not cancel deny message deletes",
    )
    resp = await api(nc, "STREAM.UPDATE.NOPE", {"name": "NOPE"})
    assert err(resp) == (404, 10059, "stream not found")
    await api(nc, "STREAM.CREATE.V", {"name": "V", "subjects": ["v"]})
    resp = await api(nc, "STREAM.UPDATE.V", {"name": "V", "subjects": ["v", "u"]})
    assert err(resp) == (400, 10065, "subjects overlap with an existing stream")
    resp = await api(
        nc, "STREAM.UPDATE.V", {"name": "V", "subjects": ["v", "v2"], "description": "d"}
    )
    assert resp["config"]["subjects"] == ["v", "v2"]
    assert resp["config"]["description"] == "d"
    # The new subject is live.
    ack = await nc.request("v2", b"x", timeout=2)
    assert b'"seq":1' in ack.data


async def test_info_with_subjects_filter_and_deleted_details(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="I", subjects=["i.*"])
    for subject in ("i.a", "i.b", "i.a", "i.c"):
        await js.publish(subject, b"x")
    await api(nc, "STREAM.MSG.DELETE.I", {"seq": 2})
    plain = await api(nc, "STREAM.INFO.I")
    assert (plain["total"], plain["offset"], plain["limit"]) == (0, 0, 0)
    assert plain["state"]["num_subjects"] == 2
    assert plain["state"]["num_deleted"] == 1
    assert "subjects" not in plain["state"] and "deleted" not in plain["state"]
    assert plain["cluster"]["leader"]
    filtered = await api(nc, "STREAM.INFO.I", {"subjects_filter": "i.*"})
    assert filtered["state"]["subjects"] == {"i.a": 2, "i.c": 1}
    assert (filtered["total"], filtered["limit"]) == (2, 100000)
    detailed = await api(nc, "STREAM.INFO.I", {"deleted_details": True})
    assert detailed["state"]["deleted"] == [2]
    info = await js.stream_info("I", subjects_filter="i.a")
    assert info.state.subjects == {"i.a": 2}


async def test_names_and_list_paging_and_subject_filter(nc: nats.NATS) -> None:
    names = [f"N{i:03d}" for i in range(5)]
    for i, name in enumerate(names):
        await api(nc, f"STREAM.CREATE.{name}", {"name": name, "subjects": [f"n.{i}.>"]})
    resp = await api(nc, "STREAM.NAMES")
    assert resp["streams"] == names
    assert (resp["total"], resp["offset"], resp["limit"]) == (5, 0, 1024)
    resp = await api(nc, "STREAM.NAMES", {"offset": 3})
    assert resp["streams"] == names[3:]
    assert resp["offset"] == 3
    resp = await api(nc, "STREAM.NAMES", {"subject": "n.2.x"})
    assert resp["streams"] == ["N002"]
    resp = await api(nc, "STREAM.NAMES", {"subject": "nothing"})
    assert resp["total"] == 0 and resp["streams"] is None
    listed = await api(nc, "STREAM.LIST", {"offset": 1})
    assert [s["config"]["name"] for s in listed["streams"]] == names[1:]
    assert (listed["total"], listed["offset"], listed["limit"]) == (5, 1, 256)
    # nats-py finds the stream of a subject through NAMES {subject}.
    js = nc.jetstream()
    assert await js.find_stream_name_by_subject("n.4.z") == "N004"
    streams = await js.streams_info()
    assert len(streams) == 5


async def test_purge_forms(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="P", subjects=["p.*"])
    for subject in ("p.a", "p.b", "p.a", "p.b", "p.a", "p.b"):
        await js.publish(subject, b"x")
    resp = await api(nc, "STREAM.PURGE.P", {"filter": "p.a", "keep": 1})
    assert resp == {
        "type": "io.nats.jetstream.api.v1.stream_purge_response",
        "success": True,
        "purged": 2,
    }
    resp = await api(nc, "STREAM.PURGE.P", {"seq": 5})
    assert resp["purged"] == 2  # seqs 2 and 4 (p.b); 5 and 6 remain
    resp = await api(nc, "STREAM.PURGE.P", {"seq": 3, "keep": 1})
    assert err(resp) == (400, 10003, "bad request")
    assert resp["purged"] == 0
    assert await js.purge_stream("P")
    info = await js.stream_info("P")
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (0, 7, 6)
    ack = await js.publish("p.a", b"x")
    assert ack.seq == 7


async def test_purge_forms_through_nats_py(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="PP", subjects=["pp.*"])

    async def subjects() -> dict[str, int]:
        return dict((await js.stream_info("PP", subjects_filter=">")).state.subjects or {})

    for subject in ("pp.a", "pp.b") * 5:  # a: 1,3,5,7,9  b: 2,4,6,8,10
        await js.publish(subject, b"x")
    # filter alone: every pp.a goes.
    assert await js.purge_stream("PP", subject="pp.a")
    assert await subjects() == {"pp.b": 5}
    # filter + seq: the filter's messages below seq go (6, 8, 10 stay).
    assert await js.purge_stream("PP", subject="pp.b", seq=6)
    assert await subjects() == {"pp.b": 3}
    assert (await js.stream_info("PP")).state.first_seq == 6
    for subject in ("pp.a", "pp.a", "pp.c"):  # 11, 12, 13
        await js.publish(subject, b"y")
    # keep alone: the newest n of the whole stream stay.
    assert await js.purge_stream("PP", keep=4)
    state = (await js.stream_info("PP")).state
    assert (state.messages, state.first_seq, state.last_seq) == (4, 10, 13)
    # seq alone: everything below seq goes.
    assert await js.purge_stream("PP", seq=12)
    state = (await js.stream_info("PP")).state
    assert (state.messages, state.first_seq) == (2, 12)
    assert await subjects() == {"pp.a": 1, "pp.c": 1}
    # filter + keep with a wildcard filter.
    for subject in ("pp.a", "pp.c", "pp.a"):  # 14, 15, 16
        await js.publish(subject, b"z")
    resp = await api(nc, "STREAM.PURGE.PP", {"filter": "pp.*", "keep": 2})
    assert (resp["success"], resp["purged"]) == (True, 3)
    assert await subjects() == {"pp.c": 1, "pp.a": 1}
    assert (await js.stream_info("PP")).state.first_seq == 15


async def test_msg_get_forms(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="G", subjects=["g.*"])
    await js.publish("g.a", b"one", headers={"X-Key": "v"})
    await js.publish("g.b", b"two")
    await js.publish("g.a", b"three")
    resp = await api(nc, "STREAM.MSG.GET.G", {"seq": 1})
    msg = resp["message"]
    assert (msg["subject"], msg["seq"], base64.b64decode(msg["data"])) == ("g.a", 1, b"one")
    assert b"X-Key: v" in base64.b64decode(msg["hdrs"])
    assert msg["time"].endswith("Z")
    resp = await api(nc, "STREAM.MSG.GET.G", {"last_by_subj": "g.a"})
    assert resp["message"]["seq"] == 3
    resp = await api(nc, "STREAM.MSG.GET.G", {"next_by_subj": "g.b", "seq": 1})
    assert resp["message"]["seq"] == 2
    for bad in ({}, {"seq": 1, "last_by_subj": "g.a"}, {"seq": 1, "batch": 2}):
        assert err(await api(nc, "STREAM.MSG.GET.G", bad))[1] == 10003
    assert err(await api(nc, "STREAM.MSG.GET.G", {"seq": 99})) == (404, 10037, "no message found")
    assert err(await api(nc, "STREAM.MSG.GET.NOPE", {"seq": 1}))[1] == 10059
    got = await js.get_msg("G", 2)
    assert (got.subject, got.data) == ("g.b", b"two")
    last = await js.get_last_msg("G", "g.a")
    assert last.data == b"three"


async def test_msg_delete(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="D", subjects=["d"])
    for _ in range(3):
        await js.publish("d", b"x")
    resp = await api(nc, "STREAM.MSG.DELETE.D", {"seq": 2})
    assert resp == {"type": "io.nats.jetstream.api.v1.stream_msg_delete_response", "success": True}
    assert err(await api(nc, "STREAM.MSG.DELETE.D", {"seq": 2})) == (
        400,
        10043,
        "sequence 2 not found",
    )
    assert await js.delete_msg("D", 1)
    assert err(await api(nc, "STREAM.MSG.DELETE.D", {"seq": 1})) == (500, 10057, "no message found")
    assert err(await api(nc, "STREAM.MSG.DELETE.D", {"seq": 9})) == (500, 10057, "stream store EOF")
    assert err(await api(nc, "STREAM.MSG.DELETE.D")) == (400, 10003, "bad request")
    assert await js.delete_msg("D", 3)
    info = await js.stream_info("D")
    assert (info.state.messages, info.state.last_seq) == (0, 3)


async def test_direct_get(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="DG", subjects=["dg.>"], allow_direct=True)
    await js.publish("dg.a", b"one", headers={"X-H": "1"})
    await js.publish("dg.b.c", b"two")
    await js.publish("dg.a", b"three")
    msg = await nc.request("$JS.API.DIRECT.GET.DG", b'{"seq": 1}', timeout=2)
    assert msg.data == b"one"
    assert msg.headers is not None
    assert msg.headers["Nats-Stream"] == "DG"
    assert msg.headers["Nats-Subject"] == "dg.a"
    assert msg.headers["Nats-Sequence"] == "1"
    assert msg.headers["Nats-Time-Stamp"].endswith("Z")
    assert msg.headers["X-H"] == "1"
    msg = await nc.request("$JS.API.DIRECT.GET.DG.dg.b.c", b"", timeout=2)
    assert (msg.data, msg.headers["Nats-Sequence"]) == (b"two", "2")
    msg = await nc.request("$JS.API.DIRECT.GET.DG", b'{"last_by_subj": "dg.a"}', timeout=2)
    assert msg.data == b"three"
    for body, status in (
        (b'{"seq": 99}', ("404", "Message Not Found")),
        (b"", ("408", "Empty Request")),
        (b"{}", ("408", "Empty Request")),
        (b"{bad", ("408", "Malformed Request")),
        (b'{"seq": 1, "last_by_subj": "dg.a"}', ("408", "Bad Request")),
    ):
        msg = await nc.request("$JS.API.DIRECT.GET.DG", body, timeout=2)
        assert msg.headers is not None
        assert (msg.headers["Status"], msg.headers["Description"]) == status
    # nats-py's get_msg(direct=True) uses the same path.
    got = await js.get_msg("DG", 2, direct=True)
    assert got.data == b"two"
    with pytest.raises(nats.js.errors.NotFoundError):
        await js.get_msg("DG", 50, direct=True)


async def test_direct_get_batch(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="DB", subjects=["db.*"], allow_direct=True)
    for i in range(5):
        await js.publish(f"db.{i % 2}", str(i).encode())
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$JS.API.DIRECT.GET.DB", b'{"seq": 2, "batch": 3}', reply=inbox)
    got = [await sub.next_msg(timeout=2) for _ in range(4)]
    assert [m.data for m in got[:3]] == [b"1", b"2", b"3"]
    assert [m.headers["Nats-Num-Pending"] for m in got[:3]] == ["3", "2", "1"]
    eob = got[3]
    assert (eob.headers["Status"], eob.headers["Description"]) == ("204", "EOB")
    assert eob.headers["Nats-Last-Sequence"] == "4"
    await sub.unsubscribe()


async def test_direct_get_without_allow_direct_has_no_responder(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="ND", subjects=["nd"])
    await js.publish("nd", b"x")
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("$JS.API.DIRECT.GET.ND", b'{"seq": 1}', timeout=2)
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("$JS.API.DIRECT.GET.MISSING", b'{"seq": 1}', timeout=2)


async def test_account_info(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="A1", subjects=["a1"])
    await js.add_stream(name="A2", subjects=["a2"], storage="memory")
    await js.publish("a1", b"12345")
    await js.publish("a2", b"12345")
    info = await js.account_info()
    assert info.streams == 2
    assert info.storage == 30 + 2 + 5
    assert info.memory == 16 + 2 + 5
    assert info.limits.max_streams == -1
    assert info.api.total > 0
    raw = await api(nc, "INFO")
    assert raw["type"] == "io.nats.jetstream.api.v1.account_info_response"
    assert raw["api"]["level"] >= 1
    assert set(raw["limits"]) >= {
        "max_memory",
        "max_storage",
        "max_streams",
        "max_consumers",
        "max_ack_pending",
        "memory_max_stream_bytes",
        "storage_max_stream_bytes",
        "max_bytes_required",
    }


async def test_clustering_only_requests(nc: nats.NATS) -> None:
    await api(nc, "STREAM.CREATE.C", {"name": "C"})
    resp = await api(nc, "STREAM.LEADER.STEPDOWN.C")
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_leader_stepdown_response"
    assert err(resp) == (503, 10010, "JetStream clustering support required")
    resp = await api(nc, "STREAM.PEER.REMOVE.C", {"peer": "x"})
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_remove_peer_response"
    assert err(resp) == (503, 10010, "JetStream clustering support required")


async def test_required_api_level(nc: nats.NATS) -> None:
    msg = await nc.request(
        "$JS.API.INFO", b"", timeout=2, headers={"Nats-Required-Api-Level": "99"}
    )
    resp = json.loads(msg.data)
    assert err(resp) == (412, 10185, "JetStream minimum api level required")
    msg = await nc.request("$JS.API.INFO", b"", timeout=2, headers={"Nats-Required-Api-Level": "1"})
    assert "error" not in json.loads(msg.data)


@pytest.mark.skipif(VS_NATS, reason="jetraft refuses features it does not implement")
async def test_unsupported_features_are_refused_clearly(nc: nats.NATS) -> None:
    resp = await api(nc, "STREAM.CREATE.M", {"name": "M", "mirror": {
        "name": "X", "external": {"api": "$JS.hub.API"}}})
    assert err(resp)[:2] == (500, 10052)
    assert "not supported" in err(resp)[2]
    resp = await api(nc, "STREAM.CREATE.M", {"name": "M", "allow_msg_counter": True})
    assert err(resp)[:2] == (500, 10052)


async def test_direct_get_multi_last(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="ML", subjects=["ml.*"], allow_direct=True)
    for subject in ("ml.a", "ml.b", "ml.a", "ml.c", "ml.b"):
        await js.publish(subject, subject.encode())
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)

    async def ask(body: dict[str, Any]) -> list[tuple[str, str, str]]:
        await nc.publish("$JS.API.DIRECT.GET.ML", json.dumps(body).encode(), reply=inbox)
        got = []
        while True:
            msg = await sub.next_msg(timeout=2)
            h = msg.headers or {}
            if "Status" in h:
                got.append(
                    (h["Status"], h.get("Nats-Num-Pending", ""), h.get("Nats-UpTo-Sequence", ""))
                )
                return got
            got.append((h["Nats-Subject"], h["Nats-Sequence"], h["Nats-Num-Pending"]))

    assert await ask({"multi_last": ["ml.a", "ml.b"]}) == [
        ("ml.a", "3", "1"),
        ("ml.b", "5", "0"),
        ("204", "0", "5"),
    ]
    # As of sequence 3: ml.b's last was 2 then.
    assert await ask({"multi_last": ["ml.*"], "up_to_seq": 3}) == [
        ("ml.b", "2", "1"),
        ("ml.a", "3", "0"),
        ("204", "0", "3"),
    ]
    # A batch cuts the answer short; pending counts what is left of it.
    assert await ask({"multi_last": ["ml.*"], "batch": 2}) == [
        ("ml.a", "3", "2"),
        ("ml.c", "4", "1"),
        ("204", "1", "5"),
    ]
    assert await ask({"multi_last": ["nothing.*"]}) == [("404", "", "")]
    await sub.unsubscribe()
