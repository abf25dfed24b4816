"""How the server's config shapes JetStream: which accounts get it, the domain API prefix,
strict request parsing, and account limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest

from tests.integration.jetstream.js_helpers import VS_NATS, api, err

pytestmark = pytest.mark.skipif(VS_NATS, reason="configures jetraft servers")


async def _connect(server: Any, **kw: Any) -> nats.NATS:
    return await nats.connect(f"nats://127.0.0.1:{server.client_port}", allow_reconnect=False, **kw)


async def test_only_accounts_with_jetstream_get_it(make_server: Any, tmp_path: Path) -> None:
    server = await make_server(
        """
        jetstream { store_dir: "%s" }
        accounts {
          JS { jetstream: enabled, users: [{user: js, password: js}] }
          PLAIN { users: [{user: plain, password: plain}] }
        }
        """
        % (tmp_path / "js")
    )
    nc = await _connect(server, user="js", password="js")
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s"])
    assert (await js.publish("s", b"x")).seq == 1
    await nc.close()
    other = await _connect(server, user="plain", password="plain")
    resp = await api(other, "INFO")
    assert resp["type"] == "io.nats.jetstream.api.v1.account_info_response"
    assert err(resp) == (503, 10039, "JetStream not enabled for account")
    resp = await api(other, "STREAM.CREATE.X", {"name": "X"})
    assert err(resp)[1] == 10039
    with pytest.raises(nats.errors.NoRespondersError):
        await other.request("$JS.API.DIRECT.GET.X", b'{"seq": 1}', timeout=2)
    with pytest.raises(nats.js.errors.ServiceUnavailableError):
        await other.jetstream().account_info()
    await other.close()
    # Streams live per account on disk.
    assert (tmp_path / "js" / "jetstream" / "JS" / "streams" / "S" / "meta.json").is_file()


async def test_domain_prefix(make_server: Any, tmp_path: Path) -> None:
    server = await make_server('jetstream { store_dir: "%s", domain: "hub" }' % (tmp_path / "js"))
    nc = await _connect(server)
    resp = await api(nc, "INFO")
    assert resp["domain"] == "hub"
    msg = await nc.request("$JS.hub.API.STREAM.CREATE.D", b'{"name": "D"}', timeout=2)
    assert json.loads(msg.data)["config"]["name"] == "D"
    js = nc.jetstream(domain="hub")
    ack = await js.publish("D", b"x")
    assert (ack.stream, ack.seq, ack.domain) == ("D", 1, "hub")
    await nc.close()


async def test_strict_false_ignores_unknown_fields(make_server: Any, tmp_path: Path) -> None:
    server = await make_server('jetstream { store_dir: "%s", strict: false }' % (tmp_path / "js"))
    nc = await _connect(server)
    resp = await api(nc, "STREAM.CREATE.L", {"name": "L", "from_the_future": True})
    assert resp["config"]["name"] == "L"
    await nc.close()


async def test_account_limits(make_server: Any, tmp_path: Path) -> None:
    server = await make_server(
        """
        jetstream { store_dir: "%s" }
        accounts {
          LIM {
            jetstream { max_streams: 1, max_bytes_required: true, max_file_store: 1M,
                        max_mem: 1M }
            users: [{user: u, password: p}]
          }
        }
        """
        % (tmp_path / "js")
    )
    nc = await _connect(server, user="u", password="p")
    resp = await api(nc, "STREAM.CREATE.A", {"name": "A"})
    assert err(resp) == (400, 10113, "account requires a stream config to have max bytes set")
    resp = await api(nc, "STREAM.CREATE.A", {"name": "A", "max_bytes": 1000})
    assert "error" not in resp
    resp = await api(nc, "STREAM.CREATE.B", {"name": "B", "max_bytes": 1000})
    assert err(resp) == (400, 10027, "maximum number of streams reached")
    info = await api(nc, "INFO")
    assert info["limits"]["max_streams"] == 1
    await nc.close()
