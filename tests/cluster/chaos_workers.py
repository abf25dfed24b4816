"""More clients for the fault schedule of test_chaos.py, each with its own ledger of what a
reply confirmed and its own check afterwards:

* ``KvWriters``: two clients update one key of an R3 KV bucket by compare-and-set. Every
  confirmed update is in the key's history at the revision its reply named, right after
  the revision it was made against; no two confirmed updates share a revision; a value in
  the history that no reply confirmed is one whose request got no definite answer.
* ``Deleter``: publishes to its own R3 stream, deletes messages by sequence and purges
  subjects with a filter. What a reply confirmed deleted or purged is gone on every
  replica, and everything else that was acknowledged is still there.
* ``ConsumerChurn``: creates and deletes consumers while the faults happen. A confirmed
  create exists afterwards (in the consumer names every server answers, and as a RAFT
  group on its replicas); a confirmed delete is gone everywhere. It also updates the
  deleter's stream (its description): every replica ends with the last confirmed one
  (or one whose answer was lost).

The workers pace themselves on the main publisher's progress (a condition, not a clock):
one operation per few acknowledged messages, so they run alongside faults without
crowding the machine. Each replica is checked by moving the stream's leadership to it in
turn and reading through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import nats
import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from tests.cluster.harness import Cluster, wait_until

if TYPE_CHECKING:
    from tests.cluster.test_chaos import Clients, Ledger

KV_BUCKET = "CHAOSKV"
KV_STREAM = f"KV_{KV_BUCKET}"
KV_KEY = "k"
DEL_STREAM = "CHAOSDEL"
DEL_SUBJECTS = 5
CHURN_STREAM = "CHAOS"  # the consumers come and go on the main stream
NO_ANSWER = (nats.errors.TimeoutError, nats.errors.NoRespondersError,
             nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError,
             nats.js.errors.NoStreamResponseError, nats.js.errors.ServiceUnavailableError,
             TimeoutError)
WRONG_LAST = (10071, 10164)
NO_MESSAGE = (10037, 10043, 10057)  # no message found, sequence not found, delete failed
NO_CONSUMER = 10014
UNAVAILABLE = 10008


async def create_assets(js: nats.js.JetStreamContext) -> None:
    """The KV bucket's stream (as nats-py makes one, but keeping every revision: the check
    reads the whole history) and the deleter's stream."""
    await js.add_stream(nats.js.api.StreamConfig(
        name=KV_STREAM, subjects=[f"$KV.{KV_BUCKET}.>"], allow_direct=True,
        allow_rollup_hdrs=True, deny_delete=True, discard=nats.js.api.DiscardPolicy.NEW,
        duplicate_window=120.0, max_msgs_per_subject=1_000_000, num_replicas=3))
    await js.add_stream(name=DEL_STREAM, subjects=["del.>"], num_replicas=3,
                        duplicate_window=600.0)


async def _request(nc: nats.NATS, subject: str, body: dict[str, Any] | None = None,
                   timeout: float = 1.0) -> dict[str, Any]:
    """A JS API request; the decoded reply (an ``error`` in it is an answer too)."""
    msg = await asyncio.wait_for(
        nc.request(subject, json.dumps(body or {}).encode(), timeout=timeout), timeout + 2)
    if msg.headers and msg.headers.get("Status") == "503":
        raise nats.errors.NoRespondersError
    got: dict[str, Any] = json.loads(msg.data)
    if _error_code(got) == UNAVAILABLE:  # e.g. not committed in time: it may still be
        raise nats.js.errors.ServiceUnavailableError(description=str(got))
    return got


def _error_code(reply: dict[str, Any]) -> int:
    return int(reply.get("error", {}).get("err_code", 0))


async def _paced(ledger: Ledger, every: int) -> bool:
    """Wait for ``every`` more acknowledged messages of the main publisher (False when the
    schedule is over)."""
    want = len(ledger.acked) + every
    while len(ledger.acked) < want:
        if ledger.done:
            return False
        await asyncio.sleep(0.05)
    return not ledger.done


# --- KV compare-and-set --------------------------------------------------------------------


