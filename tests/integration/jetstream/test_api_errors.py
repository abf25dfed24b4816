"""Bad $JS.API requests get nats-server's error codes and texts, never a crash; fuzzed stream
configs only ever produce API answers and the server stays up."""

from __future__ import annotations

import json
import logging
from typing import Any

import nats
import nats.errors
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jetraft.jetstream.errors import CATALOGUE
from tests.integration.jetstream.js_helpers import VS_NATS, api, err

SEC = 1_000_000_000


async def test_invalid_json_and_unknown_fields(nc: nats.NATS) -> None:
    resp = await api(nc, "STREAM.CREATE.J", b"{bad json")
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_create_response"
    code, err_code, text = err(resp)
    assert (code, err_code) == (400, 10025) and text.startswith("invalid JSON: ")
    resp = await api(nc, "STREAM.CREATE.J", {"name": "J", "bogus_field": 1})
    assert err(resp) == (400, 10025, 'invalid JSON: json: unknown field "bogus_field"')
    resp = await api(nc, "STREAM.CREATE.J", {"name": "J", "retention": "sometimes"})
    assert err(resp) == (400, 10025, 'invalid JSON: can not unmarshal "\\"sometimes\\""')
    for field in ("discard", "storage"):
        resp = await api(nc, "STREAM.CREATE.J", {"name": "J", field: "bogus"})
        assert err(resp)[:2] == (400, 10025)
    resp = await api(nc, "STREAM.CREATE.J", {"name": "J", "max_msgs": "many"})
    code, err_code, text = err(resp)
    assert (code, err_code) == (400, 10025) and "max_msgs" in text
    resp = await api(nc, "STREAM.CREATE.J", b"[]")
    assert err(resp)[:2] == (400, 10025)
    resp = await api(nc, "STREAM.NAMES", {"bogus": 1})
    assert err(resp) == (400, 10025, 'invalid JSON: json: unknown field "bogus"')
    resp = await api(nc, "STREAM.INFO.J", b"{nope")
    assert err(resp)[:2] == (400, 10025)
    await api(nc, "STREAM.CREATE.J", {"name": "J"})
    for subject in ("STREAM.MSG.DELETE.J", "STREAM.MSG.GET.J", "STREAM.PURGE.J"):
        code, err_code, text = err(await api(nc, subject, {"seq": -1}))
        assert (code, err_code) == (400, 10025) and "uint64" in text, subject


async def test_name_errors(nc: nats.NATS) -> None:
    resp = await api(nc, "STREAM.CREATE.A", {"name": "B"})
    assert err(resp) == (400, 10056, "stream name in subject does not match request")
    resp = await api(nc, "STREAM.CREATE.A")  # empty body: no name
    assert err(resp)[:2] == (400, 10056)
    resp = await api(nc, "STREAM.CREATE.A", b"null")
    assert err(resp)[:2] == (400, 10056)
    resp = await api(nc, "STREAM.INFO.MISSING")
    assert err(resp) == (404, 10059, "stream not found")
    assert (resp["total"], resp["offset"], resp["limit"]) == (0, 0, 0)
    resp = await api(nc, "STREAM.DELETE.MISSING")
    assert err(resp) == (404, 10059, "stream not found")
    resp = await api(nc, "STREAM.PURGE.MISSING")
    assert err(resp)[:2] == (404, 10059)
    await api(nc, "STREAM.CREATE.A", {"name": "A"})
    resp = await api(nc, "STREAM.DELETE.A", b'{"x": 1}')
    assert err(resp) == (400, 10038, "expected an empty request payload")
    assert (await api(nc, "STREAM.DELETE.A", b"{}"))["success"] is True


