"""``$SYS.REQ.USER.INFO`` (nats.js's ``nc.context()``), side by side with nats-server: who
the requester is, its account and permissions, from any account."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.integration.jetstream.consumer_support import nats_server_binary, on_both_configs

pytestmark = pytest.mark.skipif(
    not Path(nats_server_binary()).exists(), reason="nats-server binary not installed"
)

CONF = """
listen: 127.0.0.1:{port}
accounts {{
  S {{
    users: [{{
      user: s, password: s,
      permissions: {{
        publish: {{allow: ["$SYS.REQ.USER.INFO", "q.>"], deny: ["q.secret"]}},
        subscribe: ["q.>", "_INBOX.>", "work workers"],
        allow_responses: {{max: 2, expires: "1m"}}
      }}
    }}]
  }}
  A {{ users: [{{user: a, password: a}}] }}
}}
"""


async def _scenario(url: str) -> list[Any]:
    out = []
    for user in ("s", "a"):
        nc = await nats.connect(url, user=user, password=user, allow_reconnect=False)
        try:
            msg = await nc.request("$SYS.REQ.USER.INFO", b"", timeout=5)
            body = json.loads(msg.data)
            assert body["server"]["id"]
            # nats-server lists the subjects of a permission in the order of its sublist's
            # walk, which varies: compared as sets.
            for side in body["data"].get("permissions", {}).values():
                for key in ("allow", "deny"):
                    if key in side:
                        side[key] = sorted(side[key])
            out.append(body["data"])
        finally:
            await nc.close()
    return out


async def test_user_info_as_nats_server(tmp_path: Path) -> None:
    theirs, ours = await on_both_configs(tmp_path, CONF, _scenario)
    assert ours == theirs
    assert theirs[0]["user"] == "s" and theirs[0]["account"] == "S"
