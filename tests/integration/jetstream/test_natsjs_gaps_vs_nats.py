"""Gaps found by running nats.js's own test suite against jetraft, checked side by side with
a real nats-server: the same scenario on both, the same answers expected."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest

from tests.integration.jetstream.consumer_support import nats_server_binary, on_both_servers

pytestmark = pytest.mark.skipif(
    not Path(nats_server_binary()).exists(), reason="nats-server binary not installed"
)


async def _publish(nc: nats.NATS, subject: str, headers: dict[str, str]) -> Any:
    """The PubAck's sequence, or the error code of a refused publish."""
    msg = await nc.request(subject, b"x", timeout=2, headers=headers)
    ack = json.loads(msg.data)
    return ack["error"]["err_code"] if "error" in ack else ack["seq"]


async def _last_subject_seq_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        config = {"name": "W", "subjects": ["w.>"]}
        await nc.request("$JS.API.STREAM.CREATE.W", json.dumps(config).encode(), timeout=2)
        for subject in ("w.1.a", "w.1.b", "w.2.a"):  # seqs 1, 2, 3
            await nc.request(subject, b"x", timeout=2)
        out = []
        # (subject, expected last seq, the subject or filter the check is made on)
        for subject, seq, on in [
            ("w.1.c", 1, "w.1.*"),  # the last of w.1.* is 2: refused
            ("w.1.c", 3, "w.1.*"),  # 3 is w.2.a's: refused
            ("w.1.c", 2, "w.1.*"),  # right: stored as 4
            ("w.1.a", 4, "w.1.*"),  # w.1.c moved the filter's last to 4: stored as 5
            ("w.3.a", 0, "w.3.*"),  # nothing matches yet: 0 is right
            ("w.2.b", 6, "w.>"),  # a full wildcard: the stream's last
            ("w.1.a", 5, "w.1.a"),  # a literal subject still works
        ]:
            hdrs = {"Nats-Expected-Last-Subject-Sequence": str(seq),
                    "Nats-Expected-Last-Subject-Sequence-Subject": on}
            out.append(await _publish(nc, subject, hdrs))
        return out
    finally:
        await nc.close()


async def test_expected_last_subject_sequence_on_a_wildcard_filter(tmp_path: Path) -> None:
    """Nats-Expected-Last-Subject-Sequence-Subject may be a filter with wildcards: the check is
    against the last message matching it (nats.js publishes with such filters)."""
    theirs, ours = await on_both_servers(tmp_path, _last_subject_seq_scenario)
    assert ours == theirs
    assert theirs == [10071, 10071, 4, 5, 6, 7, 8]


async def _terminated_scenario(url: str) -> list[dict[str, Any]]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        config = {"name": "T", "subjects": ["t.*"]}
        await nc.request("$JS.API.STREAM.CREATE.T", json.dumps(config).encode(), timeout=2)
        consumer = {"stream_name": "T", "config": {"name": "c", "ack_policy": "explicit"}}
        await nc.request("$JS.API.CONSUMER.CREATE.T.c", json.dumps(consumer).encode(), timeout=2)
        advisories = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>")
        await nc.flush()
        for subject in ("t.a", "t.b"):
            await nc.request(subject, b"x", timeout=2)
        js = nc.jetstream()
        sub = await js.pull_subscribe_bind("c", "T")
        first, second = await sub.fetch(2, timeout=2)
        await nc.publish(first.reply, b"+TERM  no good ")
        await nc.publish(second.reply, b"+TERM")
        out = []
        for _ in range(2):
            adv = await advisories.next_msg(timeout=5)
            body = json.loads(adv.data)
            assert body.pop("id") and body.pop("timestamp")  # fresh per advisory
            out.append({"subject": adv.subject, **body})
        return out
    finally:
        await nc.close()


async def test_term_sends_a_terminated_advisory(tmp_path: Path) -> None:
    """+TERM (with or without a reason) publishes a MSG_TERMINATED advisory naming the
    message; nats.js's advisories() iterator and monitoring tools listen for it."""
    theirs, ours = await on_both_servers(tmp_path, _terminated_scenario)
    assert ours == theirs
    assert [(a["stream_seq"], a.get("reason")) for a in theirs] == [(1, "no good"), (2, None)]


