"""A seeded simulation of a JetStream cluster: the meta group and stream and consumer
groups on simulated servers, under faults (see world.py).

`run_cluster_seed(seed, ClusterConfig(servers=3))` runs one seed;
`python -m jetraft.sim --cluster --seeds N` runs a campaign.
"""

from .world import ClusterConfig, ClusterWorld, run_cluster_seed

__all__ = ["ClusterConfig", "ClusterWorld", "run_cluster_seed"]
