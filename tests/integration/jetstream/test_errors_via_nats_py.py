"""Every error the issue names, as a nats-py user meets it: the exception class nats-py picks
from ``code`` and the ``err_code``/``description`` nats-server sends. API calls go through
nats-py's JetStream manager; publish errors through ``js.publish``.

``JETRAFT_VS_NATS=1`` runs these against a real nats-server (see consumer_support.py)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import nats
import nats.js.errors as jse
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig


async def raises(
    call: Awaitable[Any], kind: type[jse.APIError], err_code: int, description: str | None = None
) -> jse.APIError:
    """``call`` fails with nats-py's ``kind`` carrying ``err_code`` (and ``description``)."""
    with pytest.raises(kind) as exc:
        await call
    assert exc.value.err_code == err_code, exc.value
    if description is not None:
        assert exc.value.description == description, exc.value
    return exc.value


async def test_stream_management_errors(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="ONE", subjects=["one.>"])
    await raises(
        js.add_stream(name="ONE", subjects=["uno.>"]),
        jse.BadRequestError,
        10058,
        "stream name already in use with a different configuration",
    )
    await raises(
        js.add_stream(name="TWO", subjects=["one.x"]),
        jse.BadRequestError,
        10065,
        "subjects overlap with an existing stream",
    )
    await js.add_stream(name="THREE", subjects=["three"])
    await raises(
        js.update_stream(name="THREE", subjects=["three", "one.*"]),
        jse.BadRequestError,
        10065,
        "subjects overlap with an existing stream",
    )
    await raises(
        js.add_stream(name="R3", subjects=["r3"], num_replicas=3),
        jse.ServerError,
        10074,
        "replicas > 1 not supported in non-clustered mode",
    )
    # Invalid configurations: 10052 with the reason.
    await raises(
        js.add_stream(name="AGE", subjects=["age"], max_age=0.001),
        jse.ServerError,
        10052,
        "max age needs to be >= 100ms",
    )
    await raises(
        js.add_stream(StreamConfig(name="DNPS", subjects=["dnps"], discard_new_per_subject=True)),
        jse.ServerError,
        10052,
        "discard new per subject requires discard new policy to be set",
    )
    await raises(
        js.add_stream(name="RU", subjects=["ru"], deny_purge=True, allow_rollup_hdrs=True),
        jse.ServerError,
        10052,
        "roll-ups require the purge permission",
    )
    # Nothing of the refused streams exists.
    assert sorted(s.config.name for s in await js.streams_info()) == ["ONE", "THREE"]


async def test_not_found_errors(nc: nats.NATS) -> None:
    js = nc.jetstream()
    not_found = "stream not found"
    await raises(js.stream_info("NOPE"), jse.NotFoundError, 10059, not_found)
    await raises(js.delete_stream("NOPE"), jse.NotFoundError, 10059, not_found)
    await raises(js.purge_stream("NOPE"), jse.NotFoundError, 10059, not_found)
    await raises(js.update_stream(name="NOPE", subjects=["n"]), jse.NotFoundError, 10059)
    await raises(js.get_msg("NOPE", 1), jse.NotFoundError, 10059, not_found)
    await raises(js.delete_msg("NOPE", 1), jse.NotFoundError, 10059, not_found)
    await raises(js.consumer_info("NOPE", "C"), jse.NotFoundError, 10059, not_found)
    await raises(
        js.add_consumer("NOPE", durable_name="C", ack_policy=AckPolicy.EXPLICIT),
        jse.NotFoundError,
        10059,
        not_found,
    )
    await js.add_stream(name="S", subjects=["s"])
    await raises(js.consumer_info("S", "C"), jse.NotFoundError, 10014, "consumer not found")
    await raises(js.delete_consumer("S", "C"), jse.NotFoundError, 10014, "consumer not found")
    await raises(js.get_msg("S", 1), jse.NotFoundError, 10037, "no message found")
    await js.publish("s", b"x")
    await js.publish("s", b"y")
    assert await js.delete_msg("S", 1)
    await raises(js.delete_msg("S", 1), jse.ServerError, 10057, "no message found")


async def test_consumer_create_errors(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"], max_consumers=1)
    await raises(
        js.add_consumer("S", durable_name="R3", num_replicas=3),
        jse.ServerError,
        10074,
        "replicas > 1 not supported in non-clustered mode",
    )
    await raises(
        js.add_consumer(
            "S", ConsumerConfig(durable_name="BS", deliver_policy=DeliverPolicy.BY_START_SEQUENCE)
        ),
        jse.BadRequestError,
        10094,
    )
    await js.add_consumer("S", durable_name="ONLY", ack_policy=AckPolicy.EXPLICIT)
    await raises(
        js.add_consumer("S", durable_name="SECOND", ack_policy=AckPolicy.EXPLICIT),
        jse.BadRequestError,
        10026,
        "maximum consumers limit reached",
    )
    # Re-sending the same consumer is not a new one, so the limit does not apply.
    await js.add_consumer("S", durable_name="ONLY", ack_policy=AckPolicy.EXPLICIT)


async def test_publish_errors(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="E", subjects=["e.*"])
    assert (await js.publish("e.a", b"1", headers={"Nats-Msg-Id": "m1"})).seq == 1
    await raises(js.publish("e.a", b"", stream="OTHER"), jse.BadRequestError, 10060)
    await raises(
        js.publish("e.a", b"", headers={"Nats-Expected-Last-Sequence": "7"}),
        jse.BadRequestError,
        10071,
        "wrong last sequence: 1",
    )
    await raises(
        js.publish("e.a", b"", headers={"Nats-Expected-Last-Subject-Sequence": "0"}),
        jse.BadRequestError,
        10071,
        "wrong last sequence: 1",
    )
    await raises(
        js.publish("e.a", b"", headers={"Nats-Expected-Last-Msg-Id": "m0"}),
        jse.BadRequestError,
        10070,
        "wrong last msg ID: m1",
    )
    # None of the refused messages was stored.
    assert (await js.stream_info("E")).state.messages == 1

    await js.add_stream(name="N", subjects=["n"], max_msgs=1, discard="new", max_msg_size=10)
    await js.publish("n", b"x")
    await raises(
        js.publish("n", b"y"), jse.ServiceUnavailableError, 10077, "maximum messages exceeded"
    )
    await raises(
        js.publish("n", b"z" * 11),
        jse.BadRequestError,
        10054,
        "message size exceeds maximum allowed",
    )
    cfg = StreamConfig(name="SEAL", subjects=["seal"], deny_delete=True, deny_purge=True)
    await js.add_stream(cfg)
    await js.publish("seal", b"x")
    await raises(js.delete_msg("SEAL", 1), jse.ServerError, 10057, "message delete not permitted")
    await raises(js.purge_stream("SEAL"), jse.ServerError, 10110, "stream purge not permitted")
    cfg.sealed = True
    await js.update_stream(cfg)
    await raises(
        js.publish("seal", b"y"), jse.BadRequestError, 10109, "invalid operation on sealed stream"
    )
    await raises(js.delete_msg("SEAL", 1), jse.BadRequestError, 10109)
    assert (await js.stream_info("SEAL")).state.messages == 1
