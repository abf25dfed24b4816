"""priority_policy pinned_client at the edge: the pin ids (random, as nats-server's nuids),
the Nats-Pin-Id header on messages that go to the pinned client, and the runtime's part of
it (``PinnedGroups``, the base of the runtime's pull and ack halves). The pin itself is
``pull.Pin``, decided in the wait queue."""

from __future__ import annotations

import secrets

from jetraft.jetstream.consumer_config import ConsumerConfig
from jetraft.jetstream.pull import Pin, PullRequest, WaitQueue
from jetraft.protocol.headers import encode_headers

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


class PinnedGroups:
    """The pinned client of a ``ConsumerRuntime``: who holds the pin, when it lapses, and
    taking it away (CONSUMER.UNPIN). The runtime sets the attributes and provides the
    methods below that raise here.

    The runtime's halves stack by single inheritance (``PinnedGroups`` <- ``PullIntake`` <-
    ``AckIntake`` <- ``ConsumerRuntime``): mypyc compiles a class with one base."""

    waitq: WaitQueue

    @property
    def cfg(self) -> ConsumerConfig:
        raise NotImplementedError

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

    def _lapse_pin(self, now: int) -> None:
        """The wait timer fired: a pinned client quiet for priority_timeout loses the pin
        and the next requester takes it."""
        pin = self.waitq.pin
        if pin is not None and pin.lapse(now):
            self.kick()

    def unpin(self) -> None:
        """CONSUMER.UNPIN: the pinned client loses its pin; waiting requests compete anew."""
        if self.waitq.pin is not None:
            self.waitq.pin.clear()
            self.kick()
