"""Driver-side handle of the Evaluator actor: blocking calls with progress, and records.

Algorithms call ``evaluate``/``evaluate_many`` and get Arrow tables; they never see Ray.
Freshly executed rows are written to the run's Parquet files (with their traces) before the
caller sees them, so a decision never rests on a measurement that is not on storage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.evaluator import Evaluator
from rsi.progress import wait_with_progress
from rsi.records import RunRecords
from rsi.results import SCHEMA, Request


class EvaluatorClient:
    def __init__(self, actor, records: RunRecords | None):
        self.actor = actor
        self.records = records
        self._seq = 0
        #: Model spend of the rollouts this client ran (agent targets, counted at their model
        #: proxy): part of the run's budget beside the workers' (edit proposers') own spend.
        self.rollout_usage: dict[str, float] = {
            "rollout_tokens_in": 0,
            "rollout_tokens_out": 0,
            "rollout_cost_usd": 0.0,
        }

    @classmethod
    def start(
        cls,
        run_id: str,
        target,
        config,
        run_seed: int,
        deterministic: bool,
        records: RunRecords | None,
        name: str | None = None,
        fingerprint: str | None = None,
    ) -> EvaluatorClient:
        opts: dict[str, Any] = {"name": name, "lifetime": None} if name else {}
        # Pinned to the driver's node: it owns every rollout task of the run, and a lost driver
        # node ends the run anyway, so this placement adds no point of failure. (A soft affinity
        # is not enough: Ray places a zero-CPU actor elsewhere when the driver's node has no CPUs.)
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False
        )
        # ray.remote made Evaluator an ActorClass; mypy ignores class decorators (python/mypy#3135)
        actor = Evaluator.options(**opts).remote(  # type: ignore[attr-defined]
            run_id, target, config, run_seed, deterministic, fingerprint
        )
        return cls(actor, records)

    def split_ids(self, split: str) -> list[str]:
        return ray.get(self.actor.split_ids.remote(split))

    def preload(self, table: pa.Table) -> dict:
        return ray.get(self.actor.preload.remote(table))

    def stats(self) -> dict:
        return ray.get(self.actor.stats.remote())

    def evaluate(
        self, snapshot, split: str, task_ids=None, trials: int = 1, salt: str = "", label: str = ""
    ) -> pa.Table:
        return self.evaluate_many([Request(snapshot, split, task_ids, trials, salt)], label=label)[0]

    def evaluate_many(self, requests: Sequence[Request], label: str = "") -> list[pa.Table]:
        """Run several measurements concurrently (e.g. parent and candidate); order kept."""
        refs = [self.actor.evaluate.remote(r) for r in requests]
        pending = set(refs)

        def done(timeout: float) -> bool:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=timeout)
            pending.difference_update(ready)
            return not pending

        wait_with_progress(done, lambda: ray.get(self.actor.progress.remote()), label or "evaluating")
        return self._record([ray.get(ref) for ref in refs], requests)

    def evaluate_chained(
        self,
        groups: Sequence[Sequence[Request]],
        follow: Callable[[int, list[pa.Table]], Sequence[Request]],
        label: str = "",
    ) -> tuple[list[list[pa.Table]], list[list[pa.Table]]]:
        """Every group's requests at once; as soon as all of group ``i``'s results are in,
        ``follow(i, its tables)`` names the requests that follow from them (none: ``[]``), and
        those start at once, while other groups are still running. Returns the first stage's
        tables and the follow-ups' tables, per group and in order. Both stages are stored
        (one call each, as ``evaluate_many`` stores one) before this returns: ``follow`` sees
        a group's rows before they are on storage, so only what to measure next may rest on
        them, never a decision."""
        refs = [[self.actor.evaluate.remote(r) for r in g] for g in groups]
        owner = {ref: i for i, g in enumerate(refs) for ref in g}
        left = [len(g) for g in refs]
        later: list[list[Request]] = [[] for _ in groups]
        later_refs: list[list] = [[] for _ in groups]
        pending = set(owner)

        def start_follow_ups(i: int) -> None:
            later[i] = list(follow(i, [ray.get(ref)[0] for ref in refs[i]]))
            later_refs[i] = [self.actor.evaluate.remote(r) for r in later[i]]
            pending.update(later_refs[i])

        for i, g in enumerate(refs):
            if not g:
                start_follow_ups(i)

        def done(timeout: float) -> bool:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
            if ready:  # everything else that is in by now, without waiting
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            for ref in ready:
                pending.discard(ref)
                i = owner.get(ref)
                if i is not None:
                    left[i] -= 1
                    if left[i] == 0:
                        start_follow_ups(i)
            return not pending

        wait_with_progress(done, lambda: ray.get(self.actor.progress.remote()), label or "evaluating")
        first = [r for g in groups for r in g]
        tables = iter(self._record([ray.get(ref) for g in refs for ref in g], first))
        second = iter(self._record([ray.get(ref) for g in later_refs for ref in g], [r for g in later for r in g]))
        return [[next(tables) for _ in g] for g in groups], [[next(second) for _ in g] for g in later]

    def _record(self, results: list[tuple], requests: Sequence[Request]) -> list[pa.Table]:
        """Store the freshly executed rows of one call, all its requests together: one traces
        file and one Parquet file per call (a gate round's five measurements are one file,
        not five ~4 KB footers), written before any caller sees a row."""
        # The evaluator sends each row once, with a mask of the rows it executed for this call.
        results = [(table, table.filter(mask), traces) for table, mask, traces in results]
        tables = [table for table, _, _ in results]
        for _, fresh, _ in results:
            if fresh.num_rows:
                self.rollout_usage["rollout_tokens_in"] += int(pc.sum(fresh["tokens_in"]).as_py() or 0)
                self.rollout_usage["rollout_tokens_out"] += int(pc.sum(fresh["tokens_out"]).as_py() or 0)
                self.rollout_usage["rollout_cost_usd"] += float(pc.sum(fresh["cost_usd"]).as_py() or 0.0)
        if self.records is None or not any(fresh.num_rows for _, fresh, _ in results):
            return tables
        self._seq += 1
        tag = f"{'-'.join(sorted({r.split for r in requests}))}-{self._seq}"
        rel = self.records.write_traces([t for _, fresh, traces in results if fresh.num_rows for t in traces], tag)
        ref_col = SCHEMA.get_field_index("trace_ref")
        stored, out, offset = [], [], 0
        for table, fresh, traces in results:
            if fresh.num_rows == 0:
                out.append(table)
                continue
            refs = {(t["task_id"], t["trial"]): f"{rel}#{offset + i}" for i, t in enumerate(traces)}
            offset += len(traces)
            keys = list(zip(fresh["task_id"].to_pylist(), fresh["trial"].to_pylist()))
            stored.append(fresh.set_column(ref_col, "trace_ref", pa.array([refs[k] for k in keys], pa.string())))
            merged = [
                refs.get((t, k), r)
                for t, k, r in zip(
                    table["task_id"].to_pylist(), table["trial"].to_pylist(), table["trace_ref"].to_pylist()
                )
            ]
            out.append(table.set_column(ref_col, "trace_ref", pa.array(merged, pa.string())))
        self.records.write_rollouts(pa.concat_tables(stored), tag)
        return out
