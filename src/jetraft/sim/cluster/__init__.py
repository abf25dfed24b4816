"""A seeded simulation of a JetStream cluster: the meta group and stream and consumer
groups on simulated servers, under faults (see world.py).

`run_cluster_seed(seed, ClusterConfig(servers=3))` runs one seed;
`python -m jetraft.sim --cluster --seeds N` runs a campaign.
"""

from .fixes import ALL_FIXES, FIXES
from .world import (
    ClusterConfig,
    ClusterWorld,
    cluster_config,
    run_cluster_any,
    run_cluster_seed,
)

__all__ = ["ALL_FIXES", "FIXES", "ClusterConfig", "ClusterWorld", "cluster_config",
           "run_cluster_any", "run_cluster_seed"]
