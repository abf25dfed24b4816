"""Stream ``sources`` and ``mirror`` through nats-py on one server (``JETRAFT_VS_NATS=1``
runs the same tests against the real nats-server)."""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

import nats
import nats.js.api
from nats.js.api import StreamSource, SubjectTransform

from tests.integration.jetstream.js_helpers import api, err, wait_for


async def _msgs(nc: nats.NATS, stream: str) -> list[dict[str, Any]]:
    """Every stored message of ``stream`` (subject, seq, headers as text, data)."""
    info = await api(nc, f"STREAM.INFO.{stream}")
    out: list[dict[str, Any]] = []
    seq = info["state"]["first_seq"]
    last = info["state"]["last_seq"]
    while seq and seq <= last:
        got = await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq, "next_by_subj": ">"})
        if "error" in got:
            break
        m = got["message"]
        out.append({
            "subject": m["subject"], "seq": m["seq"],
            "hdrs": base64.b64decode(m.get("hdrs", "")).decode(),
            "data": base64.b64decode(m.get("data", "")).decode(),
        })
        seq = m["seq"] + 1
    return out


async def _count(nc: nats.NATS, stream: str, n: int, timeout_s: float = 10) -> None:
    async def reached() -> bool:
        info = await api(nc, f"STREAM.INFO.{stream}")
        return bool(info["state"]["messages"] >= n)

    await wait_for(reached, timeout_s=timeout_s)


def _source_header(hdrs: str) -> list[str]:
    for line in hdrs.split("\r\n"):
        if line.startswith("Nats-Stream-Source:"):
            return line.split(":", 1)[1].strip().split(" ")
    raise AssertionError(f"no Nats-Stream-Source in {hdrs!r}")


async def test_sources_copy_all_filtered_and_from_a_sequence(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="O1", subjects=["a.>"])
    await js.add_stream(name="O2", subjects=["b.>"])
    for i in range(4):
        await js.publish(f"a.{i % 2}", f"a{i}".encode(), headers={"Nats-Expected-Stream": "O1"})
        await js.publish(f"b.{i}", f"b{i}".encode())
    await js.add_stream(name="S", sources=[
        StreamSource(name="O1", filter_subject="a.1"),
        StreamSource(name="O2", opt_start_seq=3),
    ])
    await _count(nc, "S", 4)
    await js.publish("a.1", b"later")  # followed after the start
    await _count(nc, "S", 5)
    msgs = await _msgs(nc, "S")
    assert sorted(m["data"] for m in msgs) == ["a1", "a3", "b2", "b3", "later"]
    assert [m["seq"] for m in msgs] == [1, 2, 3, 4, 5]  # the stream's own sequences
    for m in msgs:
        fields = _source_header(m["hdrs"])
        assert "Nats-Expected-Stream" not in m["hdrs"]  # expectations are not copied
        origin, seq, filt, dest, subject = fields[:5]
        assert subject == m["subject"] and dest == ">"
        if origin == "O1":
            assert filt == "a.1" and m["subject"] == "a.1"
        else:
            assert (origin, filt) == ("O2", ">") and int(seq) >= 3
    raw = await api(nc, "STREAM.INFO.S")
    assert sorted((s["name"], s.get("filter_subject") or "", s["lag"]) for s in raw["sources"]) == [
        ("O1", "a.1", 0), ("O2", "", 0)
    ]  # nats-server lists them in no set order
    assert "subjects" not in raw["config"] and "duplicate_window" not in raw["config"]
    assert raw["config"]["sources"] == [
        {"name": "O1", "filter_subject": "a.1"}, {"name": "O2", "opt_start_seq": 3}
    ]


async def test_source_opt_start_time_holds_only_later_messages(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="T", subjects=["t"])
    for i in range(3):
        await js.publish("t", f"old{i}".encode())
    start = dt.datetime.now(dt.UTC)
    await wait_for(_after(start), timeout_s=2)
    for i in range(2):
        await js.publish("t", f"new{i}".encode())
    source = StreamSource(name="T", opt_start_time=start.isoformat())
    await js.add_stream(name="TS", sources=[source])
    await _count(nc, "TS", 2)
    assert [m["data"] for m in await _msgs(nc, "TS")] == ["new0", "new1"]
    info = await js.stream_info("TS")
    assert info.config.sources is not None and info.config.sources[0].opt_start_time is not None


def _after(t: dt.datetime) -> Any:
    async def later() -> bool:
        return dt.datetime.now(dt.UTC) > t + dt.timedelta(milliseconds=20)

    return later


async def test_source_with_subject_transforms(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="X", subjects=["x.>"])
    await js.publish("x.1", b"1")
    await js.publish("x.2.z", b"2")
    await js.add_stream(name="XS", sources=[StreamSource(name="X", subject_transforms=[
        SubjectTransform(src="x.1", dest="one"), SubjectTransform(src="x.2.*", dest="two.$1"),
    ])])
    await _count(nc, "XS", 2)
    msgs = await _msgs(nc, "XS")
    assert [m["subject"] for m in msgs] == ["one", "two.z"]
    fields = _source_header(msgs[0]["hdrs"])
    assert fields[0] == "X" and fields[2] == "x.1\fx.2.*" and fields[4] == "x.1"


