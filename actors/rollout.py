"""The remote rollout task: one batch of (task, trial, seed) on one snapshot -> Arrow rows.

Batching amortises Ray's per-task overhead when rollouts are short (a heuristic on one
instance takes milliseconds to a second). Each rollout still starts from an unmodified copy of
the snapshot, so a candidate that writes into its working directory cannot affect the next one;
a target that only reads its snapshot (``needs_private_workdir = False``: a jailed program,
whose jail copies the checkout into its own tmpfs, or a decision rule run as an inner search)
reads the node's pristine copy instead; a target that overrides ``Target.run_many`` gets the
whole batch in one call (the policy target runs it in one jail).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import ray

from rsi.results import rows_to_table, to_ipc
from rsi.snapshot import Snapshot
from rsi.target import Target

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


_RESOLVED: dict = {}  # this worker process's deserialized targets, by object id


def resolve_once(ref):
    """The object behind ``ref``, deserialized once per worker process: a target is the same
    object for a whole run, and unpickling it for every batch cost more than the batch."""
    key = ref.hex()  # the id, not the ref: holding the ref would pin the object in the store
    if key not in _RESOLVED:
        if len(_RESOLVED) >= 8:  # a run has one target; a long-lived worker may serve several
            _RESOLVED.pop(next(iter(_RESOLVED)))
        _RESOLVED[key] = ray.get(ref)
    return _RESOLVED[key]


def run_batch(
    snapshot: Snapshot,
    target,
    tasks: dict,
    specs: list[RolloutSpec],
    run_id: str,
    split: str,
    threads: int = 1,
) -> tuple[bytes, list[dict]]:
    """Rows as Arrow IPC bytes (``rsi.results.from_ipc``), and one trace per rollout.
    ``tasks``: the batch's own tasks by id. ``target``: the target, or a one-element list
    holding its object ref (resolved once per worker process). ``threads`` > 1 runs that many
    rollouts of the batch at once: model-bound rollouts spend their time waiting on a model, so
    one Ray task holding no CPU overlaps many of them."""
    target = resolve_once(target[0]) if isinstance(target, list) else target
    pristine = materialize_once(snapshot)
    # Where each rollout ran: evidence for placement (custom resources) and for lost-node retries.
    node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    private = getattr(target, "needs_private_workdir", True)
    if not private and threads <= 1 and type(target).run_many is not Target.run_many:
        # One call for the batch: a target that shares one sandbox across it (the policy
        # target: one jail for all its inner searches).
        t0 = time.perf_counter()
        batch = target.run_many(pristine, [(tasks[s.task_id], s.trial, s.sample_seed) for s in specs])
        share = (time.perf_counter() - t0) / max(1, len(specs))
        results = [(r, r.duration_s or share) for r in batch]
    else:

        def one(spec: RolloutSpec):
            work = Path(tempfile.mkdtemp(prefix="rsi-rollout-")) if private else pristine
            try:
                if private:
                    shutil.copytree(pristine, work, dirs_exist_ok=True, symlinks=True)
                    os.chmod(work, 0o755)
                t0 = time.perf_counter()
                result = target.run(work, tasks[spec.task_id], spec.trial, spec.sample_seed)
                return result, result.duration_s or (time.perf_counter() - t0)
            finally:
                if private:
                    shutil.rmtree(work, ignore_errors=True)

        if threads > 1 and len(specs) > 1:
            with ThreadPoolExecutor(min(threads, len(specs)), thread_name_prefix="rollout") as pool:
                results = list(pool.map(one, specs))
        else:
            results = [one(spec) for spec in specs]
    rows = [_row(run_id, snapshot, split, spec, result, duration) for spec, (result, duration) in zip(specs, results)]
    traces = [
        {
            "task_id": spec.task_id,
            "trial": spec.trial,
            "snapshot_id": snapshot.snapshot_id,
            "split": split,
            "node_id": node_id,
            **result.trace,
        }
        for spec, (result, _) in zip(specs, results)
    ]
    return to_ipc(rows_to_table(rows)), traces


def _row(run_id: str, snapshot: Snapshot, split: str, spec: RolloutSpec, result, duration: float) -> dict:
    ok = result.status == "ok"
    return {
        "run_id": run_id,
        "snapshot_id": snapshot.snapshot_id,
        "split": split,
        "task_id": spec.task_id,
        "trial": spec.trial,
        "sample_seed": spec.sample_seed,
        "score": float(result.score) if ok else 0.0,
        "status": result.status,
        "duration_s": float(duration),
        "tokens_in": result.tokens_in,
        "tokens_out": result.tokens_out,
        "cost_usd": result.cost_usd,
        "trace_ref": None,
        "metrics": result.metrics if ok else None,
    }
