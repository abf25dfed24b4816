"""Acks that arrive together (one client write: what a consumer that acks as it reads sends)
take effect one by one as if sent alone: plain acks, acks sent as requests (each answered
once), -NAK, +TERM, +WPI, acks with headers, repeated acks and acks of what was never
delivered, while a client subscribed to every ack subject still sees each of them."""

from __future__ import annotations

from urllib.parse import urlparse

import nats
from nats.js.api import AckPolicy

from tests.integration.jetstream.consumer_support import Inbox, pull
from tests.rawclient import RawClient


async def _fetch(nc: nats.NATS, n: int) -> list[str]:
    """Pull ``n`` messages of consumer S > C; their ack subjects in stream order."""
    inbox = await Inbox(nc).start()
    await pull(nc, "S", "C", b'{"batch": %d, "expires": 2000000000}' % n, inbox)
    return [m.reply for m in await inbox.wait(n)]


async def test_a_burst_of_acks_in_every_form_takes_effect_as_one_by_one(
    nc: nats.NATS, js_url: str
) -> None:
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    for i in range(30):
        await js.publish("s.a", b"m%d" % i)
    await js.add_consumer("S", durable_name="C", ack_policy=AckPolicy.EXPLICIT, ack_wait=30)
    acks = await _fetch(nc, 30)
    url = urlparse(js_url)
    raw = await RawClient.connect(url.hostname or "", url.port or 0, headers=True)
    await raw.send(b"SUB $JS.ACK.> 1\r\nSUB _INBOX.acked.* 2\r\n")
    await raw.ping()

    def pub(seq: int, body: bytes = b"", reply: str = "") -> bytes:
        tail = f" {reply}" if reply else ""
        return f"PUB {acks[seq - 1]}{tail} {len(body)}\r\n".encode() + body + b"\r\n"

    hdr = b"NATS/1.0\r\nX: y\r\n\r\n"
    never = acks[0].replace(".1.1.1.", ".1.99.99.", 1)  # a delivery that never happened
    assert never != acks[0]
    frames = [pub(s) for s in range(1, 11)]
    frames += [
        pub(11, reply="_INBOX.acked.11"),
        pub(12, b"-NAK"),
        pub(13, b"+TERM"),
        pub(14, b"+WPI"),
        f"HPUB {acks[14]} {len(hdr)} {len(hdr) + 4}\r\n".encode() + hdr + b"+ACK\r\n",
        pub(16, b"+ACK", reply="_INBOX.acked.16"),
    ]
    frames += [pub(s) for s in range(17, 31) if s != 20]
    frames += [pub(1), f"PUB {never} 0\r\n\r\n".encode(), pub(17, reply="_INBOX.acked.17b")]
    await raw.send(b"".join(frames))
    # Every ack reaches the client's wide subscription, in order, with its own subject, and
    # the acks sent as requests are answered, each once (the repeated ack of a message
    # already acked too, as nats-server does).
    seen = await raw.read_frames(len(frames) + 3)
    subjects = [f.subject for f in seen if f.sid == "1"]
    assert subjects == [*acks[:19], *acks[20:], acks[0], never, acks[16]]
    answers = [f for f in seen if f.sid == "2"]
    assert sorted(f.subject for f in answers) == [
        "_INBOX.acked.11", "_INBOX.acked.16", "_INBOX.acked.17b"
    ]
    assert all(f.payload == b"" for f in answers)
    await raw.ping()  # nothing more: no second answer
    info = await js.consumer_info("S", "C")
    # 1..11 acked; 12 (nak: due again), 14 (in progress) and 20 (never acked) are pending.
    assert info.ack_floor.stream_seq == 11
    assert info.num_ack_pending == 3
    # The nak'd message goes out again first; the terminated one never does.
    redo = await _fetch(nc, 1)
    assert redo[0].split(".")[5] == "12" and redo[0].split(".")[4] == "2"
    await raw.close()
