"""A Ray cluster of several nodes on 127.0.0.1 for tests (``ray.cluster_utils.Cluster``).

Ray resolves ``127.0.0.1`` in an address to the machine's outward-facing IP unless clusters are
switched off for the platform (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read when ``ray`` is
imported); every node is started on 127.0.0.1 and the driver connects there too, so no test
traffic leaves the loopback interface."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = "127.0.0.1"
#: Node deaths noticed within about a second (Ray's defaults take tens of seconds).
FAST_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 2,
}


@contextlib.contextmanager
def loopback_cluster(nodes: int, cpus_per_node: float = 1.0) -> Iterator[Any]:
    """A head node with no CPUs (it schedules nothing) and ``nodes`` nodes of ``cpus_per_node``
    CPUs, the driver connected; shut down afterwards. Yields the ``Cluster``."""
    import ray
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    old_env = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    old_flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # for the processes Ray starts
    ray_constants.ENABLE_RAY_CLUSTER = False  # for this one, which imported ray already
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            "node_ip_address": LOOPBACK,
            "_system_config": FAST_HEALTH_CHECKS,
        },
    )
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=cpus_per_node, node_ip_address=LOOPBACK)
        cluster.wait_for_nodes()
        ray.init(
            address=cluster.address,
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}},
        )
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        ray_constants.ENABLE_RAY_CLUSTER = old_flag
        if old_env is None:
            os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        else:
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = old_env
