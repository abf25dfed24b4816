"""A subject trie that answers "who is interested in this subject?" with a result cache.

Publishing asks ``match`` once per message, so results are cached per literal subject; an
insert or remove drops only the cached subjects its filter matches (most traffic keeps hitting
the cache while clients come and go).

Subjects that are each used once (JetStream acks, ``$JS.ACK.<stream>.<consumer>.<n>.<seq>...``,
one per message) would only churn that cache. For them a second cache is keyed by a prefix:
when no subscription looks at the tokens after the first ``d`` (the match only needs to know
that there are more), the result holds for every subject with those ``d`` tokens and more,
and is stored under ``"<t1>.<t2>...<td>."``. A lookup that misses the first cache tries the
prefix lengths stored so far.

Reply subjects (``_INBOX.<id>.<n>``, one per request or JetStream publish, answered through a
wildcard subscription ``_INBOX.<id>.*``) need every token counted, so the prefix cache cannot
hold them; but when no subscription names a literal token at their last ``t`` positions, the
result holds for every subject with the same leading tokens and the same number of tokens. A
third cache keeps those under ``"<leading tokens>" + ".*" * t`` (the pattern they match).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, NamedTuple, TypeVar

from jetraft.protocol.subjects import filters_overlap, subject_matches

S = TypeVar("S", bound=Hashable)

_CACHE_MAX = 4096
_PREFIX_CACHE_MAX = 1024
_TAIL_CACHE_MAX = 1024


class Match(NamedTuple, Generic[S]):
    plain: tuple[S, ...]
    queues: tuple[tuple[S, ...], ...]  # one tuple of members per queue group


class _Node(Generic[S]):
    __slots__ = ("fwc", "literal", "plain", "pwc", "queues")

    def __init__(self) -> None:
        self.literal: dict[str, _Node[S]] = {}
        self.pwc: _Node[S] | None = None
        self.fwc: _Node[S] | None = None
        # dicts keep insertion order, which keeps delivery order stable for tests and users.
        self.plain: dict[S, None] = {}
        self.queues: dict[str, dict[S, None]] = {}

    def empty(self) -> bool:
        return not (self.literal or self.pwc or self.fwc or self.plain or self.queues)


class SubList(Generic[S]):
    def __init__(self) -> None:
        self._root: _Node[S] = _Node()
        self._cache: dict[str, Match[S]] = {}
        # "<d tokens>." -> the match of every subject with those d tokens and more (see above),
        # and the prefix lengths d present in it.
        self._prefix_cache: dict[str, Match[S]] = {}
        self._prefix_lens: list[int] = []
        # "<leading tokens>.*.*" -> the match of every subject of that pattern (see above),
        # and the numbers of trailing wildcard tokens present in it.
        self._tail_cache: dict[str, Match[S]] = {}
        self._tail_lens: list[int] = []
        self._count = 0
        # Bumped by every insert and remove: an answer kept by a caller (``match_family``)
        # holds while it is unchanged.
        self.generation = 0

    def __len__(self) -> int:
        return self._count

    def cache_size(self) -> int:
        return len(self._cache) + len(self._prefix_cache) + len(self._tail_cache)

    def insert(self, subject: str, queue: str | None, sub: S) -> None:
        node = self._root
        for tok in subject.split("."):
            if tok == "*":
                if node.pwc is None:
                    node.pwc = _Node()
                node = node.pwc
            elif tok == ">":
                if node.fwc is None:
                    node.fwc = _Node()
                node = node.fwc
            else:
                nxt = node.literal.get(tok)
                if nxt is None:
                    nxt = node.literal[tok] = _Node()
                node = nxt
        if queue is None:
            if sub in node.plain:
                return
            node.plain[sub] = None
        else:
            members = node.queues.setdefault(queue, {})
            if sub in members:
                return
            members[sub] = None
        self._count += 1
        self.generation += 1
        self._invalidate(subject)

    def remove(self, subject: str, queue: str | None, sub: S) -> bool:
        path: list[tuple[_Node[S], str]] = []
        node: _Node[S] | None = self._root
        for tok in subject.split("."):
            assert node is not None
            path.append((node, tok))
            if tok == "*":
                node = node.pwc
            elif tok == ">":
                node = node.fwc
            else:
                node = node.literal.get(tok)
            if node is None:
                return False
        assert node is not None
        if queue is None:
            if node.plain.pop(sub, 0) is not None:
                return False
        else:
            members = node.queues.get(queue)
            if members is None or members.pop(sub, 0) is not None:
                return False
            if not members:
                del node.queues[queue]
        self._count -= 1
        self.generation += 1
        self._prune(path, node)
        self._invalidate(subject)
        return True

    @staticmethod
    def _prune(path: list[tuple[_Node[S], str]], leaf: _Node[S]) -> None:
        child = leaf
        for parent, tok in reversed(path):
            if not child.empty():
                return
            if tok == "*":
                parent.pwc = None
            elif tok == ">":
                parent.fwc = None
            else:
                del parent.literal[tok]
            child = parent

    def _invalidate(self, filter_subject: str) -> None:
        if self._prefix_cache:
            self._invalidate_prefixes(filter_subject)
        if self._tail_cache:
            self._invalidate_tails(filter_subject)
        if not self._cache:
            return
        if "*" not in filter_subject and ">" not in filter_subject:
            self._cache.pop(filter_subject, None)
            return
        for cached in [k for k in self._cache if subject_matches(filter_subject, k)]:
            del self._cache[cached]

    def _invalidate_prefixes(self, filter_subject: str) -> None:
        """Drop the prefix entries whose subjects the filter may match: they may change."""
        pcache = self._prefix_cache
        if "*" not in filter_subject and ">" not in filter_subject:
            # A literal filter can only concern the entries keyed by its own prefixes.
            for d in self._prefix_lens:
                key = _prefix(filter_subject, d)
                if key is not None:
                    pcache.pop(key, None)
            return
        for key in [k for k in pcache if filters_overlap(filter_subject, k + ">")]:
            del pcache[key]

    def _invalidate_tails(self, filter_subject: str) -> None:
        """Drop the tail entries whose pattern the filter overlaps: their answer may change."""
        tcache = self._tail_cache
        if "*" not in filter_subject and ">" not in filter_subject:
            # A literal filter only matches the pattern it maps to for each tail length.
            for t in self._tail_lens:
                key = _tail_key(filter_subject, t)
                if key is not None:
                    tcache.pop(key, None)
            return
        for key in [k for k in tcache if filters_overlap(filter_subject, k)]:
            del tcache[key]

    def match(self, subject: str) -> Match[S]:
        hit = self._cache.get(subject)
        if hit is not None:
            return hit
        if self._prefix_cache:
            found = self._prefix_hit(subject)
            if found is not None:
                return found[0]
        tcache = self._tail_cache
        if tcache:
            for t in self._tail_lens:
                key = _tail_key(subject, t)
                if key is not None:
                    hit = tcache.get(key)
                    if hit is not None:
                        return hit
        toks = subject.split(".")
        plain: list[S] = []
        queues: dict[str, list[S]] = {}
        deepest = [-1]
        needed = _collect(self._root, toks, 0, plain, queues, deepest)
        result = Match(tuple(plain), tuple(tuple(m) for m in queues.values()))
        n = len(toks)
        if needed < n:
            self._remember_prefix(".".join(toks[:needed]) + "." if needed else "", needed, result)
            return result
        tail = n - 1 - max(deepest[0], 0)
        if tail > 0:
            # Also cached below under the subject itself: a subject that repeats (one reply
            # subject for many requests) then hits the first cache at once.
            self._remember_tail(".".join(toks[: n - tail]) + ".*" * tail, tail, result)
        if len(self._cache) >= _CACHE_MAX:
            # Drop the oldest half; cheap and good enough for a hot working set.
            for key in list(self._cache)[: _CACHE_MAX // 2]:
                del self._cache[key]
        self._cache[subject] = result
        return result

    def match_family(self, subject: str) -> tuple[Match[S], str | None]:
        """``match(subject)``, and the stem (``"<all tokens but the last>."``) when the same
        answer holds for every subject made of that stem and one more token: the reply
        subjects of one inbox, each used once. The caller may reuse the answer for such
        subjects while ``generation`` is unchanged, without a lookup per subject."""
        result = self.match(subject)
        dot = subject.rfind(".")
        if dot > 0 and self._tail_cache.get(subject[:dot] + ".*") is result:
            return result, subject[: dot + 1]
        return result, None

    def match_prefix(self, subject: str) -> tuple[Match[S], str | None]:
        """``match(subject)``, and the stem (``"<first d tokens>."``) when the same answer
        holds for every subject that starts with that stem and has more after it (the
        prefix cache above): the ack subjects of one consumer, each used once. The caller
        may take the answer for such subjects while ``generation`` is unchanged."""
        hit = self._cache.get(subject)
        if hit is not None:
            return hit, None
        found = self._prefix_hit(subject)
        if found is not None:
            return found
        result = self.match(subject)
        found = self._prefix_hit(subject)  # the walk of ``match`` may have stored one
        return found if found is not None else (result, None)

    def _prefix_hit(self, subject: str) -> tuple[Match[S], str] | None:
        pcache = self._prefix_cache
        if pcache:
            for d in self._prefix_lens:
                key = _prefix(subject, d)
                if key is not None:
                    hit = pcache.get(key)
                    if hit is not None:
                        return hit, key
        return None

    def _remember_prefix(self, key: str, length: int, result: Match[S]) -> None:
        pcache = self._prefix_cache
        if len(pcache) >= _PREFIX_CACHE_MAX:
            pcache.clear()
            self._prefix_lens.clear()
        pcache[key] = result
        if length not in self._prefix_lens:
            self._prefix_lens.append(length)

    def _remember_tail(self, key: str, tail: int, result: Match[S]) -> None:
        tcache = self._tail_cache
        if len(tcache) >= _TAIL_CACHE_MAX:
            tcache.clear()
            self._tail_lens.clear()
        tcache[key] = result
        if tail not in self._tail_lens:
            self._tail_lens.append(tail)

    def has_interest(self, subject: str) -> bool:
        m = self.match(subject)
        return bool(m.plain or m.queues)


def _prefix(subject: str, length: int) -> str | None:
    """The first ``length`` tokens of ``subject`` and the dot after them ("" for none), or
    None when the subject has no more tokens than that."""
    if not length:
        return ""
    parts = subject.split(".", length)
    if len(parts) <= length:
        return None
    return subject[: len(subject) - len(parts[length])]


def _tail_key(subject: str, tail: int) -> str | None:
    """The tail-cache key of ``subject`` for ``tail`` trailing tokens (None when the subject
    has no more tokens than that)."""
    parts = subject.rsplit(".", tail)
    if len(parts) <= tail:
        return None
    return parts[0] + ".*" * tail


def _collect(
    node: _Node[S],
    toks: list[str],
    i: int,
    plain: list[S],
    queues: dict[str, list[S]],
    deepest: list[int],
) -> int:
    """Add the subscriptions of ``node``'s subtree matching ``toks[i:]``. Returns how many
    leading tokens the result depended on: a node with children that was reached before the
    last token looked at the next token; anything else only needed to know that more tokens
    follow (the prefix cache above rests on this). ``deepest[0]`` becomes the last position
    whose token was looked up among literal children: the tokens after it only had to be
    there (the tail cache rests on this)."""
    if node.fwc is not None and i < len(toks):
        _add(node.fwc, plain, queues)
    if i == len(toks):
        _add(node, plain, queues)
        return i
    if not node.literal and node.pwc is None:
        return i
    needed = i + 1
    if node.literal:
        if i > deepest[0]:
            deepest[0] = i
        nxt = node.literal.get(toks[i])
        if nxt is not None:
            needed = max(needed, _collect(nxt, toks, i + 1, plain, queues, deepest))
    if node.pwc is not None:
        needed = max(needed, _collect(node.pwc, toks, i + 1, plain, queues, deepest))
    return needed


def _add(node: _Node[S], plain: list[S], queues: dict[str, list[S]]) -> None:
    if node.plain:
        plain.extend(node.plain)
    for name, members in node.queues.items():
        queues.setdefault(name, []).extend(members)