async def _pinned_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await nc.request("$JS.API.STREAM.CREATE.P", b'{"name": "P", "subjects": ["p"]}', timeout=2)
        for _ in range(4):
            await nc.request("p", b"x", timeout=2)
        consumer = {"stream_name": "P", "config": {
            "durable_name": "c", "ack_policy": "explicit", "priority_groups": ["g"],
            "priority_policy": "pinned_client", "priority_timeout": 1_000_000_000}}
        await nc.request("$JS.API.CONSUMER.CREATE.P.c", json.dumps(consumer).encode(), timeout=2)
        next_subject = "$JS.API.CONSUMER.MSG.NEXT.P.c"
        out: list[Any] = []

        def seen(msg: Any) -> tuple[Any, ...]:
            hdrs = msg.headers or {}
            if not msg.data and "Status" in hdrs:
                return ("status", hdrs["Status"], hdrs.get("Description"))
            return ("msg", msg.reply.split(".")[5], bool(hdrs.get("Nats-Pin-Id")))

        async def pull(body: dict[str, Any]) -> Any:
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish(next_subject, json.dumps(body).encode(), reply=inbox)
            return sub

        for body in ({"batch": 1}, {"batch": 1, "group": "nope"}):
            out.append(seen(await (await pull(body)).next_msg(timeout=2)))
        a = await pull({"batch": 1, "group": "g", "expires": 5_000_000_000})
        first = await a.next_msg(timeout=2)
        pin_a = first.headers["Nats-Pin-Id"]
        out.append(seen(first))
        # B asks without a pin id while A holds the pin: it waits.
        b = await pull({"batch": 1, "group": "g", "expires": 5_000_000_000})
        bad = await pull({"batch": 1, "group": "g", "id": "not-the-pin", "expires": 1_000_000_000})
        out.append(seen(await bad.next_msg(timeout=2)))
        again = await pull({"batch": 1, "group": "g", "id": pin_a, "expires": 5_000_000_000})
        out.append(seen(await again.next_msg(timeout=2)))
        # A goes quiet: after priority_timeout the pin passes to B, with a new id.
        taken = await b.next_msg(timeout=4)
        out.append(seen(taken))
        out.append(taken.headers["Nats-Pin-Id"] != pin_a)
        late = await pull({"batch": 1, "group": "g", "id": pin_a, "expires": 1_000_000_000})
        out.append(seen(await late.next_msg(timeout=2)))
        return out
    finally:
        await nc.close()


async def test_pinned_client_priority_policy(tmp_path: Path) -> None:
    """priority_policy pinned_client: one requester gets the messages (told its Nats-Pin-Id),
    others wait; a wrong pin id is refused with 423; a pinned client that stops pulling
    for priority_timeout loses the pin to the next requester."""
    theirs, ours = await on_both_servers(tmp_path, _pinned_scenario)
    assert ours == theirs
    assert theirs[0] == ("status", "400", "Bad Request - Priority Group missing")
    assert theirs[2:5] == [("msg", "1", True), ("status", "423", "Nats-Pin-Id mismatch"),
                           ("msg", "2", True)]
    assert theirs[5:] == [("msg", "3", True), True, ("status", "423", "Nats-Pin-Id mismatch")]


