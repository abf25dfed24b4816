"""Account subject mappings (core NATS): a published subject is rewritten before routing.

A mapping has a source subject (wildcards allowed) and one or more destinations with weights
in percent. A publish on a matching subject picks one destination at random by weight; when
the weights of the destinations do not add up to 100 and the source is not one of them, the
rest of the draws keep the subject as it was (nats-server adds the source at the remaining
weight); when the source is listed explicitly, the remaining draws drop the message.
Destinations may be scoped to a cluster: a server of that cluster uses those instead.
Mappings are tried in the order configured; the first whose source matches wins.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from jetraft.protocol.subjects import is_literal, is_valid_filter, subject_matches
from jetraft.protocol.transform import SubjectTransform, TransformError, validate_mapping


@dataclass(frozen=True, slots=True)
class Destination:
    """A configured destination: subject, weight (0..100) and optional cluster."""

    subject: str
    weight: int = 100
    cluster: str = ""


@dataclass(frozen=True, slots=True)
class _Pick:
    transform: SubjectTransform
    upto: int  # cumulative weight: a draw below it (and above the previous one) picks this


def _identity_dest(src: str) -> str:
    """The source as a destination that maps every subject to itself."""
    out, n = [], 0
    for tok in src.split("."):
        if tok == "*":
            n += 1
            out.append(f"${n}")
        else:
            out.append(tok)
    return ".".join(out)


class Mapping:
    """One source with its weighted destinations (``build`` validates)."""

    __slots__ = ("_by_cluster", "_picks", "literal", "src")

    def __init__(
        self, src: str, picks: list[_Pick], by_cluster: dict[str, list[_Pick]]
    ) -> None:
        self.src = src
        self.literal = is_literal(src)
        self._picks = picks
        self._by_cluster = by_cluster

    @classmethod
    def build(cls, src: str, dests: Sequence[Destination]) -> Mapping:
        """Raises TransformError with nats-server's text for a mapping it refuses."""
        if not is_valid_filter(src):
            raise TransformError("invalid subject")
        seen: set[str] = set()
        totals: dict[str, int] = {}
        plain: list[tuple[SubjectTransform, int]] = []
        scoped: dict[str, list[tuple[SubjectTransform, int]]] = {}
        for d in dests:
            if d.subject in seen:
                raise TransformError(f'duplicate entry for "{d.subject}"')
            seen.add(d.subject)
            if d.weight > 100:
                raise TransformError("individual weights need to be <= 100")
            totals[d.cluster] = totals.get(d.cluster, 0) + d.weight
            if totals[d.cluster] > 100:
                raise TransformError("total weight needs to be <= 100")
            validate_mapping(src, d.subject)
            tr = SubjectTransform.create(src, d.subject)
            if tr is None:  # an empty destination
                raise TransformError("invalid subject")
            (scoped.setdefault(d.cluster, []) if d.cluster else plain).append((tr, d.weight))
        keep_src = src not in seen
        picks = _cumulative(src, plain, keep_src)
        by_cluster = {c: _cumulative(src, entries, keep_src) for c, entries in scoped.items()}
        return cls(src, picks, by_cluster)

    def select(
        self, tokens: Sequence[str], rng: random.Random, cluster: str = ""
    ) -> str:
        """The subject to route a publish (as ``tokens``, matching the source) to; '' when
        the draw falls on no destination (the message is dropped)."""
        picks = self._by_cluster.get(cluster, self._picks) if self._by_cluster else self._picks
        if len(picks) == 1 and picks[0].upto == 100:
            chosen: _Pick | None = picks[0]
        else:
            draw = rng.randrange(100)
            chosen = next((p for p in picks if draw < p.upto), None)
        if chosen is None:
            return ""
        return chosen.transform.apply(tokens, rng)


def _cumulative(
    src: str, entries: list[tuple[SubjectTransform, int]], keep_src: bool
) -> list[_Pick]:
    """Destinations sorted by weight with running totals; the source itself fills up to 100
    unless it was listed."""
    total = sum(w for _, w in entries)
    if total != 100 and keep_src:
        tr = SubjectTransform.create(src, _identity_dest(src))
        assert tr is not None
        entries = [*entries, (tr, 100 if not entries else 100 - total)]
    entries = sorted(entries, key=lambda e: e[1])  # stable, as nats-server's sort by weight
    picks, upto = [], 0
    for tr, w in entries:
        upto += w
        picks.append(_Pick(tr, upto))
    return picks


class SubjectMapper:
    """An account's mappings, applied to what its clients publish."""

    __slots__ = ("_cluster", "_mappings", "_rng")

    def __init__(
        self, mappings: Sequence[Mapping], rng: random.Random | None = None, cluster: str = ""
    ) -> None:
        self._mappings = tuple(mappings)
        self._rng = rng or random.Random()
        self._cluster = cluster

    def map(self, subject: str) -> str | None:
        """The subject to route to: None when no mapping applies (route as published),
        '' to drop the message."""
        for m in self._mappings:
            if (m.src == subject) if m.literal else subject_matches(m.src, subject):
                return m.select(subject.split("."), self._rng, self._cluster)
        return None
