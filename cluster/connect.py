"""Connecting to Ray: ``local`` starts Ray in-process on demand, ``auto`` joins the cluster
this process runs on (e.g. a ``ray job submit`` entrypoint), anything else is an address."""

from __future__ import annotations

import os

from rsi.errors import ClusterError


def connect(ray_cfg) -> str:
    """-> the Ray dashboard's URL ("" when none runs)."""
    import ray

    if ray.is_initialized():
        return ""
    # Ray worker processes' output stays in Ray's own log files (``ray logs``), never on the driver's console:
    # the live view and the decision lines are a run's only console output, so no line there
    # can come from anywhere but the driver. (Candidates' own output never reaches a Ray worker process's
    # stdout anyway: the sandbox captures it into the rollout's trace.)
    opts = dict(namespace=ray_cfg.namespace, log_to_driver=False, configure_logging=False)
    try:
        if ray_cfg.address == "local":
            context = ray.init(num_cpus=ray_cfg.num_cpus or os.cpu_count(), include_dashboard=False, **opts)
        else:
            context = ray.init(address=ray_cfg.address, **opts)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"could not connect to Ray at {ray_cfg.address!r}: {exc}") from exc
    url = getattr(context, "dashboard_url", "") or ""
    return url if not url or "://" in url else f"http://{url}"
