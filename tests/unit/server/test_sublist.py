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
        # Longer subjects than any filter go through the prefix cache, subjects with tokens
        # no filter names (z) through the tail cache (see SubList).
        subjects = ["a", "a.b", "a.b.c", "c.c.c.c", "b.a", "a.b.c.a.b", "a.a.a.a.a", "c.b.a.c",
                    "b.c", "a.b.c.c.c.c", "c.a.b.b.b", "a.z", "a.b.z", "z.z.c", "c.z.z"]
        for subject in rnd.sample(subjects, len(subjects)):
            want = {k for k, v in live.items() if subject_matches(v, subject)}
            assert set(sl.match(subject).plain) == want, subject


def test_unique_subjects_under_one_wildcard_share_a_prefix_entry() -> None:
    sl: SubList[str] = SubList()
    sl.insert("$JS.ACK.S.C.>", None, "consumer")
    sl.insert("$JS.API.>", None, "api")
    for seq in range(1, 1001):
        assert sl.match(f"$JS.ACK.S.C.1.{seq}.{seq}.1700000000.0").plain == ("consumer",)
    assert sl.cache_size() == 1
    # A subscription deeper in that subject space changes the answer for some subjects.
    sl.insert("$JS.ACK.S.C.1.5.*.*.*", None, "deep")
    assert sl.match("$JS.ACK.S.C.1.5.5.1700000000.0").plain == ("consumer", "deep")
    assert sl.match("$JS.ACK.S.C.1.6.6.1700000000.0").plain == ("consumer",)
    assert sl.remove("$JS.ACK.S.C.1.5.*.*.*", None, "deep")
    assert sl.match("$JS.ACK.S.C.1.5.5.1700000000.0").plain == ("consumer",)
    # A literal subscription on one ack subject, and one that only shares a shorter prefix.
    sl.insert("$JS.ACK.S.C.1.7.7.1.0", None, "one")
    sl.insert("$JS.ACK.S", None, "short")
    assert sl.match("$JS.ACK.S.C.1.7.7.1.0").plain == ("consumer", "one")
    assert sl.match("$JS.ACK.S.C.1.8.8.1.0").plain == ("consumer",)
    assert sl.match("$JS.ACK.T.C.1.8.8.1.0").plain == ()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(filters(), st.sampled_from([None, "q", "r"]), st.booleans()),
                max_size=20), st.randoms())
def test_queue_groups_match_brute_force(
    ops: list[tuple[str, str | None, bool]], rnd: random.Random
) -> None:
    sl: SubList[int] = SubList()
    live: dict[int, tuple[str, str | None]] = {}
    for i, (f, queue, add) in enumerate(ops):
        if add or not live:
            sl.insert(f, queue, i)
            live[i] = (f, queue)
        else:
            victim = rnd.choice(sorted(live))
            vf, vq = live.pop(victim)
            assert sl.remove(vf, vq, victim)
        for subject in ("a.b", "a.b.c.a.b", "c.c.c.c.c", "b.a.c"):
            m = sl.match(subject)
            want_plain = {
                k for k, (v, q) in live.items() if q is None and subject_matches(v, subject)
            }
            want_groups = {
                frozenset(k for k, (v, q) in live.items() if q == g and subject_matches(v, subject))
                for g in ("q", "r")
            } - {frozenset()}
            assert set(m.plain) == want_plain
            assert {frozenset(g) for g in m.queues} == want_groups


