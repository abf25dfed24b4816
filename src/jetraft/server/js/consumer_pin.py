"""priority_policy pinned_client at the edge: the pin ids (random, as nats-server's nuids),
the Nats-Pin-Id header on messages that go to the pinned client, and the runtime's part of
it (``PinnedGroups``, the base of the runtime's pull and ack halves). The pin itself is
``pull.Pin``, decided in the wait queue."""

from __future__ import annotations

import secrets
import time

from jetraft.jetstream.consumer_config import ConsumerConfig
from jetraft.jetstream.models import format_time
from jetraft.jetstream.pull import Pin, PullRequest, WaitQueue
from jetraft.protocol.headers import encode_headers
from jetraft.server.js import advisories
from jetraft.server.js.consumer_events import ConsumerEvents

PIN_HEADER = "Nats-Pin-Id"


def new_pin_id() -> str:
    return secrets.token_hex(11)


def new_pin(cfg: ConsumerConfig) -> Pin | None:
    """The pin state a consumer with this config needs (None: it does not pin)."""
    if cfg.priority_policy != "pinned_client":
        return None
    return Pin(ttl_ns=cfg.priority_timeout, new_id=new_pin_id)


def with_pin_id(hdr: bytes | None, pin_id: str) -> bytes:
    """The message's header block with Nats-Pin-Id added (the pinned client learns its id
    from it and sends it with its next pull requests)."""
    if not hdr:
        return encode_headers(((PIN_HEADER, pin_id),))
    # A block ends with an empty line: the new header goes just before it.
    return hdr[:-2] + f"{PIN_HEADER}: {pin_id}\r\n\r\n".encode()


def priority_refusal(
    cfg: ConsumerConfig, pin: Pin | None, req: PullRequest, now_ns: int
) -> tuple[int, str] | None:
    """A pull request's priority group checked as nats-server checks it (status code and
    description when refused); a request from the pinned client keeps its pin alive."""
    if not req.group:
        return 400, "Bad Request - Priority Group missing"
    if req.group not in cfg.priority_groups:
        return 400, "Bad Request - Invalid Priority Group"
    if pin is not None and pin.current:
        if req.pin_id == pin.current:
            pin.refresh(now_ns)
        elif req.pin_id:
            return 423, "Nats-Pin-Id mismatch"
    return None


class PinnedGroups(ConsumerEvents):
    """The pinned client of a ``ConsumerRuntime``: who holds the pin, when it lapses, taking
    it away (CONSUMER.UNPIN), the advisories of both, and the groups in consumer info. The
    runtime sets the attributes and provides the methods below that raise here.

    The runtime's halves stack by single inheritance (``ConsumerEvents`` <- ``PinnedGroups``
    <- ``PullIntake`` <- ``AckIntake`` <- ``ConsumerRuntime``): mypyc compiles a class with
    one base."""

    waitq: WaitQueue
    _advised_pin: str  # the last pin id a PINNED advisory named

    def kick(self) -> None:
        raise NotImplementedError

    def _renew_pin(self, old: ConsumerConfig, cfg: ConsumerConfig) -> None:
        """A config update: a changed priority policy or timeout starts the pin afresh."""
        if (cfg.priority_policy, cfg.priority_timeout) != (
            old.priority_policy,
            old.priority_timeout,
        ):
            self.waitq.pin = new_pin(cfg)

    def _pin_refusal(self, req: PullRequest, now: int) -> tuple[int, str] | None:
        """A pull request's priority group checked (None: accepted)."""
        return priority_refusal(self.cfg, self.waitq.pin, req, now)

    def _pinned_hdr(self, hdr: bytes | None, pin_id: str) -> bytes:
        """A message to the pinned client, with its pin id; the first one under a new pin
        id tells the PINNED advisory (the wait queue hands the pin out as it picks the
        request: ``WaitQueue.take``)."""
        if pin_id != self._advised_pin:
            self._advised_pin = pin_id
            pin = self.waitq.pin
            group = pin.group if pin is not None else ""
            core = self.core
            self._advise(
                advisories.pinned(
                    self.env.account.name,
                    core.stream,
                    core.name,
                    group,
                    pin_id,
                    time.time_ns(),
                    self.env.domain,
                )
            )
        return with_pin_id(hdr, pin_id)

    def _lapse_pin(self, now: int) -> None:
        """The wait timer fired: a pinned client quiet for priority_timeout loses the pin
        and the next requester takes it."""
        pin = self.waitq.pin
        if pin is None:
            return
        group = pin.group
        if pin.lapse(now):
            self._advise_unpinned(group, "timeout")
            self.kick()

    def unpin(self, group: str) -> None:
        """CONSUMER.UNPIN of ``group``: the pinned client loses its pin; waiting requests
        compete anew. Advised even when nothing was pinned, as nats-server does."""
        if self.waitq.pin is not None:
            self.waitq.pin.clear()
            self.kick()
        self._advise_unpinned(group, "admin")

    def _advise_unpinned(self, group: str, reason: str) -> None:
        core = self.core
        self._advise(
            advisories.unpinned(
                self.env.account.name,
                core.stream,
                core.name,
                group,
                reason,
                time.time_ns(),
                self.env.domain,
            )
        )

    def priority_groups(self) -> list[dict[str, str]] | None:
        """``priority_groups`` of consumer info: as nats-server, the first group only, its
        pinned client when one is (``pinned_ts`` Go's zero time when none is)."""
        groups = self.cfg.priority_groups
        if not groups:
            return None
        pin = self.waitq.pin
        state = {"group": groups[0]}
        since = 0
        if pin is not None and pin.current:
            state["pinned_client_id"] = pin.current
            since = pin.since_ns
        state["pinned_ts"] = format_time(since)
        return [state]
