"""The leader's next step towards a group's assigned membership (jetstream.reconcile)."""

from __future__ import annotations

from jetraft.jetstream.reconcile import Step, StepKind, next_step
from jetraft.raft.membership import ChangeKind, MembershipChange


def walk(want: list[str], voters: list[str], me: str) -> list[tuple[str, str]]:
    """Carry out every step, a learner catching up at once; the leader follows a
    transfer. Returns the steps taken."""
    learners: list[str] = []
    steps: list[tuple[str, str]] = []
    for _ in range(30):
        step = next_step(want, voters, learners, me, caught_up=learners)
        if step is None:
            return steps
        steps.append((step.kind.value, step.peer))
        if step.kind is StepKind.ADD_LEARNER:
            learners.append(step.peer)
        elif step.kind is StepKind.PROMOTE:
            learners.remove(step.peer)
            voters.append(step.peer)
        elif step.kind is StepKind.REMOVE:
            (learners if step.peer in learners else voters).remove(step.peer)
        elif step.kind is StepKind.TRANSFER:
            me = step.peer
    raise AssertionError(f"no end: {steps}")


def test_nothing_to_do_when_the_group_matches() -> None:
    assert next_step(["a", "b", "c"], ["c", "b", "a"], [], "a") is None


def test_replacing_a_peer_adds_before_it_removes() -> None:
    voters = ["a", "b", "c"]
    steps = walk(["a", "b", "d"], voters, "a")
    assert steps == [("add_learner", "d"), ("promote", "d"), ("remove", "c")]
    assert sorted(voters) == ["a", "b", "d"]


def test_an_unwanted_leader_hands_over_and_is_removed_by_the_next() -> None:
    voters = ["a", "b", "c"]
    steps = walk(["b", "c", "d"], voters, "a")
    assert steps == [("add_learner", "d"), ("promote", "d"), ("transfer", "b"),
                     ("remove", "a")]
    assert sorted(voters) == ["b", "c", "d"]


def test_scaling_one_to_five_and_back() -> None:
    voters = ["a"]
    walk(["a", "b", "c", "d", "e"], voters, "a")
    assert sorted(voters) == ["a", "b", "c", "d", "e"]
    steps = walk(["c"], voters, "a")
    assert sorted(voters) == ["c"]
    assert steps[-2:] == [("transfer", "c"), ("remove", "a")]


def test_a_learner_not_caught_up_is_waited_for_before_anything_is_removed() -> None:
    step = next_step(["a", "b", "d"], ["a", "b", "c"], ["d"], "a", caught_up=())
    assert step == Step(StepKind.CATCH_UP, "d")


def test_a_wanted_learner_left_by_an_earlier_leader_is_promoted() -> None:
    # The leader that added it lost leadership before promoting it.
    step = next_step(["a", "b", "c"], ["a", "b"], ["c"], "b", caught_up=["c"])
    assert step == Step(StepKind.PROMOTE, "c")


def test_unwanted_learners_go_before_unwanted_voters() -> None:
    step = next_step(["a"], ["a", "b"], ["x"], "a")
    assert step == Step(StepKind.REMOVE, "x")


def test_an_unwanted_leader_without_a_wanted_voter_waits() -> None:
    # Its replacement is still a learner: promoted first (rule 1), then the transfer.
    assert next_step(["d"], ["a"], ["d"], "a", caught_up=[]) == Step(StepKind.CATCH_UP, "d")
    assert next_step(["d"], ["a"], [], "a") == Step(StepKind.ADD_LEARNER, "d")


def test_steps_map_onto_membership_changes() -> None:
    assert Step(StepKind.REMOVE, "x").change() == MembershipChange(ChangeKind.REMOVE, "x")
    assert Step(StepKind.PROMOTE, "x").change() == MembershipChange(ChangeKind.PROMOTE, "x")
    assert Step(StepKind.TRANSFER, "x").change() is None
    assert Step(StepKind.CATCH_UP, "x").change() is None
