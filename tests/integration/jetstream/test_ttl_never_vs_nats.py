"""Per-message TTL "never" against max_age, side by side with a real nats-server: a message
published with ``Nats-TTL: never`` on a stream with ``allow_msg_ttl`` stays when the stream's
max_age removes the messages around it (file and memory storage), and a jetraft restart keeps
that promise (the TTL lives in the stored headers and is read back)."""

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

MAX_AGE_NS = 1_000_000_000


async def _get(nc: nats.NATS, seq: int) -> Any:
    body = json.dumps({"seq": seq}).encode()
    answer = json.loads((await nc.request("$JS.API.STREAM.MSG.GET.T", body, timeout=2)).data)
    if "error" in answer:
        return answer["error"]["err_code"]
    m = answer["message"]
    hdrs = base64.b64decode(m.get("hdrs", "")).decode()
    return m["subject"], m["seq"], hdrs, base64.b64decode(m.get("data", "")).decode()


async def _until_gone(nc: nats.NATS, seqs: list[int], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    for seq in seqs:
        while not isinstance(await _get(nc, seq), int):
            assert time.monotonic() < deadline, f"seq {seq} outlived max_age"
            await asyncio.sleep(0.05)


async def _create(nc: nats.NATS, storage: str) -> None:
    config = {"name": "T", "subjects": ["t.>"], "allow_msg_ttl": True, "storage": storage,
              "max_age": MAX_AGE_NS}
    created = await nc.request("$JS.API.STREAM.CREATE.T", json.dumps(config).encode(), timeout=5)
    assert "error" not in json.loads(created.data), created.data


async def _observe(nc: nats.NATS) -> dict[str, Any]:
    info = json.loads((await nc.request("$JS.API.STREAM.INFO.T", b"", timeout=2)).data)
    state = info["state"]
    out: dict[str, Any] = {k: state[k] for k in ("messages", "first_seq", "last_seq")}
    for seq in range(1, 6):
        out[f"seq {seq}"] = await _get(nc, seq)
    return out


def _scenario(storage: str) -> Any:
    async def run(url: str) -> dict[str, Any]:
        nc = await nats.connect(url, allow_reconnect=False)
        js = nc.jetstream()
        await _create(nc, storage)
        await js.publish("t.a", b"first")  # goes by max_age
        await js.publish("t.b", b"kept", headers={"Nats-TTL": "never"})
        await js.publish("t.c", b"third")  # goes by max_age, behind the kept one
        await js.publish("t.b", b"kept too", headers={"Nats-TTL": "NEVER"})
        await js.publish("t.d", b"last")
        await _until_gone(nc, [1, 3, 5])
        out = await _observe(nc)
        await nc.close()
        return out

    return run


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_ttl_never_outlives_max_age_as_on_nats_server(tmp_path: Path, storage: str) -> None:
    theirs, ours = await on_both_servers(tmp_path, _scenario(storage))
    assert theirs["messages"] == 2 and theirs["seq 2"][3] == "kept", theirs
    assert ours == theirs


async def test_ttl_never_outlives_max_age_across_a_restart(
    make_server: Any, tmp_path: Path
) -> None:
    conf = f'jetstream {{ store_dir: "{tmp_path / "js"}" }}'
    server = await make_server(conf)
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    await _create(nc, "file")
    js = nc.jetstream()
    await js.publish("t.b", b"kept", headers={"Nats-TTL": "never"})
    await js.publish("t.a", b"goes")
    await nc.close()
    await server.stop()
    server = await make_server(conf)
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    await _until_gone(nc, [2])
    assert (await _observe(nc))["seq 1"][3] == "kept"
    await nc.close()
