"""How a system request's JSON body becomes filters and the builders' query options."""

from __future__ import annotations

import pytest

from jetraft.server.monitor.sysreq import BadRequest, parse_request


def test_empty_body_means_defaults() -> None:
    assert parse_request("VARZ", b"") == ({}, {})
    assert parse_request("JSZ", b"  \n") == ({}, {})


def test_options_take_the_query_names() -> None:
    filters, query = parse_request(
        "JSZ", b'{"accounts":true,"streams":true,"consumer":true,"leader_only":true,'
        b'"account":"APP","raft":true,"limit":5,"server_name":"n1"}'
    )
    assert filters == {"server_name": "n1"}
    assert query == {
        "accounts": "true", "streams": "true", "consumers": "true", "leader-only": "true",
        "acc": "APP", "raft": "true", "limit": "5",
    }
    _, query = parse_request("CONNZ", b'{"subscriptions_detail":true,"state":2,"sort":"idle"}')
    assert query == {"subs": "detail", "state": "all", "sort": "idle"}
    _, query = parse_request("HEALTHZ", b'{"js-enabled-only":true,"details":true}')
    assert query == {"js-enabled-only": "true", "details": "true"}
    _, query = parse_request("ACCOUNTZ", b'{"account":"APP"}')
    assert query == {"acc": "APP"}


def test_unknown_options_are_ignored_and_zero_values_are_absent() -> None:
    assert parse_request("VARZ", b'{"whatever":1}') == ({}, {})
    assert parse_request("SUBSZ", b'{"subscriptions":false,"offset":0,"test":""}') == ({}, {})


@pytest.mark.parametrize(
    "body",
    [b"garbage", b"[1]", b'"x"', b'{"limit":"5"}', b'{"subscriptions":1}', b'{"tags":"a"}',
     b'{"tags":[1]}', b'{"exact_match":"yes"}', b'{"offset":true}'],
)
def test_bodies_go_would_refuse(body: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_request("CONNZ", body)