def test_unique_reply_subjects_under_one_wildcard_share_a_tail_entry() -> None:
    sl: SubList[str] = SubList()
    sl.insert("_INBOX.abc.*", None, "mux")
    sl.insert("_INBOX.other.*", None, "other")
    for n in range(1, 1001):
        assert sl.match(f"_INBOX.abc.{n}").plain == ("mux",)
    assert sl.cache_size() == 2  # the tail entry, and the first subject under its own name
    # The token count still matters: nothing matches one more token.
    assert sl.match("_INBOX.abc.1.2").plain == ()
    # A literal subscription on one reply subject changes that subject's answer only.
    sl.insert("_INBOX.abc.7", None, "seven")
    assert set(sl.match("_INBOX.abc.7").plain) == {"mux", "seven"}
    assert sl.match("_INBOX.abc.8").plain == ("mux",)
    assert sl.remove("_INBOX.abc.7", None, "seven")
    assert sl.match("_INBOX.abc.7").plain == ("mux",)
    # Wildcard subscriptions that overlap the pattern are seen at once.
    sl.insert("_INBOX.*.5", "q", "q5")
    assert sl.match("_INBOX.abc.5").queues == (("q5",),)
    assert sl.match("_INBOX.abc.6").queues == ()
    sl.insert("*.abc.>", None, "wide")
    assert set(sl.match("_INBOX.abc.9").plain) == {"mux", "wide"}
    assert sl.remove("*.abc.>", None, "wide")
    assert sl.match("_INBOX.abc.9").plain == ("mux",)
    assert sl.match("_INBOX.other.9").plain == ("other",)


def test_match_family_names_the_stem_only_while_the_last_token_does_not_matter() -> None:
    sl: SubList[str] = SubList()
    sl.insert("_INBOX.abc.*", None, "mux")
    m, stem = sl.match_family("_INBOX.abc.1")
    assert m.plain == ("mux",) and stem == "_INBOX.abc."
    gen = sl.generation
    # A literal subscription on one reply subject: the family no longer holds (the caller
    # sees the generation move), and that subject is matched on its own.
    sl.insert("_INBOX.abc.7", None, "seven")
    assert sl.generation != gen
    m, stem = sl.match_family("_INBOX.abc.7")
    assert set(m.plain) == {"mux", "seven"} and stem is None
    assert sl.match_family("_INBOX.abc.8")[0].plain == ("mux",)
    # Subjects matched through the prefix cache (no token after the first counts) or not
    # under a single-token tail have no family.
    sl.insert("$JS.ACK.>", None, "acks")
    assert sl.match_family("$JS.ACK.S.C.1.2.3")[1] is None
    assert sl.match_family("nothing")[1] is None


def test_match_prefix_names_the_stem_while_no_subscription_looks_past_it() -> None:
    sl: SubList[str] = SubList()
    sl.insert("$JS.ACK.S.C.>", None, "consumer")
    sl.insert("$JS.ACK.S.D.>", None, "other")
    m, stem = sl.match_prefix("$JS.ACK.S.C.1.5.5.99.0")
    assert m.plain == ("consumer",) and stem == "$JS.ACK.S.C."
    # Every subject with that stem and more after it has the same answer.
    assert sl.match("$JS.ACK.S.C.1.6.6.100.0").plain == ("consumer",)
    assert sl.match_prefix("$JS.ACK.S.C.x")[1] == "$JS.ACK.S.C."
    # The stem alone has no more tokens: it is not in the family.
    assert sl.match_prefix("$JS.ACK.S.C")[1] is None
    # A user's wider subscription joins the answer; the family stays.
    sl.insert("$JS.ACK.>", None, "user")
    m, stem = sl.match_prefix("$JS.ACK.S.C.1.7.7.101.0")
    assert set(m.plain) == {"consumer", "user"} and stem == "$JS.ACK.S.C."
    # A subscription that names a later token narrows the family to a longer stem.
    sl.insert("$JS.ACK.S.C.1.8.>", None, "narrow")
    m, stem = sl.match_prefix("$JS.ACK.S.C.1.8.8.102.0")
    assert set(m.plain) == {"consumer", "user", "narrow"}
    assert stem == "$JS.ACK.S.C.1.8."
    m, stem = sl.match_prefix("$JS.ACK.S.C.1.9.9.103.0")
    assert set(m.plain) == {"consumer", "user"} and stem == "$JS.ACK.S.C.1.9."
    # A literal subject that was matched exactly (cached under its own name) has no stem.
    sl.insert("lit.a", None, "lit")
    assert sl.match("lit.a").plain == ("lit",)
    assert sl.match_prefix("lit.a") == (sl.match("lit.a"), None)
