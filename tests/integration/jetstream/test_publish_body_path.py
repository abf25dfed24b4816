"""A server's publish path against the reference: the stream state machine's ``apply``.

A client's publishes of one read reach a durable stream as runs (``StreamRuntime.
_on_publish_run``); those whose only header is their Nats-Msg-Id skip the entry and go
to the store as the body arrived (``lone_id_publish``), the others become ``StoreMsg``
entries. Whatever the header sets, each publish must get the PubAck bytes, and the stream
the stored messages, records and dedupe window, that applying the same publishes one by one
to a ``Stream`` over its own file store gives.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jetraft.config import parse_config
from jetraft.jetstream.store import _records as records
from jetraft.jetstream.store.file import FileStore
from jetraft.jetstream.stream import PubAck, StoreMsg, Stream
from jetraft.server.server import Server

# Header lines a publisher may send: the lone-id form and its near misses, the other
# Nats-* headers the stream reads (right and wrong values), and a header of its own.
LINES = st.sampled_from([
    b"Nats-Msg-Id: m1",
    b"Nats-Msg-Id: m2",
    b"Nats-Msg-Id:m1",
    b"Nats-Msg-Id:  m2 ",
    b"Nats-Msg-Id: ",
    b"nats-msg-id: m1",
    b"Nats-Msg-Id: \xc3(",
    b"Nats-Expected-Last-Sequence: 2",
    b"Nats-Expected-Last-Sequence: x",
    b"Nats-Expected-Last-Msg-Id: m1",
    b"Nats-Expected-Stream: N",
    b"Nats-Expected-Stream: other",
    b"Nats-Expected-Last-Subject-Sequence: 1",
    b"Nats-Rollup: sub",
    b"Nats-Rollup: nope",
    b"Nats-TTL: 5s",
    b"Nats-TTL: bad",
    b"X-Other: 1",
])
BLOCKS = st.one_of(
    st.none(),  # a PUB
    st.just(b"NATS/1.0\r\n\r\n"),
    st.lists(LINES, min_size=1, max_size=3).map(
        lambda lines: b"NATS/1.0\r\n" + b"".join(line + b"\r\n" for line in lines) + b"\r\n"
    ),
)
PUBS = st.lists(
    st.tuples(st.sampled_from(["N.a", "N.b"]), BLOCKS, st.integers(0, 40)),
    min_size=1,
    max_size=14,
)
CONFIGS = st.fixed_dictionaries({
    "max_msg_size": st.sampled_from([-1, 60]),
    "discard": st.sampled_from(["old", "new"]),
    "max_msgs_per_subject": st.sampled_from([-1, 2]),
    "allow_rollup_hdrs": st.booleans(),
    "allow_msg_ttl": st.booleans(),
    "duplicate_window": st.sampled_from([0, 120 * 10**9]),
})

Pub = tuple[str, bytes | None, int]


def _frames(pubs: list[Pub]) -> bytes:
    out = []
    for i, (subject, hdr, size) in enumerate(pubs):
        data = b"%d" % i + b"x" * size
        if hdr is None:
            out.append(b"PUB %s _R.%d %d\r\n%s\r\n" % (subject.encode(), i, len(data), data))
        else:
            out.append(
                b"HPUB %s _R.%d %d %d\r\n%s%s\r\n"
                % (subject.encode(), i, len(hdr), len(hdr) + len(data), hdr, data)
            )
    return b"".join(out)


async def _read_msgs(reader: asyncio.StreamReader, n: int) -> dict[int, bytes]:
    """The payloads of ``n`` MSG frames on _R.<i>, by i (_R.create: -1)."""
    got: dict[int, bytes] = {}
    while len(got) < n:
        line = await asyncio.wait_for(reader.readline(), 10)
        if line.startswith(b"MSG "):
            _, subject, _sid, size = line.split()
            payload = await reader.readexactly(int(size) + 2)
            name = subject.split(b".")[1]
            got[-1 if name == b"create" else int(name)] = payload[:-2]
        elif not line.startswith((b"PING", b"PONG", b"INFO", b"+OK")):
            raise AssertionError(line)
    return got


class Served:
    """What the server answered and what its stream held afterwards."""

    def __init__(self, answers: dict[int, bytes], stream: Stream) -> None:
        self.answers = answers
        self.config = stream.config
        self.stored = _stored(stream)
        self.beside = stream.beside_store()
        self.state = stream.store.state()
        store = stream.store
        assert isinstance(store, FileStore)
        self.directory = store.directory


async def _through_server(store_dir: str, config: dict[str, object], pubs: list[Pub]) -> Served:
    server = Server(parse_config(
        f'listen: 127.0.0.1:-1\njetstream {{ store_dir: "{store_dir}" }}\n'
    ))
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.client_port)
        await reader.readline()  # INFO
        create = json.dumps({"name": "N", "subjects": ["N.>"], **config}).encode()
        writer.write(
            b'CONNECT {"verbose":false,"headers":true}\r\nSUB _R.* 1\r\n'
            b"PUB $JS.API.STREAM.CREATE.N _R.create %d\r\n%s\r\nPING\r\n"
            % (len(create), create)
        )
        created = await _read_msgs(reader, 1)
        assert b'"error"' not in created[-1], created
        writer.write(_frames(pubs))  # one write: the server reads them as runs
        answers = await _read_msgs(reader, len(pubs))
        writer.close()
        return Served(answers, server.jetstream.accounts["$G"].streams["N"])
    finally:
        await server.stop()


def _stored(stream: Stream) -> list[tuple[int, str, bytes | None, bytes, int]]:
    out = []
    msg = stream.store.load_next(1)
    while msg is not None:
        out.append((msg.seq, msg.subject, msg.headers, msg.data, msg.ts_ns))
        msg = stream.store.load_next(msg.seq + 1)
    return out


def _block_bytes(directory: str) -> bytes:
    msgs = Path(directory) / "msgs"
    return b"".join((msgs / name).read_bytes() for name in sorted(os.listdir(msgs)))


def _stamps(blocks: bytes) -> dict[int, int]:
    """seq -> time of every MSG record, the ones removed since included."""
    return {
        seq: ts
        for _off, kind, _len, _slen, seq, ts, _hlen in records.scan(blocks)
        if kind == records.KIND_MSG
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=CONFIGS, pubs=PUBS)
@example(
    config={"max_msg_size": 60, "discard": "old", "max_msgs_per_subject": -1,
            "allow_rollup_hdrs": False, "allow_msg_ttl": False,
            "duplicate_window": 120 * 10**9},
    pubs=[("N.a", b"NATS/1.0\r\nNats-Msg-Id: m1\r\n\r\n", 40),
          ("N.a", b"NATS/1.0\r\nNats-Msg-Id: m1\r\n\r\n", 1),
          ("N.b", b"NATS/1.0\r\nNats-Msg-Id: m2\r\n\r\n", 1),
          ("N.b", b"NATS/1.0\r\nNats-Msg-Id: m2\r\n\r\n", 0)],
)
def test_publishes_through_a_server_match_the_state_machine(
    config: dict[str, object], pubs: list[Pub]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        served = asyncio.run(_through_server(os.path.join(tmp, "srv"), config, pubs))
        blocks = _block_bytes(served.directory)
        # The reference: the same publishes applied one by one, each one stored stamped with
        # the time the server gave it (the others' times decide nothing here: the dedupe
        # window is far longer than the test).
        stamps = _stamps(blocks)
        ref_dir = os.path.join(tmp, "ref")
        ref = Stream(served.config, FileStore(ref_dir), created_ns=0)
        ts = 0
        for i, (subject, hdr, size) in enumerate(pubs):
            data = b"%d" % i + b"x" * size
            ts = stamps.get(ref.last_seq + 1, ts)
            want = ref.apply(StoreMsg(subject, f"_R.{i}", hdr, data, ts))
            assert isinstance(want, PubAck)
            assert served.answers[i] == want.body(), (i, subject, hdr)
        assert served.stored == _stored(ref)
        assert served.beside == ref.beside_store()
        assert served.state == ref.store.state()
        ref.store.close()
        assert blocks == _block_bytes(ref_dir)