@dataclass
class KvClientLedger:
    confirmed: list[tuple[int, int, bytes]] = field(default_factory=list)  # (last, rev, value)
    in_doubt: set[bytes] = field(default_factory=set)  # values sent without a definite answer
    rejected: int = 0


@dataclass
class KvWriters:
    clients: dict[str, KvClientLedger] = field(default_factory=dict)

    async def run(self, name: str, clients: Clients, ledger: Ledger) -> None:
        mine = self.clients.setdefault(name, KvClientLedger())
        n = 0
        while await _paced(ledger, 2):
            nc = await clients.current()
            kv = KeyValue(name=KV_BUCKET, stream=KV_STREAM, pre=f"$KV.{KV_BUCKET}.",
                          js=nc.jetstream(timeout=1.0), direct=True)
            try:
                last = (await asyncio.wait_for(kv.get(KV_KEY), 3.0)).revision or 0
            except (*NO_ANSWER, nats.js.errors.APIError) as exc:
                clients.note(name, exc)
                clients.rotate()
                continue
            value = f"{name}-{n}".encode()
            n += 1
            try:
                rev = await asyncio.wait_for(kv.update(KV_KEY, value, last=last), 3.0)
            except nats.js.errors.KeyWrongLastSequenceError:
                mine.rejected += 1  # the other client (or a stale read) got there first
                continue
            except (*NO_ANSWER, nats.js.errors.APIError) as exc:
                if isinstance(exc, nats.js.errors.APIError) and not isinstance(exc, NO_ANSWER):
                    raise
                mine.in_doubt.add(value)
                clients.note(name, exc)
                clients.rotate()
                continue
            mine.confirmed.append((last, rev, value))

    async def check(self, cl: Cluster, nc: nats.NATS) -> str:
        history = await _on_each_replica(cl, nc, KV_STREAM, _read_all)
        confirmed = [c for led in self.clients.values() for c in led.confirmed]
        revs = [rev for _, rev, _ in confirmed]
        assert len(revs) == len(set(revs)), "two confirmed updates share a revision"
        for last, rev, value in confirmed:
            assert history.get(rev) == value, f"confirmed revision {rev} holds {history.get(rev)!r}"
            before = max((r for r in history if r < rev), default=0)
            assert before == last, (f"revision {rev} was confirmed as made on {last}, but "
                                    f"revision {before} came in between")
        doubt = set().union(*(led.in_doubt for led in self.clients.values()))
        confirmed_values = {value for _, _, value in confirmed}
        seeded = {b"seed"}
        unconfirmed = set(history.values()) - confirmed_values - seeded
        assert unconfirmed <= doubt, f"updates nobody sent or was refused: {unconfirmed - doubt}"
        assert len(history) == len(set(history.values())), "an update was applied twice"
        return (f"kv: {len(confirmed)} confirmed, {len(unconfirmed)} applied in doubt, "
                f"{sum(led.rejected for led in self.clients.values())} refused")


# --- message deletes and filtered purges ---------------------------------------------------


