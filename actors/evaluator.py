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
import functools
import hashlib
import itertools
import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray

from actors.rollout import RolloutSpec, run_batch
from rsi.config import EvaluatorConfig
from rsi.errors import ClusterError
from rsi.results import SCHEMA, Request, concat, empty_table, from_ipc


def sample_seed(run_seed: int, salt: str, task_id: str, trial: int) -> int:
    digest = hashlib.sha256(f"{run_seed}|{salt}|{task_id}|{trial}".encode()).digest()
    return int.from_bytes(digest[:7], "big")


@functools.cache
def _remote_batch():
    """One remote function for the process: Ray exports a function's code once per
    ``ray.remote`` object, which cost ~11 ms on every request when made per request."""
    return ray.remote(run_batch)


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
        self.cache: dict[tuple, tuple[int, int]] = {}  # key -> (stored table, row)
        self.chunks: list[pa.Table] = []
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
        self._remember(fresh)
        return {"cached": fresh.num_rows, "stale": table.num_rows - fresh.num_rows}

    def _remember(self, rows: pa.Table) -> None:
        """The cache holds Arrow data: each stored table once, and per key where its row is."""
        if not rows.num_rows:
            return
        rows = rows.select(SCHEMA.names).cast(SCHEMA).combine_chunks()
        chunk = len(self.chunks)
        self.chunks.append(rows)
        keys = zip(rows["snapshot_id"].to_pylist(), rows["task_id"].to_pylist(), rows["sample_seed"].to_pylist())
        for i, (snapshot_id, task_id, seed) in enumerate(keys):
            self.cache[(snapshot_id, task_id, seed, self.fingerprint)] = (chunk, i)

    def cached_row(self, key: tuple) -> dict | None:
        """One cached row as a dict (for inspection; the evaluator itself never converts rows)."""
        where = self.cache.get(key)
        return None if where is None else self.chunks[where[0]].slice(where[1], 1).to_pylist()[0]

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

    def evaluate(self, req: Request) -> tuple[pa.Table, pa.Array, list[dict]]:
        """-> (all rows of the request in its order, which of them were executed now (a boolean
        mask: the rest came from the cache), the executed rollouts' traces)."""
        specs = self._specs(req)
        hits: list[tuple[int, int, int]] = []  # (position in the request, chunk, row)
        todo: list[RolloutSpec] = []
        todo_at: list[int] = []
        for pos, spec in enumerate(specs):
            where = self.cache.get((req.snapshot.snapshot_id, spec.task_id, spec.sample_seed, self.fingerprint))
            if where is not None:
                hits.append((pos, *where))
            else:
                todo.append(spec)
                todo_at.append(pos)
        rid = next(self.req_ids)
        with self.lock:
            self.cache_hits += len(hits)
            self.progress_by_req[rid] = _Progress(total=len(specs), done=len(hits))
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
        self._remember(fresh)
        cached = self._gather(hits, req.split, [specs[pos].trial for pos, _, _ in hits])
        # Both parts are in request order already (fresh rows come back in batch order): one
        # stable argsort of their positions interleaves them, with no per-row Python.
        table = concat([cached, fresh])
        positions = np.array([pos for pos, _, _ in hits] + todo_at, dtype=np.int64)
        order = np.argsort(positions, kind="stable")
        mask = np.zeros(len(order), dtype=bool)
        mask[len(hits) :] = True
        if not len(order):
            return empty_table(), pa.array([], pa.bool_()), traces
        return table.take(pa.array(order)), pa.array(mask[order]), traces

    def _gather(self, hits: list[tuple[int, int, int]], split: str, trials: list[int]) -> pa.Table:
        """Cached rows, in the order of ``hits``, relabelled with the request's split and trials."""
        if not hits:
            return empty_table()
        parts: list[pa.Table] = []
        run: list[tuple[int, int]] = []
        for _, chunk, row in hits:  # consecutive hits from one stored table: one take
            if run and run[-1][0] != chunk:
                parts.append(self.chunks[run[0][0]].take(pa.array([r for _, r in run], pa.int64())))
                run = []
            run.append((chunk, row))
        parts.append(self.chunks[run[0][0]].take(pa.array([r for _, r in run], pa.int64())))
        table = pa.concat_tables(parts)
        table = table.set_column(SCHEMA.get_field_index("split"), "split", pa.array([split] * len(hits), pa.string()))
        return table.set_column(SCHEMA.get_field_index("trial"), "trial", pa.array(trials, SCHEMA.field("trial").type))

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

    def _lost(self, i: int, n: int, exc: Exception) -> ClusterError:
        """A batch lost past its retries. Ray's WorkerCrashedError does not say where the
        worker ran: name the nodes that could run this batch (the one node of a single
        machine); a NodeDiedError's own text, kept, names the node that died."""
        need = {"CPU": self.config.num_cpus, **self.config.resources}
        nodes = [
            f"{nd['NodeID']} ({nd['NodeManagerAddress']}{'' if nd['Alive'] else ', dead'})"
            for nd in ray.nodes()
            if all(nd["Resources"].get(k, 0) >= v for k, v in need.items())
        ]
        where = (
            f"node {nodes[0]}"
            if len(nodes) == 1
            else f"one of nodes {', '.join(nodes[:8])}" + (f" and {len(nodes) - 8} more" if len(nodes) > 8 else "")
        )
        return ClusterError(
            f"rollout batch {i} ({n} rollouts) lost after {self.config.max_retries} "
            f"retries on {where}: {type(exc).__name__}: {exc}"
        )

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
        remote = _remote_batch().options(
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
                # The batch's own tasks travel with it (the whole split, unpickled per batch, was
                # most of the fan-out's cost); the target travels as a ref, resolved once per worker.
                tasks = {spec.task_id: self.tasks[req.split][spec.task_id] for spec in batch}
                ref = remote.remote(snap_ref, [self.target_ref], tasks, batch, self.run_id, req.split, plan.threads)
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
                    raise self._lost(i, n, exc) from exc
                returned[i] = time.time()
                with self.lock:
                    self.progress_by_req[rid].done += n
                    self.executed += n
        tables = [from_ipc(results[i][0]) for i in sorted(results)]
        batching = {"cluster_cpus": seen, "size": plan.size, "threads": plan.threads, "sized_at": sized_at}
        # How each rollout was batched: the CPUs the request saw, its batch size, when it was
        # sized and when the batch's results came back (epoch seconds): evidence for placement
        # and throughput on a cluster that changes under the run.
        traces = [
            {**t, "batch": {**batching, "index": i, "returned_at": returned[i]}}
            for i in sorted(results)
            for t in results[i][1]
        ]
        return concat(tables), traces
