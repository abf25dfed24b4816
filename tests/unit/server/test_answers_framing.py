"""PubAcks to one inbox subscription are framed by its connection in one call
(``ClientConnection.deliver_answers``): the bytes it writes, where it flushes, and its
counters are those of delivering each answer alone (``route_message``)."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.server.core import client_conn
from jetraft.server.core.accounts import Account, Subscription
from jetraft.server.core.client_conn import ClientConnection
from jetraft.server.core.router import Router


class Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def writelines(self, data: list[bytes]) -> None:
        self.writes.append(b"".join(data))

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


def _setup() -> tuple[Router, Account, list[ClientConnection], list[Any]]:
    router = Router(random.Random(1))
    acct = Account("A")
    soon: list[Any] = []
    config = SimpleNamespace(
        max_control_line=4096,
        max_payload=1 << 20,
        max_pending=1 << 30,
        max_subscriptions=0,
        trace=False,
    )
    host = SimpleNamespace(
        config=config,
        auth=SimpleNamespace(global_account=lambda: acct, nonce_required=False),
        loop=SimpleNamespace(call_soon=lambda f, *a: soon.append(f)),
        router=router,
        client_opened=lambda conn: None,
    )
    conns = []
    for cid in range(2):
        conn = ClientConnection(host, cid)  # type: ignore[arg-type]
        conn.connection_made(Transport())  # type: ignore[arg-type]
        conns.append(conn)
    inbox, limited = conns
    router.add_subscription(acct, Subscription(inbox, "_INBOX.a.*", None, "1"))
    router.add_subscription(acct, Subscription(inbox, "_INBOX.b.*", None, "2"))
    router.add_subscription(acct, Subscription(inbox, "_INBOX.both.*", None, "3"))
    router.add_subscription(acct, Subscription(limited, "_INBOX.both.*", None, "4"))
    lim = Subscription(limited, "_INBOX.lim.*", None, "5")
    lim.max_msgs = 3
    router.add_subscription(acct, lim)
    return router, acct, conns, soon


def _written(conns: list[ClientConnection]) -> list[tuple[list[bytes], bytes, int, int]]:
    return [
        (
            list(c.transport.writes),  # type: ignore[union-attr]
            b"".join(c._out),
            c.out_msgs,
            c.out_bytes,
        )
        for c in conns
    ]


_ANSWERS = st.lists(
    st.tuples(
        st.sampled_from(["_INBOX.a.", "_INBOX.b.", "_INBOX.both.", "_INBOX.lim.", "_INBOX.x."]),
        st.integers(1, 30),
        st.sampled_from([5, 30, 40_000]),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(_ANSWERS)
def test_answers_write_what_delivering_each_writes(raw: list[tuple[str, int, int]]) -> None:
    answers = [(f"{stem}{n}", b"%d" % n * size) for stem, n, size in raw]
    router, acct, conns, _ = _setup()
    router.route_answers(acct, answers)
    ref_router, ref_acct, ref_conns, _ = _setup()
    for subject, data in answers:
        ref_router.route_message(None, ref_acct, subject, None, None, data)
    assert _written(conns) == _written(ref_conns)
    assert acct.stats == ref_acct.stats


def test_a_run_to_one_inbox_is_one_piece() -> None:
    router, acct, conns, soon = _setup()
    answers = [(f"_INBOX.a.{n}", b'{"stream":"S","seq":%d}' % n) for n in range(1, 101)]
    router.route_answers(acct, answers)
    inbox = conns[0]
    assert len(inbox._out) == 1
    assert inbox._out[0] == b"".join(
        b"MSG %s 1 %d\r\n%s\r\n" % (s.encode(), len(d), d) for s, d in answers
    )
    assert soon == [inbox.flush]  # one flush scheduled, as one by one


def test_a_run_past_the_flush_threshold_flushes_where_each_would(monkeypatch: Any) -> None:
    monkeypatch.setattr(client_conn, "_FLUSH_BYTES", 100)
    answers = [(f"_INBOX.a.{n}", b"x" * 30) for n in range(1, 12)]
    router, acct, conns, _ = _setup()
    router.route_answers(acct, answers)
    ref_router, ref_acct, ref_conns, _ = _setup()
    for subject, data in answers:
        ref_router.route_message(None, ref_acct, subject, None, None, data)
    assert _written(conns) == _written(ref_conns)
    assert len(conns[0].transport.writes) == 2  # type: ignore[union-attr]


# --- DIRECT.GET slices to one inbox (``ClientConnection.deliver_replies``) -------------------

_HDR = b"NATS/1.0\r\nNats-Stream: S\r\nNats-Sequence: 7\r\n\r\n"
_REPLIES = st.lists(
    st.tuples(st.booleans(), st.sampled_from([0, 5, 130, 40_000])), min_size=1, max_size=30
)


def _reference_replies(
    router: Router, acct: Account, subject: str, items: list[tuple[bytes | None, bytes]]
) -> int:
    """``route_replies`` as delivering each message alone, stopping at one nobody took."""
    got = 0
    for hdr, data in items:
        got = router.route_message(None, acct, subject, None, hdr, data)
        if not got:
            break
    return got


@settings(max_examples=200, deadline=None)
@given(
    raw=_REPLIES,
    stem=st.sampled_from(["_INBOX.a.", "_INBOX.both.", "_INBOX.lim.", "_INBOX.x."]),
    headers=st.booleans(),
    flush_bytes=st.sampled_from([100, 256 * 1024]),
)
def test_replies_write_what_delivering_each_writes(
    raw: list[tuple[bool, int]], stem: str, headers: bool, flush_bytes: int
) -> None:
    """A slice of a direct-get batch to one subject: the same frames, flushes, counters and
    answer as delivering each message alone; to one plain subscription (``_INBOX.a``) it
    goes in one call, to others (two receivers, a message limit, nobody) one by one; a
    client that did not announce headers gets the payloads alone either way."""
    items = [(_HDR if h else None, b"%d" % i * size) for i, (h, size) in enumerate(raw)]
    saved = client_conn._FLUSH_BYTES
    client_conn._FLUSH_BYTES = flush_bytes
    try:
        router, acct, conns, soon = _setup()
        ref_router, ref_acct, ref_conns, ref_soon = _setup()
        for c in (*conns, *ref_conns):
            c.headers = headers
        got = router.route_replies(acct, f"{stem}1", items)
        want = _reference_replies(ref_router, ref_acct, f"{stem}1", items)
    finally:
        client_conn._FLUSH_BYTES = saved
    assert got == want
    assert _written(conns) == _written(ref_conns)
    assert acct.stats == ref_acct.stats
    assert len(soon) == len(ref_soon)


def test_a_slice_to_a_closed_inbox_stops_at_once() -> None:
    router, acct, conns, _ = _setup()
    ref_router, ref_acct, ref_conns, _ = _setup()
    for c in (conns[0], ref_conns[0]):
        c.closed = True
    items: list[tuple[bytes | None, bytes]] = [(_HDR, b"a"), (None, b"b")]
    assert router.route_replies(acct, "_INBOX.a.1", items) == 0
    assert _reference_replies(ref_router, ref_acct, "_INBOX.a.1", items) == 0
    assert acct.stats == ref_acct.stats and acct.stats.in_msgs == 1
