"""The mutation test: every deliberately broken safety rule of tests/sim/mutations.py is
caught by the simulator (the CI configuration, 3 replicas) within its bound of seeds,
and the seed that catches it passes with the real rule."""

from __future__ import annotations

import pytest

from jetraft.raft.sim import SimConfig, run_seed
from tests.sim.mutations import MUTATIONS, Mutation, first_catch


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_the_simulator_catches(mutation: Mutation) -> None:
    found = first_catch(mutation, SimConfig())
    assert found is not None, (
        f"{mutation.rule}: the broken variant {mutation.name} passed "
        f"{mutation.max_seeds} seeds"
    )
    seed, _error = found
    res = run_seed(seed, SimConfig())  # unpatched again: caught because it is wrong
    assert res.ok, f"seed {seed} fails with the real rules too: {res.error}"