async def test_config_errors(nc: nats.NATS) -> None:
    cases: list[tuple[dict[str, Any], tuple[int, int, str]]] = [
        (
            {"num_replicas": 3},
            (500, 10074, "replicas > 1 not supported in non-clustered mode"),
        ),
        ({"num_replicas": -1}, (400, 10133, "replicas count cannot be negative")),
        ({"max_age": 1000}, (500, 10052, "max age needs to be >= 100ms")),
        ({"max_age": -1}, (500, 10052, "max age can not be negative")),
        ({"duplicate_window": -1}, (500, 10052, "duplicates window can not be negative")),
        (
            {"max_age": 5 * SEC, "duplicate_window": 9 * SEC},
            (500, 10052, "duplicates window can not be larger then max age"),
        ),
        (
            {"discard_new_per_subject": True},
            (500, 10052, "discard new per subject requires discard new policy to be set"),
        ),
        (
            {"deny_purge": True, "allow_rollup_hdrs": True},
            (500, 10052, "roll-ups require the purge permission"),
        ),
        ({"subjects": ["a..b"]}, (500, 10052, "invalid subject")),
        ({"subjects": ["x.*.>", "x.>"]}, (500, 10052, 'subject "x.*.>" overlaps with "x.>"')),
        (
            {"subjects": ["$JS.API.>"]},
            (500, 10052, "subjects that overlap with jetstream api require no-ack to be true"),
        ),
        (
            {"subjects": [">"]},
            (500, 10052, "capturing all subjects requires no-ack to be true"),
        ),
        (
            {"sealed": True},
            (500, 10052, "stream configuration for create can not be sealed"),
        ),
    ]
    for extra, expected in cases:
        resp = await api(nc, "STREAM.CREATE.C", {"name": "C", **extra})
        assert err(resp) == expected, extra
    resp = await api(nc, "STREAM.CREATE.C", {"name": "C", "subjects": ["c"], "max_msgs": 1})
    assert "error" not in resp
    # A name with a dot cannot even be addressed: nobody answers that subject shape.
    with pytest.raises(nats.errors.TimeoutError):
        await nc.request("$JS.API.STREAM.CREATE.C.D", b'{"name": "C.D"}', timeout=0.3)


async def test_in_use_and_overlap(nc: nats.NATS) -> None:
    await api(nc, "STREAM.CREATE.ONE", {"name": "ONE", "subjects": ["one.>"]})
    resp = await api(nc, "STREAM.CREATE.ONE", {"name": "ONE", "subjects": ["uno.>"]})
    assert err(resp) == (400, 10058, "stream name already in use with a different configuration")
    resp = await api(nc, "STREAM.CREATE.TWO", {"name": "TWO", "subjects": ["one.x"]})
    assert err(resp) == (400, 10065, "subjects overlap with an existing stream")


async def test_consumer_not_found(nc: nats.NATS) -> None:
    await api(nc, "STREAM.CREATE.CS", {"name": "CS"})
    resp = await api(nc, "CONSUMER.INFO.CS.nobody")
    assert err(resp) == (404, 10014, "consumer not found")
    resp = await api(nc, "CONSUMER.INFO.NOSTREAM.nobody")
    assert err(resp) == (404, 10059, "stream not found")


async def test_unknown_api_subject_gets_no_answer(nc: nats.NATS) -> None:
    # nats-server does not answer API subjects it does not know.
    for subject in ("$JS.API.FOO.BAR", "$JS.API.STREAM.INFO"):
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request(subject, b"", timeout=0.3)
    # The server is still fine.
    assert "error" not in await api(nc, "INFO")


# --- fuzzing -----------------------------------------------------------------------------

_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.lists(st.text(max_size=8), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
)
_known_keys = st.sampled_from(
    [
        "subjects",
        "retention",
        "max_consumers",
        "max_msgs",
        "max_bytes",
        "max_age",
        "max_msgs_per_subject",
        "max_msg_size",
        "discard",
        "storage",
        "num_replicas",
        "duplicate_window",
        "allow_rollup_hdrs",
        "deny_delete",
        "deny_purge",
        "allow_direct",
        "sealed",
        "metadata",
        "discard_new_per_subject",
        "allow_msg_ttl",
        "subject_delete_marker_ttl",
        "first_seq",
        "placement",
        "no_ack",
        "compression",
        "description",
        "consumer_limits",
        "persist_mode",
    ]
)
_good_values = {
    "retention": st.sampled_from(["limits", "interest", "workqueue"]),
    "discard": st.sampled_from(["old", "new"]),
    "storage": st.sampled_from(["file", "memory"]),
    "subjects": st.lists(st.sampled_from(["a", "a.*", "a.>", "b.c", ">", "*", "c..d"]), max_size=3),
    "max_age": st.integers(-1, 10 * SEC),
    "duplicate_window": st.integers(-1, 10 * SEC),
    "max_msgs": st.integers(-3, 100),
}
_fuzz_config = st.dictionaries(
    st.one_of(_known_keys, st.text(min_size=1, max_size=6)),
    _values,
    max_size=6,
).flatmap(
    lambda base: st.fixed_dictionaries({k: _good_values[k] for k in _good_values if k in base}).map(
        lambda good: {**base, **good}
    )
)


