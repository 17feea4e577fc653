"""``hillclimb``: a (1+1) hill climber, optionally with restarts from the seed
(docs/algorithms/hillclimb.md).

The control for DarwinX: the same worker proposes one edit of the current version per step,
the child is measured on the whole train pool, and it becomes the current version when its
train mean is at least the current one's. No screen, no archive, no recombination, no
preservation gate. With ``restart_after`` K, the climb returns to the seed after K measured
children in a row that did not raise the current mean. ``max_rollouts`` caps the rollouts the
run executes (the runner's single test measurement is not counted), so a control can be given
exactly the rollouts another run spent.
"""

from __future__ import annotations

import pyarrow as pa
from pydantic import Field

from rsi.algorithm import Algorithm, AlgorithmParams
from rsi.results import ScoreMatrix
from rsi.snapshot import Snapshot

TOLERANCE = 1e-12

PROMPT = """\
You are improving the target in this directory (your working directory is a checkout of
version {parent_id}, train mean {train_mean:.4f} over {tasks} tasks). Edit the files directly;
your change is measured on every train task and kept if its mean is at least the current one.
Make one focused change. End your reply with a short description of what you changed and why.
"""


class HillClimbParams(AlgorithmParams):
    max_steps: int = Field(10, ge=0, description="edit attempts; a declined edit uses one too")
    max_rollouts: int = Field(
        0,
        ge=0,
        description="rollouts the search may execute (seed included, test not; cached re-measurements are "
        "free); a step starts only if a full measurement of a new child still fits; 0: no cap",
    )
    restart_after: int = Field(
        0,
        ge=0,
        description="return to the seed after this many measured children in a row that did not raise the "
        "current train mean; 0: never (a plain (1+1) climb)",
    )
    samples: int = Field(1, ge=1, le=100, description="repetitions per train task (avg@k)")


