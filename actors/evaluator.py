"""Evaluator: one actor per run that turns "measure this snapshot on these tasks" into
batched remote rollout tasks and one Arrow table.

It owns the rollout cache, keyed by ``(snapshot_id, task_id, sample_seed, target
fingerprint)``: resume preloads it from the run's Parquet files, so a finished rollout is never
run twice. Remote tasks retry on infrastructure failure only (``max_retries`` for lost nodes and
killed processes; ``retry_exceptions`` stays off, and a candidate's own failure is a status,
never an exception).
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import math
import threading
import time
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import ray

from actors.rollout import RolloutSpec, run_batch
from rsi.config import EvaluatorConfig
from rsi.errors import ClusterError
from rsi.results import Request, concat, empty_table, rows_to_table


def sample_seed(run_seed: int, salt: str, task_id: str, trial: int) -> int:
    digest = hashlib.sha256(f"{run_seed}|{salt}|{task_id}|{trial}".encode()).digest()
    return int.from_bytes(digest[:7], "big")


@dataclass(frozen=True)
class Plan:
    """How one request's rollouts fan out."""

    size: int  # rollouts per remote task
    threads: int  # rollouts a task runs at once (model-bound rollouts wait; they do not compute)
    in_flight: int  # remote tasks in flight at once


@dataclass
class _Progress:
    total: int = 0
    done: int = 0
    started: float = field(default_factory=time.monotonic)


