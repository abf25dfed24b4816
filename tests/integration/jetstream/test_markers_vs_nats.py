"""Subject delete markers, side by side with a real nats-server: the same stream, the same
publishes, then the stream's messages once TTLs have passed. A subject whose last message
expired holds a marker (same sequence, headers and body as nats-server's); a subject that
still has messages, and an expiring marker, leave none."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.integration.jetstream.consumer_support import nats_server_binary, on_both_servers

pytestmark = pytest.mark.skipif(
    not Path(nats_server_binary()).exists(), reason="nats-server binary not installed"
)


async def _get(nc: nats.NATS, body: dict[str, Any]) -> dict[str, Any]:
    msg = await nc.request("$JS.API.STREAM.MSG.GET.M", json.dumps(body).encode(), timeout=2)
    out: dict[str, Any] = json.loads(msg.data)
    return out


def _shape(answer: dict[str, Any]) -> Any:
    """A MSG.GET answer without what differs between servers (times)."""
    if "error" in answer:
        return answer["error"]["err_code"]
    m = answer["message"]
    hdrs = base64.b64decode(m.get("hdrs", "")).decode()
    return m["subject"], m["seq"], hdrs, base64.b64decode(m.get("data", "")).decode()


async def _until(check: Any, what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _scenario(url: str) -> dict[str, Any]:
    nc = await nats.connect(url, allow_reconnect=False)
    js = nc.jetstream()
    out: dict[str, Any] = {}
    config = {"name": "M", "subjects": ["m.>"], "allow_msg_ttl": True,
              "subject_delete_marker_ttl": 2_000_000_000, "allow_rollup_hdrs": True}
    created = await nc.request("$JS.API.STREAM.CREATE.M", json.dumps(config).encode(), timeout=2)
    assert "error" not in json.loads(created.data), created.data
    ttl = {"Nats-TTL": "1s"}
    await js.publish("m.alone", b"a", headers=ttl)  # the subject's last: a marker follows
    await js.publish("m.two", b"kept")  # no TTL: m.two keeps this one
    await js.publish("m.two", b"goes", headers=ttl)  # not the last: removed, no marker
    await js.publish("m.purged", b"p", headers={"KV-Operation": "PURGE", "Nats-TTL": "1s",
                                                 "Nats-Rollup": "sub"})  # a marker already

    async def marker_placed() -> bool:
        got = await _get(nc, {"last_by_subj": "m.alone"})
        return "error" not in got and got["message"]["seq"] > 4

    await _until(marker_placed, "the marker of m.alone")

    async def purge_marker_gone() -> bool:
        return "error" in await _get(nc, {"last_by_subj": "m.purged"})

    await _until(purge_marker_gone, "the KV purge marker's expiry")
    for subject in ("m.alone", "m.two", "m.purged"):
        out[f"last {subject}"] = _shape(await _get(nc, {"last_by_subj": subject}))
    for seq in range(1, 6):
        out[f"seq {seq}"] = _shape(await _get(nc, {"seq": seq}))

    async def marker_gone() -> bool:
        return "error" in await _get(nc, {"last_by_subj": "m.alone"})

    await _until(marker_gone, "the marker's own expiry")
    info = await nc.request("$JS.API.STREAM.INFO.M", b"", timeout=2)
    state = json.loads(info.data)["state"]
    out["state"] = {k: state.get(k) for k in ("messages", "first_seq", "last_seq", "num_subjects")}
    await nc.close()
    return out


async def test_subject_delete_markers_match_nats_server(tmp_path: Path) -> None:
    theirs, ours = await on_both_servers(tmp_path, _scenario)
    assert ours == theirs
    # What the comparison rests on (nats-server's own answers):
    assert theirs["seq 5"][0] == "m.alone" and "Nats-Marker-Reason: MaxAge" in theirs["seq 5"][2]
    assert theirs["last m.two"][3] == "kept"
