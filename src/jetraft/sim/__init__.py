"""Simulators that need more of jetraft than the RAFT library: the seeded RAFT simulator
(jetraft.raft.sim) with the JetStream stream as its replicated state machine.

`python -m jetraft.sim --seeds N --jobs 2` runs a campaign whose seeds take turns among
the state machines (running hash, self-durable hash, JetStream stream); see __main__.
Nothing of the product imports this package (an import-linter contract says so).
"""

from .campaign import MACHINES, config_for, machine_of, run_seed_any

__all__ = ["MACHINES", "config_for", "machine_of", "run_seed_any"]
