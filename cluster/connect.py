"""Connecting to Ray: ``local`` starts Ray in-process on demand, ``auto`` joins the cluster
this process runs on (e.g. a ``ray job submit`` entrypoint), anything else is an address."""

from __future__ import annotations

import contextlib
import os
import tempfile

from rsi.errors import ClusterError


@contextlib.contextmanager
def _stderr_captured(sink: list[bytes]):
    """Ray's core library writes start-up notices (token auth, the local IP lookup) straight to
    file descriptor 2, past Python's logging: they are kept for the run directory instead, so
    the live view and the decision lines stay a run's only console output."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            sink.append(capture.read())


def connect(ray_cfg, startup_log: list[bytes] | None = None) -> str:
    """-> the Ray dashboard's URL ("" when none runs). ``startup_log`` receives what Ray's
    start-up wrote to stderr (the caller keeps it in the run directory)."""
    import ray

    if ray.is_initialized():
        return ""
    sink = startup_log if startup_log is not None else []
    # Ray worker processes' output stays in Ray's own log files (``ray logs``), never on the
    # driver's console: the live view and the decision lines are a run's only console output,
    # so no line there can come from anywhere but the driver. (Candidates' own output never
    # reaches a Ray worker process's stdout anyway: the sandbox captures it into the trace.)
    opts = dict(namespace=ray_cfg.namespace, log_to_driver=False, configure_logging=False)
    try:
        with _stderr_captured(sink):
            if ray_cfg.address == "local":
                # address="local": always a new Ray of the run's own, never one that happens to
                # run on this machine (a bare ray.init() joins any cluster `ray start` left).
                context = ray.init(
                    address="local", num_cpus=ray_cfg.num_cpus or os.cpu_count(), include_dashboard=False, **opts
                )
            else:
                context = ray.init(address=ray_cfg.address, **opts)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        said = b"".join(sink).decode(errors="replace").strip().splitlines()
        tail = f" (Ray said: {said[-1][:300]})" if said else ""
        raise ClusterError(f"could not connect to Ray at {ray_cfg.address!r}: {exc}{tail}") from exc
    url = getattr(context, "dashboard_url", "") or ""
    return url if not url or "://" in url else f"http://{url}"
