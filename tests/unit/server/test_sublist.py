from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.protocol.subjects import subject_matches
from jetraft.server.core.sublist import SubList


def test_literal_wildcards_and_queues() -> None:
    sl: SubList[str] = SubList()
    sl.insert("a.b", None, "lit")
    sl.insert("a.*", None, "star")
    sl.insert("a.>", None, "full")
    sl.insert("a.b", "q", "q1")
    sl.insert("a.*", "q", "q2")
    sl.insert("a.b", "r", "r1")
    m = sl.match("a.b")
    assert set(m.plain) == {"lit", "star", "full"}
    assert sorted(sorted(g) for g in m.queues) == [["q1", "q2"], ["r1"]]
    assert sl.match("a.b.c").plain == ("full",)
    assert sl.match("b").plain == ()
    assert len(sl) == 6


def test_remove_invalidates_cache_and_prunes() -> None:
    sl: SubList[str] = SubList()
    sl.insert("x.*", None, "s")
    assert sl.match("x.y").plain == ("s",)
    assert sl.remove("x.*", None, "s")
    assert sl.match("x.y").plain == ()
    assert not sl.remove("x.*", None, "s")
    assert sl._root.empty()


TOKENS = st.sampled_from(["a", "b", "c"])
FILTER_TOKENS = st.sampled_from(["a", "b", "c", "*"])


@st.composite
def filters(draw: st.DrawFn) -> str:
    toks = draw(st.lists(FILTER_TOKENS, min_size=1, max_size=3))
    if draw(st.booleans()):
        toks.append(">")
    return ".".join(toks)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(filters(), st.booleans()), max_size=20), st.randoms())
def test_matches_brute_force(ops: list[tuple[str, bool]], rnd: random.Random) -> None:
    sl: SubList[int] = SubList()
    live: dict[int, str] = {}
    for i, (f, add) in enumerate(ops):
        if add or not live:
            sl.insert(f, None, i)
            live[i] = f
        else:
            victim = rnd.choice(sorted(live))
            assert sl.remove(live.pop(victim), None, victim)
        for subject in ("a", "a.b", "a.b.c", "c.c.c.c", "b.a"):
            want = {k for k, v in live.items() if subject_matches(v, subject)}
            assert set(sl.match(subject).plain) == want