@pytest.mark.skipif(VS_NATS, reason="fuzzes jetraft")
@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(config=_fuzz_config, op=st.sampled_from(["CREATE", "UPDATE"]))
async def test_fuzzed_stream_configs_get_api_answers(
    nc: nats.NATS, caplog: pytest.LogCaptureFixture, config: dict[str, Any], op: str
) -> None:
    if op == "UPDATE":
        # Updates are checked against a live stream (else they would all be "not found").
        base = {"name": "FZ", "subjects": ["a", "b.c"], "max_msgs": 10}
        assert "error" not in await api(nc, "STREAM.CREATE.FZ", base)
        await nc.request("a", b"before", timeout=2)
    body = json.dumps({"name": "FZ", **config}).encode()
    msg = await nc.request(f"$JS.API.STREAM.{op}.FZ", body, timeout=2)
    resp = json.loads(msg.data)
    assert resp["type"] == f"io.nats.jetstream.api.v1.stream_{op.lower()}_response"
    if "error" in resp:
        code, err_code, text = err(resp)
        assert err_code in CATALOGUE and CATALOGUE[err_code][0] == code
        assert text and "internal error" not in text
    else:
        assert resp["config"]["name"] == "FZ"
    info = await api(nc, "STREAM.INFO.FZ")
    if op == "UPDATE" or "error" not in resp:
        # The stream (updated or not) works: it answers info and stores what matches it.
        assert "error" not in info, info
        subject = info["config"]["subjects"][0].replace("*", "x").replace(">", "x")
        quiet = info["config"]["sealed"] or info["config"].get("no_ack")
        if not subject.startswith("$") and not quiet:
            ack = json.loads((await nc.request(subject, b"after", timeout=2)).data)
            assert "seq" in ack, ack
        assert (await api(nc, "STREAM.DELETE.FZ"))["success"] is True
    else:
        assert err(info)[1] == 10059  # a refused create leaves nothing behind
    assert "error" not in await api(nc, "INFO")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


@pytest.mark.skipif(VS_NATS, reason="fuzzes jetraft")
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    subject=st.sampled_from(
        [
            "STREAM.INFO.FZ2",
            "STREAM.PURGE.FZ2",
            "STREAM.MSG.GET.FZ2",
            "STREAM.MSG.DELETE.FZ2",
            "STREAM.NAMES",
            "STREAM.LIST",
            "DIRECT.GET.FZ2",
        ]
    ),
    body=st.one_of(
        st.binary(max_size=40),
        st.dictionaries(
            st.sampled_from(["seq", "filter", "keep", "last_by_subj", "offset", "batch", "x"]),
            _values,
            max_size=3,
        ).map(lambda d: json.dumps(d).encode()),
    ),
)
async def test_fuzzed_requests_never_crash(nc: nats.NATS, subject: str, body: bytes) -> None:
    await api(
        nc,
        "STREAM.CREATE.FZ2",
        {"name": "FZ2", "subjects": ["fz2.*"], "allow_direct": True},
    )
    await nc.request("fz2.a", b"payload", timeout=2)
    msg = await nc.request("$JS.API." + subject, body, timeout=2)
    if subject.startswith("DIRECT.GET"):
        # Raw answers: the stored message, or a status.
        status = msg.headers.get("Status") if msg.headers else None
        assert msg.data == b"payload" or status in ("404", "408"), (msg.headers, msg.data)
    else:
        resp = json.loads(msg.data)
        if "error" in resp:
            assert "internal error" not in resp["error"]["description"]
    assert "error" not in await api(nc, "INFO")


