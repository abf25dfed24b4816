"""Bad $JS.API requests get nats-server's error codes and texts, never a crash; fuzzed stream
configs only ever produce API answers and the server stays up."""

from __future__ import annotations

import json
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
    nc: nats.NATS, config: dict[str, Any], op: str
) -> None:
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
        # A stream that was created works: it answers info, and goes away again.
        assert "error" not in await api(nc, "STREAM.INFO.FZ")
        assert (await api(nc, "STREAM.DELETE.FZ"))["success"] is True
    assert "error" not in await api(nc, "INFO")


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