@dataclass
class Deleter:
    rng: random.Random
    acked: dict[int, int] = field(default_factory=dict)  # stream sequence -> message number
    deleted: set[int] = field(default_factory=set)  # sequences a reply confirmed deleted
    purged: set[int] = field(default_factory=set)  # sequences a confirmed purge covered
    in_doubt: set[int] = field(default_factory=set)  # gone, but no reply said so

    async def run(self, clients: Clients, ledger: Ledger) -> None:
        i = 0
        while await _paced(ledger, 1):
            seq = await self._publish(clients, i, ledger)
            if seq is None:
                return
            self.acked[seq] = i
            i += 1
            if i % 3 == 0:
                await self._delete_one(clients, ledger)
            if i % 12 == 0:
                await self._purge(clients, ledger, f"del.{self.rng.randrange(DEL_SUBJECTS)}")

    async def _retry(self, clients: Clients, ledger: Ledger,
                     attempt: Callable[[nats.NATS], Awaitable[Any]]) -> Any:
        for _ in range(600):
            if ledger.done:
                return None
            nc = await clients.current()
            try:
                return await attempt(nc)
            except NO_ANSWER as exc:
                clients.note("deleter", exc)
                clients.rotate()
                await asyncio.sleep(0.05)
        raise AssertionError("the deleter's request was never answered")

    async def _publish(self, clients: Clients, i: int, ledger: Ledger) -> int | None:
        async def attempt(nc: nats.NATS) -> int:
            ack = await asyncio.wait_for(nc.jetstream().publish(
                f"del.{i % DEL_SUBJECTS}", b"del %d" % i, timeout=1.0,
                headers={"Nats-Msg-Id": f"d{i}"}), 3.0)
            return ack.seq

        seq: int | None = await self._retry(clients, ledger, attempt)
        return seq

    def _subject(self, seq: int) -> str:
        return f"del.{self.acked[seq] % DEL_SUBJECTS}"

    def present(self) -> set[int]:
        return set(self.acked) - self.deleted - self.purged - self.in_doubt

    async def _delete_one(self, clients: Clients, ledger: Ledger) -> None:
        candidates = sorted(self.present())
        if not candidates:
            return
        seq = self.rng.choice(candidates)
        tries = 0

        async def attempt(nc: nats.NATS) -> dict[str, Any]:
            nonlocal tries
            tries += 1
            return await _request(nc, f"$JS.API.STREAM.MSG.DELETE.{DEL_STREAM}", {"seq": seq})

        reply = await self._retry(clients, ledger, attempt)
        if reply is None:
            self.in_doubt.add(seq)
        elif reply.get("success"):
            self.deleted.add(seq)
        elif (_error_code(reply) in NO_MESSAGE and "found" in str(reply["error"])
              and tries > 1):
            self.in_doubt.add(seq)  # an earlier attempt without an answer deleted it
        else:
            raise AssertionError(f"deleting acknowledged sequence {seq} (attempt {tries}): {reply}")

    async def _purge(self, clients: Clients, ledger: Ledger, subject: str) -> None:
        # Bounded by sequence too: a request held back by a partition and delivered after
        # the retry was answered must not take messages acknowledged since.
        upto = max(self.acked) + 1
        covered = {s for s in self.acked if self._subject(s) == subject and s < upto}
        body = {"filter": subject, "seq": upto}

        async def attempt(nc: nats.NATS) -> dict[str, Any]:
            return await _request(nc, f"$JS.API.STREAM.PURGE.{DEL_STREAM}", body)

        reply = await self._retry(clients, ledger, attempt)
        if reply is None:
            self.in_doubt |= covered - self.deleted - self.purged
        elif reply.get("success"):
            self.purged |= covered - self.deleted
        else:
            raise AssertionError(f"purging {subject}: {reply}")

    async def check(self, cl: Cluster, nc: nats.NATS) -> str:
        held = await _on_each_replica(cl, nc, DEL_STREAM, _read_all)
        gone = (self.deleted | self.purged) & set(held)
        assert not gone, f"confirmed deleted or purged sequences came back: {sorted(gone)[:20]}"
        missing = self.present() - set(held)
        assert not missing, f"acknowledged messages lost: {sorted(missing)[:20]}"
        for seq, data in held.items():
            assert seq in self.acked and data == b"del %d" % self.acked[seq], (seq, data)
        return (f"deletes: {len(self.acked)} acked, {len(self.deleted)} deleted, "
                f"{len(self.purged)} purged, {len(self.in_doubt)} in doubt")


# --- consumers created and deleted ---------------------------------------------------------


