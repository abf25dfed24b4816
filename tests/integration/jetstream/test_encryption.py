"""Encryption at rest, ``jetstream { encryption_key, cipher }`` as in nats-server: no plaintext
of messages, subjects, stream config or consumer state on disk; everything comes back after a
restart; a wrong or missing key makes the stream offline with a clear reason and touches
nothing; tampering is detected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy

from tests.integration.jetstream.js_helpers import VS_NATS, api, err

pytestmark = pytest.mark.skipif(VS_NATS, reason="reads jetraft's files")

MARKERS = (b"cleartext-payload-marker", b"cleartext.subject.marker", b"clear-description-marker")


def conf(store: Path, key: str | None, cipher: str = "") -> str:
    if key is None:
        return f'jetstream {{ store_dir: "{store}" }}'
    extra = f", cipher: {cipher}" if cipher else ""
    return f'jetstream {{ store_dir: "{store}", encryption_key: "{key}"{extra} }}'


def files(store: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in store.rglob("*") if p.is_file() and p.name != "LOCK"}


async def fill(server: Any) -> None:
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream()
    await js.add_stream(
        name="SECRET",
        subjects=["cleartext.subject.>"],
        description=MARKERS[2].decode(),
    )
    for i in range(20):
        await js.publish("cleartext.subject.marker", MARKERS[0] + b" %d" % i)
    await js.add_consumer("SECRET", durable_name="READER", ack_policy=AckPolicy.EXPLICIT)
    sub = await js.pull_subscribe_bind("READER", stream="SECRET")
    for m in await sub.fetch(5, timeout=2):
        await m.ack_sync()
    await nc.close()


@pytest.mark.parametrize("cipher", ["chachapoly", "aes", ""])
async def test_nothing_in_clear_on_disk_and_everything_back_after_restart(
    make_server: Any, tmp_path: Path, cipher: str
) -> None:
    store = tmp_path / "js"
    server = await make_server(conf(store, "correct horse battery staple", cipher))
    await fill(server)
    await server.stop()
    on_disk = files(store)
    assert any(p.name == "key" for p in on_disk)
    for path, blob in on_disk.items():
        for marker in MARKERS:
            assert marker not in blob, f"{marker!r} in clear in {path}"

    server = await make_server(conf(store, "correct horse battery staple", cipher))
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    js = nc.jetstream()
    info = await js.stream_info("SECRET")
    assert info.config.description == MARKERS[2].decode()
    assert info.state.messages == 20
    msg = await js.get_msg("SECRET", 7)
    assert msg.data == MARKERS[0] + b" 6" and msg.subject == "cleartext.subject.marker"
    cinfo = await js.consumer_info("SECRET", "READER")
    assert cinfo.ack_floor.stream_seq == 5
    await nc.close()


async def test_plain_files_do_contain_the_markers(make_server: Any, tmp_path: Path) -> None:
    """The check above can fail: without a key the same markers are on disk."""
    store = tmp_path / "js"
    server = await make_server(conf(store, None))
    await fill(server)
    await server.stop()
    blob = b"".join(files(store).values())
    assert all(marker in blob for marker in MARKERS)


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("the wrong key", "wrong encryption key"),
        (None, "no jetstream encryption_key is configured"),
    ],
)
async def test_a_wrong_or_missing_key_makes_the_stream_offline_and_touches_nothing(
    make_server: Any, tmp_path: Path, key: str | None, reason: str
) -> None:
    store = tmp_path / "js"
    server = await make_server(conf(store, "the right key"))
    await fill(server)
    await server.stop()
    before = files(store)

    server = await make_server(conf(store, key))
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    offline = server.jetstream.jsz({"accounts": "1"})["account_details"][0]["offline_streams"]
    assert reason in offline["SECRET"]
    resp = await api(
        nc, "STREAM.CREATE.SECRET", {"name": "SECRET", "subjects": ["cleartext.subject.>"]}
    )
    code, err_code, text = err(resp)
    assert (code, err_code) == (500, 10194) and reason in text
    await nc.close()
    await server.stop()
    assert files(store) == before

    server = await make_server(conf(store, "the right key"))  # the right key: all back
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    assert (await nc.jetstream().stream_info("SECRET")).state.messages == 20
    await nc.close()


async def test_a_key_set_on_clear_streams_keeps_them_offline(
    make_server: Any, tmp_path: Path
) -> None:
    store = tmp_path / "js"
    server = await make_server(conf(store, None))
    await fill(server)
    await server.stop()
    server = await make_server(conf(store, "new key"))
    offline = server.jetstream.jsz({"accounts": "1"})["account_details"][0]["offline_streams"]
    assert "stored unencrypted" in offline["SECRET"]


async def test_tampered_meta_and_consumer_state_are_detected(
    make_server: Any, tmp_path: Path
) -> None:
    store = tmp_path / "js"
    server = await make_server(conf(store, "k"))
    await fill(server)
    await server.stop()
    sdir = store / "jetstream" / "$G" / "streams" / "SECRET"
    state = sdir / "obs" / "READER" / "consumer.dat"
    # A state file copied from another consumer of the stream does not open for this one.
    other = sdir / "obs" / "OTHER"
    other.mkdir()
    (other / "consumer.dat").write_bytes(state.read_bytes())
    server = await make_server(conf(store, "k"))
    nc = await nats.connect(f"nats://127.0.0.1:{server.client_port}")
    jsz = server.jetstream.jsz({"accounts": "1"})["account_details"][0]
    assert "does not open" in jsz["offline_consumers"]["SECRET"]["OTHER"]
    assert (await nc.jetstream().consumer_info("SECRET", "READER")).ack_floor.stream_seq == 5
    await nc.close()
    await server.stop()

    meta = sdir / "meta.json"
    raw = bytearray(meta.read_bytes())
    raw[-3] ^= 0x01
    meta.write_bytes(bytes(raw))
    server = await make_server(conf(store, "k"))
    offline = server.jetstream.jsz({"accounts": "1"})["account_details"][0]["offline_streams"]
    assert "does not open" in offline["SECRET"]