class HillClimb(Algorithm):
    Params = HillClimbParams
    params: HillClimbParams
    requires_splits = ("train",)
    worker_kind = "agent"

    def __init__(self, ctx, params: HillClimbParams):
        super().__init__(ctx, params)
        self.p = params
        self.train_ids = ctx.evaluator.split_ids("train")
        self.current: Snapshot = ctx.seed_snapshot
        self.current_mean = 0.0
        self.seed_mean = 0.0
        self.best: tuple[str, float] = (ctx.seed_snapshot.snapshot_id, 0.0)  # (snapshot id, train mean)
        self.stalled = 0  # measured children in a row that did not raise the current mean
        self.climb = 1
        self.rollouts_used = 0
        self.stopped = False

    # ---- measurement ---------------------------------------------------------------------------
    def _measure(self, snapshot: Snapshot, salt: str, label: str) -> tuple[dict[str, float], int, pa.Table]:
        """Per-task means on the whole train pool and the rollouts this measurement executed
        (the evaluator's counter before and after: rows reused from its cache cost nothing)."""
        before = self.ctx.evaluator.stats()["executed"]
        table = self.ctx.evaluator.evaluate(snapshot, "train", trials=self.p.samples, salt=salt, label=label)
        spent = self.ctx.evaluator.stats()["executed"] - before
        self.rollouts_used += spent
        return ScoreMatrix.from_table(table).avg_at_k(), spent, table

    def _step_cost(self) -> int:
        return len(self.train_ids) * self.p.samples

    # ---- the loop ------------------------------------------------------------------------------
    def seed(self) -> None:
        snap = self.ctx.seed_snapshot
        means, spent, table = self._measure(snap, "seed", "seed")
        self.require_seed_runs(table)
        self.current_mean = self.seed_mean = _mean(means)
        self.best = (snap.snapshot_id, self.current_mean)
        self.decide(
            "seed",
            snap.snapshot_id,
            None,
            accepted=True,
            reason=f"train mean {self.current_mean:.4f}",
            reason_code="seed",
            train_mean=self.current_mean,
            means=means,
            samples=self.p.samples,
            rollouts=spent,
            rollouts_used=self.rollouts_used,
        )

    def done(self) -> bool:
        if self.stopped or self.step >= self.p.max_steps:
            return True
        if self.p.max_rollouts and self.rollouts_used + self._step_cost() > self.p.max_rollouts:
            self.decide(
                "stop",
                None,
                None,
                reason=f"{self.rollouts_used} rollouts used; a new child needs {self._step_cost()} more, "
                f"over max_rollouts {self.p.max_rollouts}",
                reason_code="rollout_budget",
                rollouts_used=self.rollouts_used,
            )
            self.stopped = True
        return self.stopped

    def step_once(self) -> None:
        self.step += 1
        parent = self.current
        prompt = PROMPT.format(parent_id=parent.snapshot_id, train_mean=self.current_mean, tasks=len(self.train_ids))
        self.record_prompt("mutate", prompt)
        edited = self.workers.edit(self.step, parent, prompt)
        child = self.commit(parent, edited, climb=self.climb)
        if child is None:
            return  # a decline: recorded, costs no rollout, does not count towards restart_after
        means, spent, _ = self._measure(child, f"s{self.step}", f"step {self.step}")
        mean = _mean(means)
        improved = mean > self.current_mean + TOLERANCE
        accepted = mean >= self.current_mean - TOLERANCE
        code, reason = (
            ("improved", "train mean rose")
            if improved
            else ("equal", "train mean unchanged: kept (neutral move)")
            if accepted
            else ("worse", "train mean fell")
        )
        self.decide(
            "keep",
            child.snapshot_id,
            parent.snapshot_id,
            accepted=accepted,
            reason=reason,
            reason_code=code,
            gain=mean - self.current_mean,
            train_mean=mean,
            parent_mean=self.current_mean,
            means=means,
            climb=self.climb,
            rollouts=spent,
            rollouts_used=self.rollouts_used,
        )
        if accepted:
            self.current, self.current_mean = child, mean
            if mean > self.best[1] + TOLERANCE:
                self.best = (child.snapshot_id, mean)
        self.stalled = 0 if improved else self.stalled + 1
        if self.p.restart_after and self.stalled >= self.p.restart_after:
            self.climb += 1
            self.decide(
                "restart",
                self.ctx.seed_snapshot.snapshot_id,
                self.current.snapshot_id,
                reason=f"{self.stalled} measured children without a rise; climb {self.climb} starts from the seed",
                reason_code="stalled",
                climb=self.climb,
                left_mean=self.current_mean,
            )
            self.current, self.current_mean, self.stalled = self.ctx.seed_snapshot, self.seed_mean, 0

    def finish(self) -> Snapshot:
        best_id, best_mean = self.best
        return self.promote(
            self.ctx.records.get_snapshot(best_id),
            f"highest train mean {best_mean:.4f} among kept versions",
            reason_code="highest_train_mean",
            train_mean=best_mean,
            climbs=self.climb,
            rollouts_used=self.rollouts_used,
        )

    # ---- resume --------------------------------------------------------------------------------
    def extra_state(self) -> dict:
        return {
            "current": self.current.snapshot_id,
            "current_mean": self.current_mean,
            "seed_mean": self.seed_mean,
            "best": list(self.best),
            "stalled": self.stalled,
            "climb": self.climb,
            "rollouts_used": self.rollouts_used,
            "stopped": self.stopped,
        }

    def restore(self, state: dict) -> None:
        self.current = self.ctx.records.get_snapshot(state["current"])
        self.current_mean, self.seed_mean = state["current_mean"], state["seed_mean"]
        self.best = (state["best"][0], state["best"][1])
        self.stalled, self.climb = state["stalled"], state["climb"]
        self.stopped = state["stopped"]
        # Counted from the stored rows, not the checkpoint: rows a killed step stored after its
        # last checkpoint come back from the cache when the step is replayed (executed: 0), yet
        # they were spent.
        self.rollouts_used = self.ctx.records.rollouts()["split"].to_pylist().count("train")


def _mean(means: dict[str, float]) -> float:
    return sum(means.values()) / len(means) if means else 0.0