@dataclass
class ConsumerChurn:
    rng: random.Random
    created: dict[str, str] = field(default_factory=dict)  # confirmed: name -> raft group
    deleted: set[str] = field(default_factory=set)  # confirmed deleted
    in_doubt: set[str] = field(default_factory=set)  # asked for, no definite answer
    # Updates of the deleter's stream (its description): the confirmed ones in order, and
    # those sent without a definite answer.
    described: list[str] = field(default_factory=list)
    described_in_doubt: set[str] = field(default_factory=set)

    async def run(self, clients: Clients, ledger: Ledger) -> None:
        n = 0
        while await _paced(ledger, 8):
            live = sorted(set(self.created) - self.deleted - self.in_doubt)
            if self.rng.random() < 0.25:
                await self._update_stream(clients, ledger, f"update {n}")
                n += 1
            elif len(live) >= 3 or (live and self.rng.random() < 0.4):
                await self._delete(clients, ledger, self.rng.choice(live))
            else:
                await self._create(clients, ledger, f"churn{n}")
                n += 1

    async def _answer(self, clients: Clients, ledger: Ledger, subject: str,
                      body: dict[str, Any]) -> tuple[dict[str, Any] | None, int]:
        """The first definite answer (None if the schedule ended first) and the attempts."""
        for tries in range(1, 600):
            if ledger.done:
                return None, tries
            nc = await clients.current()
            try:
                reply = await _request(nc, subject, body, timeout=2.0)
            except NO_ANSWER as exc:
                clients.note("churn", exc)
                clients.rotate()
                await asyncio.sleep(0.05)
                continue
            if _error_code(reply) in (10008, 10118):  # unavailable, no meta leader: retry
                clients.rotate()
                await asyncio.sleep(0.05)
                continue
            return reply, tries
        raise AssertionError(f"{subject} was never answered")

    async def _create(self, clients: Clients, ledger: Ledger, name: str) -> None:
        body = {"stream_name": CHURN_STREAM, "config": {
            "durable_name": name, "ack_policy": "explicit", "filter_subject": "chaos.churn"}}
        subject = f"$JS.API.CONSUMER.DURABLE.CREATE.{CHURN_STREAM}.{name}"
        reply, _ = await self._answer(clients, ledger, subject, body)
        if reply is None or "error" in reply:
            # A create retried after a lost answer is answered "exists" only if the config
            # differs; the same config is answered with its info, so an error is a refusal
            # we did not expect, or the schedule ended: keep it as in doubt.
            self.in_doubt.add(name)
            if reply is not None:
                raise AssertionError(f"creating consumer {name}: {reply}")
            return
        self.created[name] = reply.get("cluster", {}).get("raft_group", "")

    async def _delete(self, clients: Clients, ledger: Ledger, name: str) -> None:
        subject = f"$JS.API.CONSUMER.DELETE.{CHURN_STREAM}.{name}"
        reply, tries = await self._answer(clients, ledger, subject, {})
        if reply is not None and reply.get("success"):
            self.deleted.add(name)
        elif reply is not None and _error_code(reply) == NO_CONSUMER and tries > 1:
            self.in_doubt.add(name)  # an earlier attempt without an answer deleted it
        elif reply is None:
            self.in_doubt.add(name)
        else:
            raise AssertionError(f"deleting consumer {name}: {reply}")

    async def _update_stream(self, clients: Clients, ledger: Ledger, description: str) -> None:
        info, _ = await self._answer(clients, ledger, f"$JS.API.STREAM.INFO.{DEL_STREAM}", {})
        if info is None or "error" in info:
            return
        config = {**info["config"], "description": description}
        subject = f"$JS.API.STREAM.UPDATE.{DEL_STREAM}"
        self.described_in_doubt.add(description)  # until an answer says otherwise
        reply, _ = await self._answer(clients, ledger, subject, config)
        if reply is None:
            return
        if "error" in reply:
            raise AssertionError(f"updating {DEL_STREAM}: {reply}")
        assert reply["config"].get("description") == description, reply
        self.described.append(description)
        # (An update without an answer stays in doubt for good: held back by a partition,
        # it may arrive after later ones.)

    async def check_stream(self, cl: Cluster) -> None:
        """Every replica of the deleter's stream holds the config of the last confirmed
        update (or of one whose answer was lost)."""
        allowed = set(self.described[-1:]) | self.described_in_doubt
        if not self.described:
            allowed.add("")

        def agreed() -> bool:
            seen = {}
            for node in cl.nodes:
                for acc in node.http("/jsz?accounts=1&streams=1").get("account_details", []):
                    for sd in acc.get("stream_detail", []):
                        if sd["name"] == DEL_STREAM:
                            seen[node.name] = sd["config"].get("description", "")
            return len(seen) == 3 and len(set(seen.values())) == 1 and seen.popitem()[1] in allowed

        await wait_until(agreed, 60, f"every replica of {DEL_STREAM} to hold one of {allowed}")

    async def check(self, cl: Cluster) -> str:
        await self.check_stream(cl)
        live = {name: group for name, group in self.created.items()
                if name not in self.deleted and name not in self.in_doubt}
        gone = {self.created[name] for name in self.deleted}

        listed_deleted: list[str] = []  # a confirmed delete listed again fails at once

        async def agreed() -> bool:
            for node in cl.nodes:
                nc = await cl.connect(node)
                try:
                    reply = await _request(nc, f"$JS.API.CONSUMER.NAMES.{CHURN_STREAM}",
                                           timeout=2.0)
                finally:
                    await nc.close()
                names = set(reply.get("consumers") or [])
                if names & self.deleted:
                    listed_deleted.append(f"{node.name} lists {sorted(names & self.deleted)}")
                    return True
                if not set(live) <= names:
                    return False
            groups: dict[str, int] = {}
            for node in cl.nodes:
                for account in node.http("/raftz").values():
                    for group in account:
                        groups[group] = groups.get(group, 0) + 1
            # A server stops the group of a deleted consumer when it applies the delete,
            # which may come after the answer: gone eventually, on every server.
            return not gone & set(groups) and all(groups.get(g, 0) == 3 for g in live.values())

        await wait_until(agreed, 60, "every confirmed consumer on every server, and no other")
        assert not listed_deleted, listed_deleted
        return (f"consumers: {len(self.created)} created, {len(self.deleted)} deleted, "
                f"{len(self.in_doubt)} in doubt; {len(self.described)} stream updates")


