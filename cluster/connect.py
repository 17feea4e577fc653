"""Connecting to Ray: ``local`` starts Ray in-process on demand, ``auto`` joins the cluster
this process runs on (e.g. a ``ray job submit`` entrypoint), anything else is an address."""

from __future__ import annotations

import os

from rsi.errors import ClusterError


def connect(ray_cfg) -> None:
    import ray

    if ray.is_initialized():
        return
    # Our Ray workers must import this checkout's packages exactly as the driver does.
    opts = dict(namespace=ray_cfg.namespace, log_to_driver=True, configure_logging=False)
    try:
        if ray_cfg.address == "local":
            ray.init(num_cpus=ray_cfg.num_cpus or os.cpu_count(), include_dashboard=False, **opts)
        else:
            ray.init(address=ray_cfg.address, **opts)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"could not connect to Ray at {ray_cfg.address!r}: {exc}") from exc
