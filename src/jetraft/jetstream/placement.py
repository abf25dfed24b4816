"""Choosing the servers of a stream's (or consumer's) RAFT group: a pure function.

The meta leader calls ``select_peers`` with what it knows of every JetStream server. Rules,
as nats-server applies them:

* only servers of the target cluster that are online, never one tagged ``!jetstream``;
* every placement tag must be on the server, and no ``!tag`` may be;
* with ``unique_tag`` (e.g. ``az:``), at most one server per value of that tag, and a
  server without such a tag does not qualify (unless a placement tag already names one);
* servers already in the group (``existing``) stay; ``exclude`` are never chosen;
* among the rest, least loaded first: for replicated groups fewest replicated assets,
  then fewest assets of any kind; ties are broken by the injected random source.

Failure gives ``PlacementError`` with nats-server's text: "no suitable peers for placement"
followed by the reasons seen.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

EXCLUDE_PLACEMENT_TAG = "!jetstream"


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """One JetStream server as the meta leader sees it."""

    name: str
    cluster: str
    tags: frozenset[str] = frozenset()
    online: bool = True
    assets: int = 0  # stream and consumer replicas it holds
    ha_assets: int = 0  # of those, the replicated ones


@dataclass(slots=True)
class _Reasons:
    offline: bool = False
    exclude_tag: bool = False
    unique_tag: bool = False
    no_cluster: bool = False
    missing: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)

    def text(self) -> str:
        out = "no suitable peers for placement"
        for flag, why in (
            (self.offline, "peer offline"),
            (self.exclude_tag, "exclude tag set"),
            (self.unique_tag, "server tag not unique"),
            (self.no_cluster, "jetstream not enabled in cluster"),
        ):
            if flag:
                out += f", {why}"
        if self.missing:
            out += ", tags not matched [" + ", ".join(f"'{t}'" for t in self.missing) + "]"
        if self.excluded:
            out += ", tags excluded [" + ", ".join(f"'{t}'" for t in self.excluded) + "]"
        return out


class PlacementError(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _unique_value(tags: Iterable[str], prefix: str) -> str | None:
    for t in tags:
        if t.startswith(prefix):
            return t
    return None


def select_peers(
    replicas: int,
    servers: Sequence[ServerFacts],
    *,
    cluster: str,
    tags: Sequence[str] = (),
    unique_tag: str = "",
    existing: Sequence[str] = (),
    exclude: Iterable[str] = (),
    rng: random.Random | None = None,
) -> list[str]:
    """``replicas`` server names: the ``existing`` ones that still qualify first, then new
    ones. Raises PlacementError when not enough servers qualify."""
    rng = rng or random.Random(0)
    wanted = [(t.removeprefix("!"), t.startswith("!")) for t in tags]
    prefix = unique_tag
    if prefix and any(t.startswith(prefix) for t, _ in wanted):
        prefix = ""  # the placement already pins the unique tag
    by_name = {s.name: s for s in servers}
    excluded = set(exclude)
    keep = [n for n in existing if n not in excluded][:replicas]
    taken: set[str] = set()
    if prefix:
        for n in keep:
            s = by_name.get(n)
            value = _unique_value(s.tags, prefix) if s is not None else None
            if value is not None:
                taken.add(value)
    why = _Reasons()
    pool: list[ServerFacts] = []
    shuffled = list(servers)
    rng.shuffle(shuffled)
    for s in shuffled:
        if s.cluster != cluster or s.name in excluded or s.name in keep:
            continue
        if not s.online:
            why.offline = True
            continue
        if EXCLUDE_PLACEMENT_TAG in s.tags:
            why.exclude_tag = True
            continue
        mismatch = False
        for tag, negated in wanted:
            if negated and tag in s.tags:
                if tag not in why.excluded:
                    why.excluded.append(tag)
                mismatch = True
                break
            if not negated and tag not in s.tags:
                if tag not in why.missing:
                    why.missing.append(tag)
                mismatch = True
                break
        if mismatch:
            continue
        if prefix:
            value = _unique_value(s.tags, prefix)
            if value is None or value in taken:
                why.unique_tag = True
                continue
            # Reserve the value only when chosen (below); here just check it is free.
        pool.append(s)
    if replicas > 1:
        pool.sort(key=lambda s: (s.ha_assets, s.assets))
    else:
        pool.sort(key=lambda s: s.assets)
    chosen = list(keep)
    for s in pool:
        if len(chosen) >= replicas:
            break
        if prefix:
            value = _unique_value(s.tags, prefix)
            if value in taken:
                why.unique_tag = True  # its zone already has a replica
                continue
            if value is not None:
                taken.add(value)
        chosen.append(s.name)
    if len(chosen) < replicas:
        if not any(s.cluster == cluster for s in servers):
            why.no_cluster = True
        raise PlacementError(why.text())
    return chosen


def group_name(kind: str, replicas: int, storage: str, rng: random.Random) -> str:
    """nats-server's shape: ``S-R3F-<8 chars>`` for streams, ``C-R3M-...`` for consumers."""
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    suffix = "".join(rng.choice(alphabet) for _ in range(8))
    return f"{kind}-R{replicas}{'M' if storage == 'memory' else 'F'}-{suffix}"