# Every API subject shape, with odd tokens too; "{s}" is an existing stream, "{c}" a consumer.
_API_SUBJECTS = [
    "INFO",
    "STREAM.CREATE.{s}",
    "STREAM.UPDATE.{s}",
    "STREAM.INFO.{s}",
    "STREAM.DELETE.NOPE",
    "STREAM.PURGE.{s}",
    "STREAM.NAMES",
    "STREAM.LIST",
    "STREAM.MSG.GET.{s}",
    "STREAM.MSG.DELETE.{s}",
    "STREAM.LEADER.STEPDOWN.{s}",
    "STREAM.PEER.REMOVE.{s}",
    "DIRECT.GET.{s}",
    "DIRECT.GET.{s}.fa.x",
    "CONSUMER.CREATE.{s}",
    "CONSUMER.CREATE.{s}.{c}",
    "CONSUMER.CREATE.{s}.{c}.fa.x",
    "CONSUMER.CREATE.{s}.new1",
    "CONSUMER.DURABLE.CREATE.{s}.{c}",
    "CONSUMER.DURABLE.CREATE.{s}.{c}.extra",
    "CONSUMER.INFO.{s}.{c}",
    "CONSUMER.DELETE.{s}.nope",
    "CONSUMER.NAMES.{s}",
    "CONSUMER.LIST.{s}",
    "CONSUMER.MSG.NEXT.{s}.{c}",
    "CONSUMER.PAUSE.{s}.{c}",
    "CONSUMER.LEADER.STEPDOWN.{s}.{c}",
]
_body_keys = st.sampled_from(
    [
        "name",
        "stream_name",
        "config",
        "action",
        "seq",
        "filter",
        "keep",
        "offset",
        "subject",
        "batch",
        "expires",
        "no_wait",
        "last_by_subj",
        "next_by_subj",
        "start_time",
        "multi_last",
        "up_to_seq",
        "pause_until",
        "subjects_filter",
        "deleted_details",
        "durable_name",
        "deliver_subject",
        "peer",
    ]
)
_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),
    st.sampled_from(["FA", "fa.x", "2020-01-01T00:00:00Z", "9999-12-31T23:59:59Z", ">", "*"]),
)
_json_bodies = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_body_keys, inner, max_size=4)
    ),
    max_leaves=8,
)
# Bodies shaped like real requests (each key with a value of a plausible type), so the
# handlers get past decoding and their own logic sees odd but well-typed values.
_small_ints = st.one_of(st.integers(-2, 5), st.sampled_from([2**63 - 1, 2**64 - 1]))
_names = st.sampled_from(["", "FA", "CA", "fa.x", "fa.*", "fa.>", ">", "x y", "nope"])
_times = st.sampled_from(
    ["2020-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "bad", "9999-12-31T23:59:59Z"]
)
_shaped_values: dict[str, st.SearchStrategy[Any]] = {
    "name": _names,
    "stream_name": _names,
    "action": st.sampled_from(["", "create", "update", "x"]),
    "config": st.fixed_dictionaries(
        {},
        optional={
            "durable_name": _names,
            "name": _names,
            "filter_subject": _names,
            "ack_policy": st.sampled_from(["explicit", "none", "all"]),
            "deliver_subject": _names,
            "deliver_policy": st.sampled_from(["all", "last", "new", "by_start_sequence"]),
            "opt_start_seq": _small_ints,
        },
    ),
    "seq": _small_ints,
    "filter": _names,
    "keep": _small_ints,
    "offset": _small_ints,
    "subject": _names,
    "subjects": st.lists(_names, max_size=2),
    "batch": _small_ints,
    "max_bytes": _small_ints,
    "expires": _small_ints,
    "idle_heartbeat": _small_ints,
    "no_wait": st.booleans(),
    "last_by_subj": _names,
    "next_by_subj": _names,
    "start_time": _times,
    "multi_last": st.lists(_names, max_size=2),
    "up_to_seq": _small_ints,
    "up_to_time": _times,
    "no_hdr": st.booleans(),
    "pause_until": _times,
    "subjects_filter": _names,
    "deleted_details": st.booleans(),
    "no_erase": st.booleans(),
    "peer": _names,
    "max_msgs": _small_ints,
    "retention": st.sampled_from(["limits", "interest", "workqueue"]),
}
_GET_KEYS = ("seq", "last_by_subj", "next_by_subj", "batch", "max_bytes", "start_time")
# The keys each request kind knows (strict decoders refuse the others before any logic runs).
_KEYS_BY_PREFIX: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("STREAM.CREATE", ("name", "subjects", "max_msgs", "retention")),
    ("STREAM.UPDATE", ("name", "subjects", "max_msgs", "retention")),
    ("STREAM.INFO", ("offset", "subjects_filter", "deleted_details")),
    ("STREAM.PURGE", ("seq", "filter", "keep")),
    ("STREAM.NAMES", ("offset", "subject")),
    ("STREAM.LIST", ("offset", "subject")),
    ("STREAM.MSG.GET", _GET_KEYS),
    ("STREAM.MSG.DELETE", ("seq", "no_erase")),
    ("STREAM.PEER.REMOVE", ("peer",)),
    ("DIRECT.GET", (*_GET_KEYS, "multi_last", "up_to_seq", "up_to_time", "no_hdr")),
    ("CONSUMER.CREATE", ("stream_name", "config", "action")),
    ("CONSUMER.DURABLE.CREATE", ("stream_name", "config", "action")),
    ("CONSUMER.NAMES", ("offset",)),
    ("CONSUMER.LIST", ("offset",)),
    ("CONSUMER.MSG.NEXT", ("batch", "expires", "no_wait", "max_bytes", "idle_heartbeat")),
    ("CONSUMER.PAUSE", ("pause_until",)),
)