# --- reading each replica ------------------------------------------------------------------


async def _read_all(nc: nats.NATS, stream: str) -> dict[int, bytes]:
    """Every message the stream's leader holds: sequence -> data."""
    info = await _request(nc, f"$JS.API.STREAM.INFO.{stream}", {"deleted_details": True},
                          timeout=5.0)
    state = info["state"]
    first, last = state["first_seq"], state["last_seq"]
    deleted = set(state.get("deleted") or [])
    seqs = [s for s in range(first, last + 1) if s not in deleted] if state["messages"] else []
    assert len(seqs) == state["messages"], f"{stream}: state {state} disagrees with its gaps"
    out: dict[int, bytes] = {}
    js = nc.jetstream(timeout=5.0)
    for i in range(0, len(seqs), 50):
        msgs = await asyncio.gather(*(js.get_msg(stream, s) for s in seqs[i : i + 50]))
        out.update((m.seq, m.data or b"") for m in msgs)
    return out


async def _on_each_replica(
    cl: Cluster, nc: nats.NATS, stream: str,
    read: Callable[[nats.NATS, str], Awaitable[dict[int, bytes]]],
) -> dict[int, bytes]:
    """What ``read`` returns through each replica of ``stream`` as its leader; all agree."""
    info = await _request(nc, f"$JS.API.STREAM.INFO.{stream}", timeout=5.0)
    cluster = info["cluster"]
    replicas = [cluster["leader"]] + [r["name"] for r in cluster.get("replicas", [])]
    seen: dict[str, dict[int, bytes]] = {}
    for name in replicas:
        async def led_by(name: str = name) -> bool:
            got = await _request(nc, f"$JS.API.STREAM.INFO.{stream}", timeout=5.0)
            if got.get("cluster", {}).get("leader") == name:
                return True
            with contextlib.suppress(*NO_ANSWER):
                await _request(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}",
                               {"placement": {"preferred": name}}, timeout=5.0)
            return False

        await wait_until(led_by, 60, f"{name} to lead {stream}", interval_s=0.5)
        seen[name] = await read(nc, stream)
    first = seen[replicas[0]]
    for name, held in seen.items():
        assert held == first, (f"{stream}: {name} holds {len(held)} messages, "
                               f"{replicas[0]} {len(first)}; differing sequences "
                               f"{sorted(set(held.items()) ^ set(first.items()))[:10]}")
    return first
