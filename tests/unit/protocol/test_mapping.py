"""Account subject mappings: weighted destinations, drops, cluster scopes, first match."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from jetraft.protocol.mapping import Destination, Mapping, SubjectMapper
from jetraft.protocol.transform import TransformError, fnv1a_32


def mapper(*mappings: Mapping, seed: int = 1, cluster: str = "") -> SubjectMapper:
    return SubjectMapper(mappings, random.Random(seed), cluster)


def test_plain_mapping_and_no_match() -> None:
    m = mapper(Mapping.build("a.*", [Destination("b.$1")]), Mapping.build("x", [Destination("y")]))
    assert m.map("a.1") == "b.1"
    assert m.map("x") == "y"
    assert m.map("a.1.2") is None and m.map("z") is None


def test_first_matching_mapping_wins() -> None:
    m = mapper(Mapping.build("a.>", [Destination("first.>")]),
               Mapping.build("a.b", [Destination("second")]))
    assert m.map("a.b") == "first.b"


def test_weights_split_the_traffic() -> None:
    m = mapper(Mapping.build("w", [Destination("w.a", 20), Destination("w.b", 50)]), seed=7)
    counts = Counter(m.map("w") for _ in range(4000))
    # The rest of the weight (30%) keeps the subject as published.
    assert set(counts) == {"w.a", "w.b", "w"}
    for subject, share in (("w.a", 0.2), ("w.b", 0.5), ("w", 0.3)):
        assert abs(counts[subject] / 4000 - share) < 0.05, counts


def test_listing_the_source_means_the_rest_is_dropped() -> None:
    m = mapper(Mapping.build("d", [Destination("d", 50)]), seed=3)
    counts = Counter(m.map("d") for _ in range(2000))
    assert set(counts) == {"d", ""} and abs(counts[""] / 2000 - 0.5) < 0.05


def test_wildcard_source_keeps_its_tokens_for_the_remaining_weight() -> None:
    m = mapper(Mapping.build("s.*.>", [Destination("t.$1.>", 1)]), seed=5)
    outs = {m.map("s.x.y.z") for _ in range(500)}
    assert outs == {"t.x.y.z", "s.x.y.z"}


def test_cluster_scoped_destinations() -> None:
    built = Mapping.build("c", [Destination("c.any"), Destination("c.east", 100, "east")])
    assert mapper(built, cluster="east").map("c") == "c.east"
    assert mapper(built, cluster="west").map("c") == "c.any"
    assert mapper(built).map("c") == "c.any"


def test_partitions_as_nats_server() -> None:
    # Checked against nats-server: "foo" -> bar.{{partition(10)}} routes to bar.3.
    lit = mapper(Mapping.build("foo", [Destination("bar.{{partition(10)}}")]))
    assert lit.map("foo") == "bar.3" == f"bar.{fnv1a_32(b'foo') % 10}"
    wild = mapper(Mapping.build("foo.*", [Destination("bar.{{partition(10,1)}}")]))
    assert wild.map("foo.k") == f"bar.{fnv1a_32(b'k') % 10}"


@pytest.mark.parametrize(
    ("src", "dests", "text"),
    [
        ("a..b", [Destination("c")], "invalid subject"),
        ("a.*", [Destination("b.$2")],
         "invalid mapping destination: wildcard index out of range in $2: [2]"),
        ("a", [Destination("b", 60), Destination("c", 50)], "total weight needs to be <= 100"),
        ("a", [Destination("b", 10), Destination("b", 10)], 'duplicate entry for "b"'),
        ("a", [Destination("b", 101)], "individual weights need to be <= 100"),
        ("a.*", [Destination("b.{{left(1,1)}}")],
         "invalid mapping destination: unknown function in {{left(1,1)}}"),
    ],
)
def test_refusals(src: str, dests: list[Destination], text: str) -> None:
    with pytest.raises(TransformError) as exc:
        Mapping.build(src, dests)
    assert str(exc.value) == text
