"""Paging of STREAM.NAMES / STREAM.LIST / CONSUMER.NAMES / CONSUMER.LIST past their first
page (1024 names, 256 infos), through the raw API and nats-py's offset-taking calls.

Memory streams keep the setup cheap: paging does not depend on the storage.
``JETRAFT_VS_NATS=1`` runs these against a real nats-server (see consumer_support.py)."""

from __future__ import annotations

import asyncio
import json

import nats

from tests.integration.jetstream.js_helpers import api

NAMES_PAGE = 1024
LIST_PAGE = 256


async def _create_streams(nc: nats.NATS, names: list[str]) -> None:
    async def one(i: int, name: str) -> None:
        body = {"name": name, "subjects": [f"pg.{i}"], "storage": "memory"}
        msg = await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(body).encode(), 5)
        assert "error" not in json.loads(msg.data), msg.data

    # A bounded number in flight at a time keeps the setup quick without flooding anything.
    for start in range(0, len(names), 64):
        await asyncio.gather(*(one(i, n) for i, n in enumerate(names) if start <= i < start + 64))


async def test_stream_names_and_list_past_the_first_page(nc: nats.NATS) -> None:
    names = [f"P{i:04d}" for i in range(NAMES_PAGE + 6)]
    await _create_streams(nc, names)
    first = await api(nc, "STREAM.NAMES")
    assert (first["total"], first["offset"], first["limit"]) == (len(names), 0, NAMES_PAGE)
    assert first["streams"] == names[:NAMES_PAGE]
    second = await api(nc, "STREAM.NAMES", {"offset": NAMES_PAGE})
    assert (second["total"], second["offset"]) == (len(names), NAMES_PAGE)
    assert second["streams"] == names[NAMES_PAGE:]
    # Walking the pages the way clients do (offset += len(page)) sees every name once.
    seen: list[str] = []
    offset = 0
    for _ in range(10):
        page = await api(nc, "STREAM.NAMES", {"offset": offset})
        seen += page["streams"] or []
        offset += len(page["streams"] or [])
        if offset >= page["total"]:
            break
    assert seen == names

    js = nc.jetstream()
    infos = await js.streams_info()
    assert [i.config.name for i in infos] == names[:LIST_PAGE]
    infos = await js.streams_info(offset=LIST_PAGE)
    assert [i.config.name for i in infos] == names[LIST_PAGE : 2 * LIST_PAGE]
    tail = await js.streams_info_iterator(offset=NAMES_PAGE)
    assert (tail.offset, tail.total) == (NAMES_PAGE, len(names))
    assert [i.config.name for i in tail] == names[NAMES_PAGE:]
    # An offset past the end is an empty page, not an error.
    past = await api(nc, "STREAM.LIST", {"offset": 5000})
    assert past["total"] == len(names) and not past["streams"]
    # The subject filter pages over the matching streams only.
    filtered = await api(nc, "STREAM.NAMES", {"subject": "pg.1029"})
    assert (filtered["total"], filtered["streams"]) == (1, ["P1029"])


async def test_consumer_names_and_list_past_the_first_page(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="CP", subjects=["cp"], storage="memory")
    names = [f"C{i:03d}" for i in range(LIST_PAGE + 4)]

    async def one(name: str) -> None:
        body = {"stream_name": "CP", "config": {"durable_name": name, "ack_policy": "explicit"}}
        resp = await api(nc, f"CONSUMER.CREATE.CP.{name}", body, timeout=5)
        assert "error" not in resp, resp

    for start in range(0, len(names), 64):
        await asyncio.gather(*(one(n) for n in names[start : start + 64]))
    first = await js.consumers_info("CP")
    assert [c.name for c in first] == names[:LIST_PAGE]
    rest = await js.consumers_info("CP", offset=LIST_PAGE)
    assert [c.name for c in rest] == names[LIST_PAGE:]
    page = await api(nc, "CONSUMER.LIST.CP", {"offset": LIST_PAGE})
    assert (page["total"], page["offset"], page["limit"]) == (len(names), LIST_PAGE, LIST_PAGE)
    all_names = await api(nc, "CONSUMER.NAMES.CP")
    assert (all_names["total"], all_names["limit"]) == (len(names), NAMES_PAGE)
    assert all_names["consumers"] == names
    tail = await api(nc, "CONSUMER.NAMES.CP", {"offset": len(names) - 2})
    assert tail["consumers"] == names[-2:]