# ray's typed overloads of ray.remote(...) list task options only, not an actor's max_concurrency
@ray.remote(num_cpus=0, max_concurrency=32)  # type: ignore[call-overload]
class Evaluator:
    def __init__(
        self,
        run_id: str,
        target,
        config: EvaluatorConfig,
        run_seed: int,
        deterministic: bool,
        fingerprint: str | None = None,
    ):
        self.run_id = run_id
        self.target_ref = ray.put(target)
        # The driver passes the fingerprint of the target as configured; a target it rebuilt
        # for this process only (a local model server's port) must not change the cache key.
        self.fingerprint = fingerprint or target.fingerprint()
        self.config = config
        self.run_seed = run_seed
        self.deterministic = deterministic
        self.tasks = {s: {t.task_id: t for t in target.benchmark.split(s)} for s in ("train", "dev", "test")}
        self.tasks_refs = {s: ray.put(v) for s, v in self.tasks.items()}
        self.cache: dict[tuple, dict] = {}
        self.lock = threading.Lock()
        self.progress_by_req: dict[int, _Progress] = {}
        self.req_ids = itertools.count()
        self.executed = 0
        self.cache_hits = 0
        self.cpus = max(1, self._live_cpus())  # refreshed by every request that runs rollouts
        # A target whose rollouts take milliseconds suggests large batches (policy: inner searches).
        self.batch_hint = getattr(target, "batch_hint", None)

    # ---- public ----------------------------------------------------------------------------
    def split_ids(self, split: str) -> list[str]:
        return list(self.tasks[split])

    def preload(self, table: pa.Table) -> dict:
        """Resume: stored rows measured under this target's fingerprint become cache entries.
        Rows of another fingerprint (the benchmark, harness or limits changed) or of none (a run
        from before rows carried it) are never trusted: those rollouts run again when asked.
        -> ``{"cached": n, "stale": m}``."""
        fresh = table.filter(pc.equal(table["fingerprint"], self.fingerprint))
        for row in fresh.to_pylist():
            self.cache[(row["snapshot_id"], row["task_id"], row["sample_seed"], row["fingerprint"])] = row
        return {"cached": fresh.num_rows, "stale": table.num_rows - fresh.num_rows}

    def progress(self) -> dict:
        with self.lock:
            live = list(self.progress_by_req.values())
        return {
            "done": sum(p.done for p in live),
            "total": sum(p.total for p in live),
            "executed": self.executed,
            "cache_hits": self.cache_hits,
        }

    def stats(self) -> dict:
        return {"executed": self.executed, "cache_hits": self.cache_hits, "cached_rows": len(self.cache)}

    def evaluate(self, req: Request) -> tuple[pa.Table, pa.Table, list[dict]]:
        """-> (all rows of the request, freshly executed rows, their traces)."""
        specs = self._specs(req)
        cached, todo = [], []
        for spec in specs:
            row = self.cache.get((req.snapshot.snapshot_id, spec.task_id, spec.sample_seed, self.fingerprint))
            if row is not None:
                cached.append({**row, "split": req.split, "trial": spec.trial})
            else:
                todo.append(spec)
        rid = next(self.req_ids)
        with self.lock:
            self.cache_hits += len(cached)
            self.progress_by_req[rid] = _Progress(total=len(specs), done=len(cached))
        try:
            fresh, traces = self._run(req, todo, rid)
            fresh = fresh.set_column(
                fresh.schema.get_field_index("fingerprint"),
                "fingerprint",
                pa.array([self.fingerprint] * fresh.num_rows, pa.string()),
            )
        finally:
            with self.lock:
                self.progress_by_req.pop(rid, None)
        for row in fresh.to_pylist():
            self.cache[(row["snapshot_id"], row["task_id"], row["sample_seed"], self.fingerprint)] = row
        order = {(s.task_id, s.trial): i for i, s in enumerate(specs)}
        table = concat([rows_to_table(cached), fresh])
        idx = sorted(
            range(table.num_rows), key=lambda i: order[(table["task_id"][i].as_py(), table["trial"][i].as_py())]
        )
        return table.take(pa.array(idx, pa.int64())) if idx else empty_table(), fresh, traces

    # ---- internals -----------------------------------------------------------------------
    def _specs(self, req: Request) -> list[RolloutSpec]:
        ids = list(self.tasks[req.split]) if req.task_ids is None else list(req.task_ids)
        unknown = [t for t in ids if t not in self.tasks[req.split]]
        if unknown:
            raise ValueError(f"tasks {unknown[:3]} are not in split {req.split}")
        return [
            RolloutSpec(t, k, k if self.deterministic else sample_seed(self.run_seed, req.salt, t, k))
            for k in range(req.trials)
            for t in ids
        ]

    @staticmethod
    def _live_cpus() -> int:
        """The cluster's CPUs now (0 while an autoscaling cluster has no worker node): one GCS
        read. An autoscaling cluster grows and shrinks under a run, so every request that runs
        rollouts sizes its batches from this, never from the cluster the actor first saw."""
        return int(ray.cluster_resources().get("CPU", 0))

    def _plan(self, n: int, cpus: int | None = None) -> Plan:
        """CPU-bound rollouts (``num_cpus`` >= 1) run one at a time per task, so
        ``max_concurrency`` caps the tasks in flight. Model-bound rollouts (``num_cpus`` < 1)
        mostly wait on a model: about two tasks per CPU in flight, each running its share of
        the ``max_concurrency`` lanes at once on threads, so a few Ray worker processes hold
        every lane and in-flight rollouts never exceed the cap."""
        cpus = cpus or self.cpus
        cap = self.config.max_concurrency
        if self.config.num_cpus >= 1:
            size = self._batch_size(n, cpus)
            return Plan(size, 1, cap or max(1, math.ceil(n / size)))
        lanes = max(1, min(n, cap or n))
        size = self.config.batch_size or max(1, math.ceil(lanes / (2 * cpus)))
        threads = min(size, lanes)
        if lanes == n:  # the cap does not bind: every task at once
            return Plan(size, threads, max(1, math.ceil(n / size)))
        return Plan(size, threads, max(1, lanes // threads))

    def _batch_size(self, n: int, cpus: int | None = None) -> int:
        """Rollouts per task for CPU-bound work: small enough that every CPU gets about four."""
        cpus = cpus or self.cpus
        if self.config.batch_size:
            return self.config.batch_size
        if self.batch_hint:  # equal batches, a whole number per CPU, none over the hint: no lone tail batch
            per_cpu = math.ceil(n / cpus)
            return max(1, math.ceil(per_cpu / math.ceil(per_cpu / self.batch_hint)))
        return max(1, min(8, math.ceil(n / (cpus * 4))))

    def _run(self, req: Request, todo: list[RolloutSpec], rid: int) -> tuple[pa.Table, list[dict]]:
        if not todo:
            return empty_table(), []
        # Sized for the cluster as it is now (a node may have joined or left since the last
        # request); results never depend on it: seeds and cache keys are per rollout.
        seen, sized_at = self._live_cpus(), time.time()
        self.cpus = cpus = max(1, seen)
        plan = self._plan(len(todo), cpus)
        size = plan.size
        batches = [todo[i : i + size] for i in range(0, len(todo), size)]
        remote = ray.remote(run_batch).options(
            num_cpus=self.config.num_cpus,
            resources=self.config.resources or None,
            max_retries=self.config.max_retries,
            retry_exceptions=False,
            # Waiting rollouts spread over the nodes: a task holding no CPU would otherwise pile
            # onto the first node with room.
            scheduling_strategy="SPREAD" if self.config.num_cpus < 1 else "DEFAULT",
        )
        snap_ref = ray.put(req.snapshot)
        pending: dict = {}
        results: dict[int, tuple] = {}
        returned: dict[int, float] = {}
        queue = collections.deque(enumerate(batches))
        while queue or pending:
            while queue and len(pending) < plan.in_flight:
                i, batch = queue.popleft()
                ref = remote.remote(
                    snap_ref, self.target_ref, self.tasks_refs[req.split], batch, self.run_id, req.split, plan.threads
                )
                pending[ref] = (i, len(batch))
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i, n = pending.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except (
                    ray.exceptions.WorkerCrashedError,
                    ray.exceptions.NodeDiedError,
                    ray.exceptions.ObjectLostError,
                ) as exc:
                    # Ray's WorkerCrashedError does not say where the worker ran: name the nodes
                    # that could run this batch (the one node of a single machine); a
                    # NodeDiedError's own text, kept below, names the node that died.
                    need = {"CPU": self.config.num_cpus, **self.config.resources}
                    nodes = [
                        f"{nd['NodeID']} ({nd['NodeManagerAddress']}{'' if nd['Alive'] else ', dead'})"
                        for nd in ray.nodes()
                        if all(nd["Resources"].get(k, 0) >= v for k, v in need.items())
                    ]
                    where = (
                        f"node {nodes[0]}"
                        if len(nodes) == 1
                        else f"one of nodes {', '.join(nodes[:8])}"
                        + (f" and {len(nodes) - 8} more" if len(nodes) > 8 else "")
                    )
                    raise ClusterError(
                        f"rollout batch {i} ({n} rollouts) lost after {self.config.max_retries} "
                        f"retries on {where}: {type(exc).__name__}: {exc}"
                    ) from exc
                returned[i] = time.time()
                with self.lock:
                    self.progress_by_req[rid].done += n
                    self.executed += n
        tables = [results[i][0] for i in sorted(results)]
        # How each rollout was batched: the CPUs the request saw, its batch size, when it was
        # sized and when the batch's results came back (epoch seconds): evidence for placement
        # and throughput on a cluster that changes under the run.
        traces = [
            {
                **t,
                "batch": {
                    "cluster_cpus": seen,
                    "size": size,
                    "threads": plan.threads,
                    "index": i,
                    "sized_at": sized_at,
                    "returned_at": returned[i],
                },
            }
            for i in sorted(results)
            for t in results[i][1]
        ]
        return concat(tables), traces
