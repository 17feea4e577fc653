"""The remote rollout task: one batch of (task, trial, seed) on one snapshot -> Arrow rows.

Batching amortises Ray's per-task overhead when rollouts are short (a heuristic on one
instance takes milliseconds to a second). Each rollout still gets its own fresh copy of the
snapshot, so a candidate that writes into its working directory cannot affect the next one;
a target that only reads its snapshot (``needs_private_workdir = False``, e.g. a decision rule
run as an inner search) reads the node's pristine copy instead, and gets the whole batch in one
``Target.run_many`` call (the policy target runs it in one jail).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import ray

from rsi.results import rows_to_table
from rsi.snapshot import Snapshot

NODE_CACHE = Path(os.environ.get("RSI_NODE_CACHE", Path(tempfile.gettempdir()) / "rsi-snapshots"))


@dataclass(frozen=True)
class RolloutSpec:
    task_id: str
    trial: int
    sample_seed: int


def materialize_once(snapshot: Snapshot) -> Path:
    """The node's pristine copy of a snapshot, written once per node (atomic rename)."""
    dest = NODE_CACHE / snapshot.snapshot_id
    if dest.is_dir():
        return dest
    NODE_CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{snapshot.snapshot_id}-", dir=NODE_CACHE))
    snapshot.materialize(tmp)
    try:
        os.rename(tmp, dest)
    except OSError:  # another process on this node won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def run_batch(
    snapshot: Snapshot, target, tasks: dict, specs: list[RolloutSpec], run_id: str, split: str
) -> tuple[pa.Table, list[dict]]:
    pristine = materialize_once(snapshot)
    # Where each rollout ran: evidence for placement (custom resources) and for lost-node retries.
    node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    rows, traces = [], []
    private = getattr(target, "needs_private_workdir", True)
    batch = None
    if not private and hasattr(target, "run_many"):  # one call for the batch (the policy target: one jail)
        t0 = time.perf_counter()
        batch = target.run_many(pristine, [(tasks[s.task_id], s.trial, s.sample_seed) for s in specs])
        share = (time.perf_counter() - t0) / max(1, len(specs))
    for i, spec in enumerate(specs):
        if batch is not None:
            result = batch[i]
            duration = result.duration_s or share
        else:
            work = Path(tempfile.mkdtemp(prefix="rsi-rollout-")) if private else pristine
            try:
                if private:
                    shutil.copytree(pristine, work, dirs_exist_ok=True, symlinks=True)
                    os.chmod(work, 0o755)
                t0 = time.perf_counter()
                result = target.run(work, tasks[spec.task_id], spec.trial, spec.sample_seed)
                duration = result.duration_s or (time.perf_counter() - t0)
            finally:
                if private:
                    shutil.rmtree(work, ignore_errors=True)
        rows.append(
            {
                "run_id": run_id,
                "snapshot_id": snapshot.snapshot_id,
                "split": split,
                "task_id": spec.task_id,
                "trial": spec.trial,
                "sample_seed": spec.sample_seed,
                "score": float(result.score) if result.status == "ok" else 0.0,
                "status": result.status,
                "duration_s": float(duration),
                "tokens_in": result.tokens_in,
                "tokens_out": result.tokens_out,
                "cost_usd": result.cost_usd,
                "trace_ref": None,
                "metrics": result.metrics if result.status == "ok" else None,
            }
        )
        traces.append(
            {
                "task_id": spec.task_id,
                "trial": spec.trial,
                "snapshot_id": snapshot.snapshot_id,
                "split": split,
                "node_id": node_id,
                **result.trace,
            }
        )
    return rows_to_table(rows), traces
