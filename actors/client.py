"""Driver-side handle of the Evaluator actor: blocking calls with progress, and records.

Algorithms call ``evaluate``/``evaluate_many`` and get Arrow tables; they never see Ray.
Freshly executed rows are written to the run's Parquet files (with their traces) before the
caller sees them, so a decision never rests on a measurement that is not on storage.
"""

from __future__ import annotations

import pyarrow as pa
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.evaluator import Evaluator
from rsi.results import Request
from rsi.progress import wait_with_progress
from rsi.records import RunRecords
from rsi.results import SCHEMA


class EvaluatorClient:
    def __init__(self, actor, records: RunRecords | None):
        self.actor = actor
        self.records = records
        self._seq = 0

    @classmethod
    def start(cls, run_id: str, target, config, run_seed: int, deterministic: bool, records: RunRecords | None,
              name: str | None = None):
        opts = {"name": name, "lifetime": None} if name else {}
        # Pinned to the driver's node: it owns every rollout task of the run, and a lost driver
        # node ends the run anyway, so this placement adds no point of failure. (A soft affinity
        # is not enough: Ray places a zero-CPU actor elsewhere when the driver's node has no CPUs.)
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        actor = Evaluator.options(**opts).remote(run_id, target, config, run_seed, deterministic)
        return cls(actor, records)

    def split_ids(self, split: str) -> list[str]:
        return ray.get(self.actor.split_ids.remote(split))

    def preload(self, table: pa.Table) -> int:
        return ray.get(self.actor.preload.remote(table))

    def stats(self) -> dict:
        return ray.get(self.actor.stats.remote())

    def evaluate(self, snapshot, split: str, task_ids=None, trials: int = 1, salt: str = "", label: str = "") -> pa.Table:
        return self.evaluate_many([Request(snapshot, split, task_ids, trials, salt)], label=label)[0]

    def evaluate_many(self, requests: list[Request], label: str = "") -> list[pa.Table]:
        """Run several measurements concurrently (e.g. parent and candidate); order kept."""
        refs = [self.actor.evaluate.remote(r) for r in requests]
        pending = set(refs)

        def done(timeout: float) -> bool:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=timeout)
            pending.difference_update(ready)
            return not pending

        wait_with_progress(done, lambda: ray.get(self.actor.progress.remote()), label or "evaluating")
        out = []
        for req, ref in zip(requests, refs):
            table, fresh, traces = ray.get(ref)
            out.append(self._record(table, fresh, traces, req.split))
        return out

    def _record(self, table: pa.Table, fresh: pa.Table, traces: list[dict], split: str) -> pa.Table:
        if self.records is None or fresh.num_rows == 0:
            return table
        self._seq += 1
        rel = self.records.write_traces(traces, f"{split}-{self._seq}")
        refs = {(t["task_id"], t["trial"]): f"{rel}#{i}" for i, t in enumerate(traces)}
        fresh = fresh.set_column(SCHEMA.get_field_index("trace_ref"), "trace_ref",
                                 pa.array([refs[(t, k)] for t, k in zip(fresh["task_id"].to_pylist(),
                                                                       fresh["trial"].to_pylist())], pa.string()))
        self.records.write_rollouts(fresh, f"{split}-{self._seq}")
        lookup = {(t, k): r for t, k, r in zip(fresh["task_id"].to_pylist(), fresh["trial"].to_pylist(),
                                               fresh["trace_ref"].to_pylist())}
        merged = [lookup.get((t, k), r) for t, k, r in zip(table["task_id"].to_pylist(), table["trial"].to_pylist(),
                                                           table["trace_ref"].to_pylist())]
        return table.set_column(SCHEMA.get_field_index("trace_ref"), "trace_ref", pa.array(merged, pa.string()))
