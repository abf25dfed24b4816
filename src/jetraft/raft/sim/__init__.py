"""Seeded deterministic simulator of a RAFT group: the real core and WAL, fake disk and net.

`run_seed(seed, SimConfig(nodes=3))` runs one seed and returns a SeedResult;
`python -m jetraft.raft.sim --seeds N` runs a campaign (see __main__).
"""

from .checker import Violation
from .world import SeedResult, SimConfig, World, run_seed

__all__ = ["SeedResult", "SimConfig", "Violation", "World", "run_seed"]