async def test_origin_created_after_the_sourcing_stream(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="LATE_S", sources=[StreamSource(name="LATE")])
    await js.add_stream(name="LATE", subjects=["late"])
    await js.publish("late", b"x")
    await _count(nc, "LATE_S", 1)
    assert [m["data"] for m in await _msgs(nc, "LATE_S")] == ["x"]


async def test_recreated_origin_is_read_again(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="RO", subjects=["ro"])
    await js.add_stream(name="RS", sources=[StreamSource(name="RO")])
    for i in range(3):
        await js.publish("ro", f"old{i}".encode())
    await _count(nc, "RS", 3)
    await js.delete_stream("RO")
    await js.add_stream(name="RO", subjects=["ro"])
    for i in range(2):
        await js.publish("ro", f"new{i}".encode())
    await _count(nc, "RS", 5, timeout_s=40)  # nats-server 2.15 takes about 12 s
    msgs = await _msgs(nc, "RS")
    assert [m["data"] for m in msgs] == ["old0", "old1", "old2", "new0", "new1"]
    assert [_source_header(m["hdrs"])[1] for m in msgs] == ["1", "2", "3", "1", "2"]


async def test_mirror_keeps_sequences_with_gaps(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="MO", subjects=["mo.>"])
    for i in range(6):
        await js.publish(f"mo.{i}", f"{i}".encode(), headers={"Nats-Msg-Id": f"m{i}"})
    await js.delete_msg("MO", 2)
    await js.delete_msg("MO", 5)
    await js.add_stream(name="MM", mirror=StreamSource(name="MO"))
    await _count(nc, "MM", 4)
    mine = await _msgs(nc, "MM")
    theirs = await _msgs(nc, "MO")
    assert [(m["seq"], m["subject"], m["hdrs"], m["data"]) for m in mine] == [
        (m["seq"], m["subject"], m["hdrs"], m["data"]) for m in theirs
    ]
    assert [m["seq"] for m in mine] == [1, 3, 4, 6]
    info = await js.stream_info("MM")
    assert info.mirror is not None and info.mirror.name == "MO"
    assert info.state.last_seq == 6


async def test_mirror_and_source_config_errors(nc: nats.NATS) -> None:
    await api(nc, "STREAM.CREATE.EO", {"name": "EO", "subjects": ["eo"]})
    cases: list[tuple[dict[str, Any], tuple[int, int, str]]] = [
        ({"mirror": {"name": "EO"}, "subjects": ["a"]},
         (400, 10034, "stream mirrors can not contain subjects")),
        ({"mirror": {"name": "EO"}, "sources": [{"name": "EO"}]},
         (400, 10031, "stream mirrors can not also contain other sources")),
        ({"sources": [{"name": "EO"}, {"name": "EO"}]},
         (400, 10140, "duplicate source configuration detected")),
        ({"sources": [{"name": "EO", "subject_transforms": [
            {"src": "eo.>", "dest": "a.>"}, {"src": "eo.1", "dest": "b"}]}]},
         (400, 10147, "source filters can not overlap")),
        ({"subjects": ["e"], "mirror_direct": True},
         (500, 10052, "stream has no mirror but does have mirror direct")),
        ({"sources": [{"name": "a.b"}]}, (400, 10141, "sourced stream name is invalid")),
        ({"mirror": {"name": ""}}, (400, 10142, "mirrored stream name is invalid")),
        ({"sources": [{"name": "EO", "filter_subject": "x",
                       "subject_transforms": [{"src": "eo", "dest": "a"}]}]},
         (400, 10144,
          "source with multiple subject transforms cannot also have a single subject filter")),
        ({"mirror": {"name": "EO"}, "first_seq": 5},
         (400, 10143, "stream mirrors can not have first sequence configured")),
        ({"sources": [{"name": "EX"}]}, (500, 10052, "detected cycle")),
        ({"subjects": ["ex"], "sources": [{"name": "EC"}]}, (500, 10052, "detected cycle")),
    ]
    # EC sources EX, which does not exist yet: the cycle shows once EX sources EC.
    await api(nc, "STREAM.CREATE.EC", {"name": "EC", "subjects": ["ec"],
                                       "sources": [{"name": "EX"}]})
    for body, want in cases:
        got = await api(nc, "STREAM.CREATE.EX", {"name": "EX", **body})
        assert err(got) == want, body
    await api(nc, "STREAM.CREATE.EM", {"name": "EM", "mirror": {"name": "EO"}})
    got = await api(nc, "STREAM.UPDATE.EM", {"name": "EM", "mirror": {"name": "EO",
                                                                      "opt_start_seq": 2}})
    assert err(got) == (400, 10055, "stream mirror configuration can not be updated")


async def test_publishers_may_not_set_the_source_header(nc: nats.NATS) -> None:
    """Only a source says where a message came from (the header places a source's resume)."""
    await api(nc, "STREAM.CREATE.H", {"name": "H", "subjects": ["h"],
                                      "sources": [{"name": "NOPE"}]})
    got = await nc.request("h", b"x", headers={"Nats-Stream-Source": "NOPE 5 > > h"}, timeout=2)
    assert err(json.loads(got.data)) == (400, 10227, "message stream source header is not allowed")