def _shaped(subject: str) -> st.SearchStrategy[bytes]:
    """Bodies shaped like real requests for ``subject`` (its keys, plausible value types), so
    the handlers get past decoding and their own logic meets odd but well-typed values."""
    keys = next((k for prefix, k in _KEYS_BY_PREFIX if subject.startswith(prefix)), ())
    shaped = st.fixed_dictionaries({}, optional={k: _shaped_values[k] for k in keys})
    return shaped.map(lambda v: json.dumps(v).encode())


@pytest.mark.skipif(VS_NATS, reason="fuzzes jetraft")
@pytest.mark.parametrize("subject", _API_SUBJECTS)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
async def test_fuzzed_requests_to_every_api_subject(
    nc: nats.NATS, caplog: pytest.LogCaptureFixture, subject: str, data: st.DataObject
) -> None:
    """Any body on any API subject: an answer (JSON with a catalogued error, or a status) or,
    where nats-server stays silent too, nothing; never a handler crash."""
    body = data.draw(
        st.one_of(
            st.binary(max_size=30),
            _json_bodies.map(lambda v: json.dumps(v).encode()),
            _shaped(subject),
            _shaped(subject),  # twice: the shaped bodies reach the most code
        ),
        label="body",
    )
    await api(nc, "STREAM.CREATE.FA", {"name": "FA", "subjects": ["fa.*"], "allow_direct": True})
    await api(
        nc,
        "CONSUMER.CREATE.FA.CA",
        {"stream_name": "FA", "config": {"durable_name": "CA", "ack_policy": "explicit"}},
    )
    await nc.publish("fa.x", b"payload")
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish("$JS.API." + subject.format(s="FA", c="CA"), body, reply=inbox)
        await nc.flush()
        try:
            msg = await sub.next_msg(timeout=0.3)
        except nats.errors.TimeoutError:
            msg = None
        raw = subject.startswith(("DIRECT.GET", "CONSUMER.MSG.NEXT"))  # messages, not JSON
        if msg is not None and raw:
            status = msg.headers.get("Status") if msg.headers else None
            assert msg.data == b"payload" or status is not None, (msg.headers, msg.data)
        elif msg is not None and not (msg.headers and "Status" in msg.headers):
            resp = json.loads(msg.data)
            assert resp.get("type", "").startswith("io.nats.jetstream.api.v1."), resp
            if "error" in resp:
                code, err_code, text = err(resp)
                assert err_code in CATALOGUE and CATALOGUE[err_code][0] == code, resp
                assert text and "internal error" not in text, resp
    finally:
        await sub.unsubscribe()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    # A normal request still works afterwards.
    assert "error" not in await api(nc, "STREAM.INFO.FA")


async def test_account_info_counts_the_requests_before_it(nc: nats.NATS) -> None:
    """$JS.API.INFO's api.total and api.errors count the answered requests before it."""
    first = await api(nc, "INFO")
    assert first["api"] == {"level": first["api"]["level"], "total": 0, "errors": 0}  # new server
    second = await api(nc, "INFO")
    assert second["api"]["total"] == first["api"]["total"] + 1
    await api(nc, "STREAM.INFO.NOSUCH")
    third = await api(nc, "INFO")
    assert third["api"]["total"] == second["api"]["total"] + 2
    assert third["api"]["errors"] == second["api"]["errors"] + 1