async def _actions_scenario(url: str) -> list[tuple[str, dict[str, Any]]]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        events = await nc.subscribe("$JS.EVENT.ADVISORY.>")
        await nc.flush()

        async def api(subject: str, body: dict[str, Any] | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            answer = json.loads((await nc.request("$JS.API." + subject, data, timeout=2)).data)
            assert "error" not in answer, answer

        stream = {"name": "A", "subjects": ["a"]}
        await api("STREAM.CREATE.A", stream)
        await api("STREAM.CREATE.A", stream)  # the same again: nothing changes, no advisory
        await api("STREAM.UPDATE.A", {**stream, "max_msgs": 10})
        durable = {"stream_name": "A", "config": {"durable_name": "d", "ack_policy": "explicit"}}
        await api("CONSUMER.DURABLE.CREATE.A.d", durable)
        await api("CONSUMER.DURABLE.CREATE.A.d", durable)
        await api("CONSUMER.DELETE.A.d")
        await api("STREAM.DELETE.A")
        out: list[tuple[str, dict[str, Any]]] = []
        for _ in range(30):  # the 5 action advisories, among nats-server's audit events
            if len(out) == 5:
                break
            msg = await events.next_msg(timeout=5)
            body = json.loads(msg.data)
            if body["type"].endswith("api_audit"):
                continue  # nats-server's API audit events are not covered here
            assert body.pop("id") and body.pop("timestamp")
            out.append((msg.subject, body))
        return out
    finally:
        await nc.close()


async def test_stream_and_consumer_action_advisories(tmp_path: Path) -> None:
    """Creating, changing and deleting streams and consumers publish the action advisories
    nats-server publishes (nats.js's jsm.advisories() reports them)."""
    theirs, ours = await on_both_servers(tmp_path, _actions_scenario)
    assert ours == theirs
    assert [s for s, _ in theirs] == [
        "$JS.EVENT.ADVISORY.STREAM.CREATED.A", "$JS.EVENT.ADVISORY.STREAM.UPDATED.A",
        "$JS.EVENT.ADVISORY.CONSUMER.CREATED.A.d", "$JS.EVENT.ADVISORY.CONSUMER.DELETED.A.d",
        "$JS.EVENT.ADVISORY.STREAM.DELETED.A"]


async def _unpin_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await nc.request("$JS.API.STREAM.CREATE.U", b'{"name": "U", "subjects": ["u"]}', timeout=2)
        for _ in range(3):
            await nc.request("u", b"x", timeout=2)
        consumer = {"stream_name": "U", "config": {
            "durable_name": "c", "ack_policy": "explicit", "priority_groups": ["g"],
            "priority_policy": "pinned_client", "priority_timeout": 30_000_000_000}}
        await nc.request("$JS.API.CONSUMER.CREATE.U.c", json.dumps(consumer).encode(), timeout=2)
        out: list[Any] = []

        async def pull(body: dict[str, Any]) -> Any:
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish("$JS.API.CONSUMER.MSG.NEXT.U.c", json.dumps(body).encode(),
                             reply=inbox)
            return sub

        async def unpin(consumer: str, body: bytes) -> Any:
            msg = await nc.request(f"$JS.API.CONSUMER.UNPIN.U.{consumer}", body, timeout=2)
            answer = json.loads(msg.data)
            return answer["error"]["err_code"] if "error" in answer else answer

        first = await (await pull({"batch": 1, "group": "g"})).next_msg(timeout=2)
        pin_a = first.headers["Nats-Pin-Id"]
        waiting = await pull({"batch": 1, "group": "g", "expires": 5_000_000_000})
        for consumer, body in [("c", b"{}"), ("c", b'{"group": "no spaces!"}'),
                               ("c", b'{"group": "other"}'), ("nope", b'{"group": "g"}'),
                               ("c", b'{"group": "g"}')]:
            out.append(await unpin(consumer, body))
        # The pin is gone: the waiting request takes it, under a new id.
        taken = await waiting.next_msg(timeout=2)
        out.append((taken.reply.split(".")[5], taken.headers["Nats-Pin-Id"] != pin_a))
        late = await (await pull({"batch": 1, "group": "g", "id": pin_a})).next_msg(timeout=2)
        out.append((late.headers["Status"], late.headers.get("Description")))
        return out
    finally:
        await nc.close()


async def test_unpin_api(tmp_path: Path) -> None:
    """$JS.API.CONSUMER.UNPIN takes the pin from a pinned_client consumer's client (the next
    requester gets a new one), with nats-server's errors for a bad group or consumer."""
    theirs, ours = await on_both_servers(tmp_path, _unpin_scenario)
    assert ours == theirs
    assert theirs[:4] == [10025, 10162, 10160, 10014]
    assert theirs[4] == {"type": "io.nats.jetstream.api.v1.consumer_unpin_response"}
    assert theirs[5:] == [("2", True), ("423", "Nats-Pin-Id mismatch")]


async def _pedantic_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        stream = {"name": "L", "subjects": ["l"], "consumer_limits": {
            "max_ack_pending": 10, "inactive_threshold": 60_000_000_000}}
        await nc.request("$JS.API.STREAM.CREATE.L", json.dumps(stream).encode(), timeout=2)
        out = []
        for name, extra in [
            ("a", {}),  # max_ack_pending and inactive_threshold left to the stream's limits
            ("b", {"max_ack_pending": 5}),  # inactive_threshold still left to them
            ("c", {"max_ack_pending": 5, "inactive_threshold": 1_000_000_000}),  # all set
            ("d", {"max_ack_pending": 5, "inactive_threshold": 1_000_000_000,
                   "max_deliver": -2}),
            ("e", {"max_ack_pending": 5, "inactive_threshold": 1_000_000_000,
                   "max_waiting": -1}),
            ("f", {"max_ack_pending": 5, "inactive_threshold": 1_000_000_000,
                   "backoff": [2_000_000_000]}),  # ack_wait defaults to 30s, not 2s
        ]:
            for pedantic in (True, False):
                config = {"name": name, "ack_policy": "explicit", **extra}
                body = {"stream_name": "L", "config": config, "pedantic": pedantic}
                msg = await nc.request(f"$JS.API.CONSUMER.CREATE.L.{name}",
                                       json.dumps(body).encode(), timeout=2)
                answer = json.loads(msg.data)
                out.append(answer.get("error", "created"))
        return out
    finally:
        await nc.close()


async def test_pedantic_consumer_create(tmp_path: Path) -> None:
    """"pedantic": true refuses a consumer config that defaults would change (10157);
    without it the same config is created."""
    theirs, ours = await on_both_servers(tmp_path, _pedantic_scenario)
    assert ours == theirs
    assert theirs[0]["err_code"] == 10157 and theirs[1] == "created"
    assert theirs[4:6] == ["created", "created"]


async def _ack_none_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await nc.request("$JS.API.STREAM.CREATE.N", b'{"name": "N", "subjects": ["n"]}', timeout=2)
        await nc.request("n", b"x", timeout=2)
        out = []
        for name, policy in (("none", "none"), ("explicit", "explicit")):
            body = {"stream_name": "N", "config": {"durable_name": name, "ack_policy": policy}}
            await nc.request(f"$JS.API.CONSUMER.CREATE.N.{name}", json.dumps(body).encode(),
                             timeout=2)
            inbox = await nc.subscribe(nc.new_inbox())
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.N.{name}", b"1", reply=inbox.subject)
            msg = await inbox.next_msg(timeout=2)
            try:
                answer = await nc.request(msg.reply, b"+ACK", timeout=2)
                out.append(("answered", answer.data))
            except nats.errors.NoRespondersError:
                out.append("no responders")
        return out
    finally:
        await nc.close()


async def test_ack_none_consumer_takes_no_acks(tmp_path: Path) -> None:
    """An AckNone consumer does not listen on its ack subjects: an ack sent as a request gets
    no responders (nats.js's ackAck() rejects with that), an explicit one is answered."""
    theirs, ours = await on_both_servers(tmp_path, _ack_none_scenario)
    assert ours == theirs
    assert theirs == ["no responders", ("answered", b"")]


async def _pin_events_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await nc.request("$JS.API.STREAM.CREATE.Q", b'{"name": "Q", "subjects": ["q"]}', timeout=2)
        for _ in range(3):
            await nc.request("q", b"x", timeout=2)
        for name, policy in (("o", "overflow"), ("c", "pinned_client")):
            config: dict[str, Any] = {"durable_name": name, "ack_policy": "explicit",
                                      "priority_groups": ["g"], "priority_policy": policy}
            if policy == "pinned_client":
                config["priority_timeout"] = 500_000_000
            body = json.dumps({"stream_name": "Q", "config": config}).encode()
            await nc.request(f"$JS.API.CONSUMER.CREATE.Q.{name}", body, timeout=2)
        events = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.*.Q.c")
        await nc.flush()
        out: list[Any] = []
        pins: list[str] = []

        def masked(value: Any) -> Any:
            """Pin ids by the order they were handed out, times as whether they are set."""
            if isinstance(value, dict):
                return {k: masked(v) for k, v in value.items()}
            if isinstance(value, list):
                return [masked(v) for v in value]
            if isinstance(value, str) and value in pins:
                return f"pin{pins.index(value)}"
            if isinstance(value, str) and value[:4].isdigit() and value.endswith("Z"):
                return "zero time" if value.startswith("0001-") else "a time"
            return value

        async def groups(consumer: str) -> None:
            msg = await nc.request(f"$JS.API.CONSUMER.INFO.Q.{consumer}", b"", timeout=2)
            out.append(masked(json.loads(msg.data).get("priority_groups", "absent")))

        async def event() -> None:
            msg = await events.next_msg(timeout=5)
            body = json.loads(msg.data)
            assert body.pop("id") and body.pop("timestamp")
            out.append((msg.subject, masked(body)))

        async def pull() -> None:
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish("$JS.API.CONSUMER.MSG.NEXT.Q.c", b'{"batch": 1, "group": "g"}',
                             reply=inbox)
            msg = await sub.next_msg(timeout=2)
            pins.append(msg.headers["Nats-Pin-Id"])

        await groups("o")  # overflow: the group is listed, no client is pinned
        await groups("c")
        await pull()
        await event()  # pinned
        await groups("c")
        await nc.request("$JS.API.CONSUMER.UNPIN.Q.c", b'{"group": "g"}', timeout=2)
        await event()  # unpinned by the API: "admin"
        await groups("c")
        await pull()
        await event()  # pinned again, a new id
        await event()  # the client stays quiet past priority_timeout: "timeout"
        await groups("c")
        await nc.request("$JS.API.CONSUMER.UNPIN.Q.c", b'{"group": "g"}', timeout=2)
        await event()  # nothing was pinned: still advised
        return out
    finally:
        await nc.close()


async def test_pinned_client_in_info_and_advisories(tmp_path: Path) -> None:
    """Consumer info lists the priority groups with the pinned client's id and since when;
    the PINNED and UNPINNED advisories tell who got the pin and why it was lost (the API,
    or the pinned client's silence for priority_timeout)."""
    theirs, ours = await on_both_servers(tmp_path, _pin_events_scenario)
    assert ours == theirs
    pinned = ("$JS.EVENT.ADVISORY.CONSUMER.PINNED.Q.c", {
        "type": "io.nats.jetstream.advisory.v1.consumer_group_pinned", "account": "$G",
        "stream": "Q", "consumer": "c", "group": "g", "pinned_id": "pin0"})
    assert theirs[2] == pinned
    assert theirs[3] == [{"group": "g", "pinned_client_id": "pin0", "pinned_ts": "a time"}]
    assert theirs[4][1]["reason"] == "admin"
    assert theirs[7][1]["reason"] == "timeout"


async def _stream_delete_scenario(url: str) -> list[str]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await nc.request("$JS.API.STREAM.CREATE.D", b'{"name": "D", "subjects": ["d"]}', timeout=2)
        durable = {"stream_name": "D", "config": {"durable_name": "x"}}
        await nc.request("$JS.API.CONSUMER.CREATE.D.x", json.dumps(durable).encode(), timeout=2)
        events = await nc.subscribe("$JS.EVENT.ADVISORY.*.*.D.>")
        stream_events = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.*.D")
        await nc.request("$JS.API.STREAM.UPDATE.D", b'{"name": "D", "subjects": ["d"]}', timeout=2)
        # nats-server sends a stream's advisories from a queue its stream drains: one still
        # queued when the stream is deleted can be lost there, so the update's comes first.
        out = [(await stream_events.next_msg(timeout=5)).subject]
        await nc.request("$JS.API.STREAM.DELETE.D", b"", timeout=2)
        for sub in (stream_events, events):
            try:
                out.append((await sub.next_msg(timeout=5)).subject)
            except nats.errors.TimeoutError:
                out.append("(none)")
        return out
    finally:
        await nc.close()


async def test_stream_delete_advises_its_consumers(tmp_path: Path) -> None:
    """Deleting a stream advises each of its consumers deleted, then the stream; an update
    that changes nothing is advised all the same."""
    expected = ["$JS.EVENT.ADVISORY.STREAM.UPDATED.D", "$JS.EVENT.ADVISORY.STREAM.DELETED.D",
                "$JS.EVENT.ADVISORY.CONSUMER.DELETED.D.x"]
    # nats-server, loaded, now and then loses the STREAM.DELETED advisory (queued in the
    # stream it deletes): it gets three tries to show what it sends; jetraft must send all
    # of them every time.
    for attempt in range(3):
        run = tmp_path / str(attempt)
        run.mkdir()
        theirs, ours = await on_both_servers(run, _stream_delete_scenario)
        assert ours == expected
        if theirs == expected:
            break
    assert theirs == expected
