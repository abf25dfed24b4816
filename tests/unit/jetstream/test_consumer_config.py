"""Consumer config: defaults, validation error codes, update rules, wire form, pull parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jetraft.jetstream.consumer_config import (
    ConsumerConfig,
    StreamFacts,
    apply_defaults,
    check_update,
    check_workqueue,
    config_from_request,
    config_to_wire,
    decode_create_request,
    format_rfc3339_ns,
    parse_rfc3339_ns,
    validate,
)
from jetraft.jetstream.consumer_errors import ConsumerError
from jetraft.jetstream.pull import PullError, parse_pull_request

SEC = 1_000_000_000
STREAM = StreamFacts(name="S", subjects=("s.>",))


def build(config: dict[str, Any], stream: StreamFacts = STREAM) -> ConsumerConfig:
    req = decode_create_request(json.dumps({"stream_name": "S", "config": config}).encode())
    assert req.config is not None
    cfg = apply_defaults(config_from_request(req.config), stream)
    validate(cfg, stream)
    return cfg


def err_code(config: dict[str, Any], stream: StreamFacts = STREAM) -> int:
    with pytest.raises(ConsumerError) as info:
        build(config, stream)
    return info.value.err_code


def test_pull_explicit_defaults_match_nats_server() -> None:
    cfg = build({"durable_name": "D", "ack_policy": "explicit"})
    assert config_to_wire(cfg) == {
        "durable_name": "D",
        "deliver_policy": "all",
        "ack_policy": "explicit",
        "ack_wait": 30 * SEC,
        "max_deliver": -1,
        "replay_policy": "instant",
        "max_waiting": 512,
        "max_ack_pending": 1000,
        "num_replicas": 0,
    }


def test_ephemeral_push_defaults_match_nats_server() -> None:
    cfg = build({"name": "P", "deliver_subject": "x.y", "ack_policy": "none"})
    assert config_to_wire(cfg) == {
        "name": "P",
        "deliver_policy": "all",
        "ack_policy": "none",
        "max_deliver": -1,
        "replay_policy": "instant",
        "deliver_subject": "x.y",
        "inactive_threshold": 5 * SEC,
        "num_replicas": 0,
    }


def test_ephemeral_keeps_its_own_inactive_threshold() -> None:
    assert build({"name": "E", "inactive_threshold": SEC // 2}).inactive_threshold == SEC // 2
    assert build({"name": "E"}).inactive_threshold == 5 * SEC
    assert build({"durable_name": "D"}).inactive_threshold == 0


def test_nats_py_nulls_and_backoff() -> None:
    cfg = build(
        {
            "name": "B",
            "ack_policy": "explicit",
            "ack_wait": None,
            "idle_heartbeat": None,
            "inactive_threshold": None,
            "backoff": [2 * SEC, 4 * SEC],
            "max_deliver": 5,
        }
    )
    assert cfg.ack_wait == 2 * SEC
    assert cfg.backoff == (2 * SEC, 4 * SEC)


@pytest.mark.parametrize(
    ("config", "code"),
    [
        ({"filter_subject": "s.a", "filter_subjects": ["s.b"]}, 10136),
        ({"filter_subjects": ["s.a", ""]}, 10139),
        ({"filter_subjects": ["s.>", "s.a"]}, 10138),
        ({"deliver_policy": "by_start_sequence"}, 10094),
        ({"deliver_policy": "by_start_time"}, 10094),
        ({"deliver_policy": "all", "opt_start_seq": 4}, 10094),
        ({"deliver_policy": "last_per_subject"}, 10094),
        ({"deliver_subject": "q", "flow_control": True}, 10108),
        ({"deliver_subject": "q", "max_waiting": 5}, 10080),
        ({"deliver_subject": "q.*"}, 10079),
        ({"deliver_subject": "s.x"}, 10081),
        ({"deliver_subject": "q", "idle_heartbeat": 1000}, 10083),
        ({"deliver_subject": "q", "ack_policy": "none", "max_ack_pending": 5}, 10082),
        ({"idle_heartbeat": SEC}, 10088),
        ({"flow_control": True}, 10089),
        ({"rate_limit_bps": 10}, 10086),
        ({"max_expires": 10}, 10115),
        ({"backoff": [SEC, SEC], "max_deliver": 1}, 10116),
        ({"backoff": [-1]}, 10184),
        ({"ack_wait": -5}, 10183),
        ({"name": "a.b"}, 10052),
        ({"durable_name": "a*"}, 10052),
        ({"durable_name": "A", "name": "B"}, 10132),
        ({"num_replicas": 3}, 10126),
        ({"num_replicas": -1}, 10133),
        ({"bogus": 1}, 10025),
        ({"ack_policy": "bogus"}, 10025),
        ({"opt_start_time": "yesterday"}, 10025),
        ({"description": "x" * 5000}, 10107),
        ({"sample_freq": "abc"}, 10095),
        ({"priority_groups": ["g"]}, 10196),
        ({"priority_policy": "overflow"}, 10159),
    ],
)
def test_validation_error_codes(config: dict[str, Any], code: int) -> None:
    assert err_code(config) == code


def test_workqueue_rules() -> None:
    wq = StreamFacts(name="W", subjects=("w.>",), retention="workqueue")
    assert err_code({"ack_policy": "none"}, wq) == 10084
    first = build({"name": "A", "ack_policy": "explicit", "filter_subject": "w.a"}, wq)
    check_workqueue(first, "A", [], wq)

    def wq_code(cfg: ConsumerConfig, others: list[ConsumerConfig]) -> int:
        with pytest.raises(ConsumerError) as info:
            check_workqueue(cfg, cfg.name, others, wq)
        return info.value.err_code

    push_none = build({"name": "N", "ack_policy": "none", "deliver_subject": "d"}, wq)
    assert wq_code(push_none, []) == 10098
    newer = build({"name": "B", "ack_policy": "explicit", "deliver_policy": "new"}, wq)
    assert wq_code(newer, []) == 10101
    unfiltered = build({"name": "U", "ack_policy": "explicit"}, wq)
    assert wq_code(unfiltered, [first]) == 10099
    overlapping = build({"name": "O", "ack_policy": "explicit", "filter_subject": "w.*"}, wq)
    assert wq_code(overlapping, [first]) == 10100
    disjoint = build({"name": "D", "ack_policy": "explicit", "filter_subject": "w.b"}, wq)
    check_workqueue(disjoint, "D", [first], wq)


def test_update_rules() -> None:
    old = build({"durable_name": "D", "ack_policy": "explicit"})
    check_update(old, old, deliver_bound=False)
    check_update(
        old,
        build({"durable_name": "D", "ack_policy": "explicit", "max_deliver": 3}),
        deliver_bound=False,
    )
    for change, text in [
        ({"deliver_policy": "new"}, "deliver policy can not be updated"),
        ({"ack_policy": "all"}, "ack policy can not be updated"),
        ({"max_waiting": 7}, "max waiting can not be updated"),
        ({"deliver_subject": "x"}, "can not update pull consumer to push based"),
    ]:
        new = build({"durable_name": "D", "ack_policy": "explicit", **change})
        with pytest.raises(ConsumerError) as info:
            check_update(old, new, deliver_bound=False)
        assert (info.value.err_code, info.value.code, info.value.description) == (10012, 500, text)


def test_rfc3339_round_trip() -> None:
    ns = parse_rfc3339_ns("2026-11-22T23:28:13.207983613Z")
    assert format_rfc3339_ns(ns) == "2026-11-22T23:28:13.207983613Z"
    assert parse_rfc3339_ns("1970-01-01T01:00:00+01:00") == 0
    assert format_rfc3339_ns(5 * SEC) == "1970-01-01T00:00:05Z"
    assert format_rfc3339_ns(SEC + 500_000_000) == "1970-01-01T00:00:01.5Z"


def test_pull_request_forms() -> None:
    assert parse_pull_request(b"").batch == 1
    assert parse_pull_request(b" 7 ").batch == 7
    req = parse_pull_request(b'{"batch":5,"expires":2000000000,"idle_heartbeat":500000000}')
    assert (req.batch, req.expires_ns, req.idle_heartbeat_ns, req.no_wait) == (
        5,
        2 * SEC,
        SEC // 2,
        False,
    )
    with pytest.raises(PullError) as info:
        parse_pull_request(b'{"batch":1,"expires":1000000000,"idle_heartbeat":600000000}')
    assert (info.value.code, info.value.description) == (
        400,
        "Bad Request - heartbeat value too large",
    )
    with pytest.raises(PullError) as info:
        parse_pull_request(b'{"batch":')
    assert info.value.code == 400
