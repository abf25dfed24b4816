"""What a consumer's leader tells the world about its messages and itself: the MSG_NAKED,
MSG_TERMINATED and MAX_DELIVERIES advisories, the sampled ack metric (``sample_freq``), the
PAUSE advisory, and on one server the DELETED advisory of an inactivity delete
(``advisories`` builds the bodies). ``ConsumerEvents`` is the bottom of the
runtime's stack of bases (see ``consumer_pin.PinnedGroups``).

As nats-server does, an event nobody listens for is not built: dead-letter handlers and
monitoring tools subscribe to these subjects, and most consumers have no such listener, so
the hot paths (a nak storm, every ack of a sampled consumer) pay one interest check.
"""

from __future__ import annotations

import time

from jetraft.jetstream.consumer import ConsumerCore
from jetraft.jetstream.consumer_config import ConsumerConfig, parse_rfc3339_ns
from jetraft.server.core.internal import InternalClient
from jetraft.server.js import advisories
from jetraft.server.js.consumer_env import ConsumerEnv, has_interest


def sample_percent(cfg: ConsumerConfig) -> int:
    """The share of acks that publish an ack metric, 0-100 (``sample_freq`` "40%" or "40";
    the config check has already refused anything else)."""
    text = cfg.sample_freq.strip().removesuffix("%")
    if not text:
        return 0
    try:
        return max(0, min(int(text), 100))
    except ValueError:
        return 0


class ConsumerEvents:
    """The advisories and metrics of a ``ConsumerRuntime``, which sets these attributes."""

    core: ConsumerCore
    env: ConsumerEnv
    client: InternalClient
    _sample_pct: int  # sample_percent of the config in force

    @property
    def cfg(self) -> ConsumerConfig:
        raise NotImplementedError

    def _advise(self, advisory: tuple[str, bytes]) -> None:
        self.client.publish(*advisory)

    def _publish_if_listened(self, event: str, now_ns: int, **fields: object) -> None:
        """Publish one of ``advisories.CONSUMER_EVENTS`` for this consumer, built only when
        something listens on its subject."""
        core = self.core
        subject = advisories.consumer_event_subject(event, core.stream, core.name)
        if has_interest(self.env.account, subject):
            body = advisories.consumer_event(
                event, core.stream, core.name, now_ns, self.env.domain, **fields
            )
            self.client.publish(subject, body)

    def _deliveries(self, sseq: int) -> int:
        """How many times ``sseq`` went out (it is pending)."""
        return self.core.state.redelivered.get(sseq, 0) + 1

    def advise_max_deliveries(self, sseq: int, deliveries: int) -> None:
        """``sseq`` was delivered max_deliver times and its last ack wait ran out, or it
        was due again: it will not be delivered again."""
        self._publish_if_listened(
            "MAX_DELIVERIES", time.time_ns(), stream_seq=sseq, deliveries=deliveries
        )

    def advise_nak(self, sseq: int, dseq: int) -> None:
        """A -NAK of a pending message (called before it takes effect)."""
        self._publish_if_listened(
            "MSG_NAKED",
            time.time_ns(),
            consumer_seq=dseq,
            stream_seq=sseq,
            deliveries=self._deliveries(sseq),
        )

    def advise_terminated(self, sseq: int, dseq: int, deliveries: int, reason: bytes) -> None:
        """A +TERM, with the reason that followed it (nats-server advises every one, pending
        or not, and names a reason only when one was given)."""
        text = reason.strip().decode(errors="replace")
        extra: dict[str, object] = {"reason": text} if text else {}
        self._publish_if_listened(
            "MSG_TERMINATED",
            time.time_ns(),
            consumer_seq=dseq,
            stream_seq=sseq,
            deliveries=deliveries,
            **extra,
        )

    def sample_ack(self, sseq: int, dseq: int, now: int) -> None:
        """An ack of a pending message under explicit ack policy: published as an ack
        metric for ``sample_freq`` percent of them (called before the ack takes effect, so
        the delivery's time is still known)."""
        pct = self._sample_pct
        if pct < 100 and self.env.rng.randrange(100) >= pct:
            return
        pending = self.core.state.pending.get(sseq)
        if pending is None:
            return
        self._publish_if_listened(
            "ACK",
            now,
            consumer_seq=dseq,
            stream_seq=sseq,
            ack_time=max(now - pending.ts_ns, 0),
            deliveries=self._deliveries(sseq),
        )

    def advise_deleted(self) -> None:
        """The consumer deletes itself (its inactive_threshold passed)."""
        core = self.core
        self._advise(
            advisories.consumer_action(
                core.stream, core.name, "delete", time.time_ns(), self.env.domain
            )
        )

    def advise_pause(self) -> None:
        """The pause was set, changed or lifted, or it ran out."""
        until = self.cfg.pause_until or ""
        now = time.time_ns()
        paused = bool(until) and parse_rfc3339_ns(until) > now
        self._publish_if_listened("PAUSE", now, **advisories.pause_fields(until, paused))
