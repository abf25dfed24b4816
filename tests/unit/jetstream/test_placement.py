"""Placement of a group's servers: nats-server's rules as a pure function."""

from __future__ import annotations

import random

import pytest

from jetraft.jetstream.placement import PlacementError, ServerFacts, group_name, select_peers


def servers(*specs: tuple[str, str, bool, int]) -> list[ServerFacts]:
    return [ServerFacts(name, "C1", frozenset(t for t in tags.split(",") if t), online, load)
            for name, tags, online, load in specs]


FIVE = servers(
    ("n1", "az:1,ssd", True, 3),
    ("n2", "az:1", True, 0),
    ("n3", "az:2,ssd", True, 1),
    ("n4", "az:2", True, 2),
    ("n5", "az:3", True, 5),
)


def test_least_loaded_servers_first() -> None:
    assert select_peers(3, FIVE, cluster="C1") == ["n2", "n3", "n4"]


def test_tags_must_match_and_negated_tags_exclude() -> None:
    assert sorted(select_peers(2, FIVE, cluster="C1", tags=["ssd"])) == ["n1", "n3"]
    with pytest.raises(PlacementError) as err:
        select_peers(3, FIVE, cluster="C1", tags=["ssd"])
    assert err.value.text == "no suitable peers for placement, tags not matched ['ssd']"
    assert "n1" not in select_peers(3, FIVE, cluster="C1", tags=["!ssd"])


def test_unique_tag_spreads_over_zones() -> None:
    chosen = select_peers(3, FIVE, cluster="C1", unique_tag="az:")
    zones = {next(t for t in s.tags if t.startswith("az:")) for s in FIVE if s.name in chosen}
    assert len(zones) == 3
    with pytest.raises(PlacementError) as err:
        select_peers(4, FIVE, cluster="C1", unique_tag="az:")
    assert "server tag not unique" in err.value.text


def test_existing_members_stay_and_excluded_never_come_back() -> None:
    out = select_peers(3, FIVE, cluster="C1", existing=["n5", "n1"], exclude=["n2"])
    assert out[:2] == ["n5", "n1"] and out[2] not in ("n2",)
    assert select_peers(1, FIVE, cluster="C1", existing=["n4", "n1"]) == ["n4"]


def test_offline_servers_and_other_clusters_do_not_qualify() -> None:
    mixed = [*servers(("a", "", False, 0), ("b", "", True, 0)),
             ServerFacts("c", "OTHER", frozenset(), True, 0)]
    with pytest.raises(PlacementError) as err:
        select_peers(2, mixed, cluster="C1")
    assert err.value.text == "no suitable peers for placement, peer offline"
    assert select_peers(1, mixed, cluster="C1") == ["b"]
    with pytest.raises(PlacementError) as err:
        select_peers(1, mixed, cluster="NOPE")
    assert "jetstream not enabled in cluster" in err.value.text


def test_servers_tagged_not_for_jetstream_are_never_used() -> None:
    s = servers(("a", "!jetstream", True, 0), ("b", "", True, 9))
    assert select_peers(1, s, cluster="C1") == ["b"]


def test_group_names_have_nats_servers_shape() -> None:
    name = group_name("S", 3, "file", random.Random(1))
    assert name.startswith("S-R3F-") and len(name) == len("S-R3F-") + 8
    assert group_name("C", 1, "memory", random.Random(1)).startswith("C-R1M-")
