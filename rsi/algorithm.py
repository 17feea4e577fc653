"""The algorithm base: what every search shares, so an algorithm's file reads as its paper.

The base owns the loop, the step counter, checkpoints and decisions::

    seed -> checkpoint -> repeat { budget check -> step_once() -> checkpoint } until done() -> finish()

An algorithm writes ``seed``, ``step_once``, ``finish`` (and ``done`` when ``max_steps`` is not
its only end), plus ``extra_state``/``restore`` for what it alone must carry across a resume.
Also here: the decision log (one typed, fsynced line per decision, written before it is acted
on: ``rsi.decisions``), commit with rejections returned as ``decline`` decisions (never fatal),
the evidence budget, promotion, the budget stop, and the record of the runner's single final
test measurement.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from rsi.benchmark import Benchmark
from rsi.config import Resolved
from rsi.decisions import Decision
from rsi.errors import ConfigError, Rejected, SeedFailed
from rsi.progress import log, phase, status
from rsi.prompting import evidence
from rsi.records import RunRecords
from rsi.results import ScoreMatrix
from rsi.seams import Archive, Evaluator, Proposers
from rsi.snapshot import Snapshot
from rsi.workers.base import EditResult


class AlgorithmParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="registered algorithm name")


@dataclass
class RunContext:
    """What a run hands its algorithm. The seams (``rsi.seams``) are Protocols: the driver
    passes the Ray-backed ``actors`` implementations, tests pass in-process fakes."""

    config: Resolved
    records: RunRecords
    evaluator: Evaluator  # actors.client.EvaluatorClient
    benchmark: Benchmark
    seed_snapshot: Snapshot
    archive: Archive  # actors.archive.ArchiveClient
    workers: Proposers | None = None  # actors.worker_pool.WorkerPool; None for an algorithm without a worker
    secrets: list[str] = field(default_factory=list)
    run_id: str = ""


class Algorithm:
    Params: ClassVar[type[AlgorithmParams]] = AlgorithmParams
    #: splits that must be non-empty before anything starts
    requires_splits: ClassVar[tuple[str, ...]] = ()
    #: None: no worker; "agent": a directory-editing worker; "any": any worker
    worker_kind: ClassVar[str | None] = None

    def __init__(self, ctx: RunContext, params: AlgorithmParams):
        self.ctx = ctx
        self.params = params
        self.step = 0
        self.seeded = False  # the seed version measured and decided (restored on resume)
        self.rng = random.Random(ctx.config.run.seed)

    @property
    def workers(self) -> Proposers:
        """The run's worker pool, for an algorithm with a ``worker_kind`` (``check_config``
        refuses a config that gives such an algorithm no worker)."""
        if self.ctx.workers is None:
            raise ConfigError(f"algorithm {self.params.name!r} needs a worker, and the run has none")
        return self.ctx.workers

    # ---- startup validation ------------------------------------------------------------------
    @classmethod
    def check_config(cls, resolved) -> None:
        """Cross-field rules and worker kind; ConfigError means exit 2 before anything starts."""
        where = "algorithm.worker"
        if cls.worker_kind is None:
            if resolved.worker_cfg is not None:
                raise ConfigError(
                    f"{where}: algorithm {resolved.algo_params.name!r} uses no worker; remove the worker block"
                )
            return
        if resolved.worker_cfg is None:
            raise ConfigError(f"{where}: algorithm {resolved.algo_params.name!r} needs a worker")
        if cls.worker_kind == "agent":
            from rsi.workers import worker_class

            kind = worker_class(resolved.worker_cfg.type).kind
            if kind != "agent":
                raise ConfigError(
                    f"{where}.type: {resolved.worker_cfg.type!r} is a text-only worker; "
                    f"{resolved.algo_params.name} needs a directory-editing worker (agent, mutator, scripted, claude_code)"
                )

    @classmethod
    def check_benchmark(cls, benchmark: Benchmark, params: AlgorithmParams | None = None) -> None:
        for split in cls.requires_splits:
            if not benchmark.split(split):
                raise ConfigError(f"benchmark {benchmark.name}: split {split!r} is empty, and this algorithm needs it")

    # ---- the loop ------------------------------------------------------------------------------
    def run(self) -> Snapshot:
        """Search, record, and return the promoted snapshot. A resumed run (state restored by
        ``load_state``) continues after its last checkpoint."""
        if not self.seeded:
            phase("measuring the seed version")
            self.seed()
            self.seeded = True
            self.checkpoint()
        while not self.done():
            if self.stopped_by_budget():
                break
            phase(f"step {self.step + 1}: proposing and measuring")
            self.step_once()
            self.checkpoint()
        phase("promoting")
        return self.finish()

    def seed(self) -> None:
        """Measure the starting version (and decide ``seed``)."""
        raise NotImplementedError

    def step_once(self) -> None:
        """One step (or one round of parallel steps): advances ``self.step``."""
        raise NotImplementedError

    def done(self) -> bool:
        """Whether the search has ended; the default is ``max_steps`` spent."""
        # max_steps is a field of the Params of every algorithm that keeps this default (the base
        # model has none: an algorithm without steps must not accept the key)
        return self.step >= self.params.max_steps  # type: ignore[attr-defined]

    def finish(self) -> Snapshot:
        """Promote the version the run returns."""
        raise NotImplementedError

    def checkpoint(self) -> None:
        """What ``rsi resume`` continues from, written after every step: the base's state (step,
        RNG, usage, decision count, worker states) and the algorithm's ``extra_state``."""
        workers = self.ctx.workers.states() if self.ctx.workers is not None else []
        self.ctx.records.write_state(
            {
                **self.get_state(),
                **self.extra_state(),
                "worker_states": workers,
                "decisions": self.ctx.records.decision_count(),
            }
        )

    def extra_state(self) -> dict:
        """The algorithm's own state for resume (its archive, lineage, ...)."""
        return {}

    def restore(self, state: dict) -> None:
        """Rebuild the algorithm's own state from what ``extra_state`` saved."""

    # ---- shared pieces -------------------------------------------------------------------------
    def require_seed_runs(self, table) -> None:
        """Stop before any edit when every rollout of the seed failed (``error``, ``timeout`` or
        ``protocol_error``): no search can improve on a program that never runs, and a mean of
        0 would hide why. A seed that runs and scores 0 is a valid start."""
        statuses = table["status"].to_pylist()
        if not statuses or "ok" in statuses:
            return
        first = next(i for i, s in enumerate(statuses) if s != "ok")
        ref = table["trace_ref"][first].as_py()
        reason = self.ctx.records.read_trace(ref).get("reason", "") if ref else ""
        split = table["split"][first].as_py()
        raise SeedFailed(
            f"the seed version failed on all {len(statuses)} {split} rollouts; first "
            f"({table['task_id'][first].as_py()}): {statuses[first]}: {' '.join(str(reason).split())[:300]}"
        )

    def decide(
        self,
        kind: str,
        snapshot_id: str | None = None,
        parent_id: str | None = None,
        accepted: bool | None = None,
        reason: str = "",
        *,
        reason_code: str,
        step: int | None = None,
        donor_id: str | None = None,
        **figures,
    ) -> Decision:
        """Record one decision (fsynced before it is acted on) and print its line. ``reason_code``
        is the stable name a program counts, ``reason`` the sentence a person reads. ``step``
        defaults to the current step; a round of parallel candidates decides each at its own."""
        decision = Decision(
            step=self.step if step is None else step,
            kind=kind,
            snapshot_id=snapshot_id,
            parent_id=parent_id,
            donor_id=donor_id,
            accepted=accepted,
            reason_code=reason_code,
            reason=reason,
            **figures,
        )
        self.ctx.records.decision(decision)
        verdict = "" if accepted is None else (" accepted" if accepted else " rejected")
        log(
            f"step {decision.step:>3}  {kind:<8} {snapshot_id or '-':<16}{verdict}  {reason}{_figures(figures)}".rstrip()
        )
        self._update_status(decision, figures)
        return decision

    def _update_status(self, decision: Decision, figures: dict) -> None:
        """The live view: step, best score so far (train mean, or ADAS's dev score), admitted, spend."""
        status.step = max(status.step, decision.step)
        value = figures.get("train_mean", figures.get("score"))
        if decision.accepted and decision.kind != "test" and isinstance(value, (int, float)):
            if status.best is None or value > status.best:
                status.best, status.best_snapshot = float(value), decision.snapshot_id or ""
            if decision.kind not in ("seed", "promote"):
                status.admitted += 1
        used = self.usage()
        status.spend_usd = used.get("cost_usd", 0.0) + used.get("rollout_cost_usd", 0.0)

    def commit_or_decline(
        self, parent: Snapshot, edit: EditResult | dict, ignore=(), step: int | None = None, **figures
    ) -> Snapshot | Decision:
        """The child snapshot of an edit (a worker's ``EditResult``, or a tree), or the ``decline``
        decision recorded for it (the run goes on; the caller reads why from the decision)."""
        try:
            if isinstance(edit, EditResult) and edit.rejected is not None:
                raise edit.rejected
            tree = edit.tree if isinstance(edit, EditResult) else edit
            child = parent.commit_tree(
                tree, self.ctx.config.run.target.evolve_scope, secrets=self.ctx.secrets, ignore=ignore
            )
        except Rejected as exc:
            return self.decide(
                "decline",
                None,
                parent.snapshot_id,
                accepted=False,
                reason=exc.reason,
                reason_code=exc.reason,
                step=step,
                detail=exc.detail,
                **figures,
            )
        self.ctx.records.put_snapshot(child)
        return child

    def commit(self, parent: Snapshot, edit: EditResult | dict, ignore=(), **figures) -> Snapshot | None:
        """``commit_or_decline`` for callers that need only the child (None: declined)."""
        child = self.commit_or_decline(parent, edit, ignore, **figures)
        return child if isinstance(child, Snapshot) else None

    def evidence(self, text: str, max_chars: int) -> str:
        """``rsi.prompting.evidence``: the newest evidence kept, the cut marked."""
        return evidence(text, max_chars)

    def record_prompt(self, role: str, text: str, step: int | None = None) -> str:
        """Keep what a worker was shown beside the decisions, ``prompts/<step>-<role>.md``, so a
        run can be audited for what evidence reached which call (test traces never do)."""
        step = self.step if step is None else step
        rel = f"prompts/{step:04d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', role)}.md"
        self.ctx.records.write_bytes(rel, text.encode())
        return rel

    def promote(self, snapshot: Snapshot, reason: str, reason_code: str = "promote", **figures) -> Snapshot:
        self.decide(
            "promote",
            snapshot.snapshot_id,
            snapshot.parent_id,
            accepted=True,
            reason=reason,
            reason_code=reason_code,
            **figures,
        )
        return snapshot

    def record_test(self, promoted: Snapshot, table) -> Decision:
        """The runner's single test measurement of the promoted version, one step after the last."""
        m = ScoreMatrix.from_table(table)
        return self.decide(
            "test",
            promoted.snapshot_id,
            promoted.parent_id,
            step=self.step + 1,
            reason_code="test",
            reason=f"test mean {m.mean():.4f}",
            mean=m.mean(),
            tasks=len(m.task_ids),
        )

    def after_test(self, promoted: Snapshot, test_table) -> dict | None:
        """Called once after the runner's single test measurement of ``promoted``. An algorithm
        whose report needs more than that measurement (meta-evolve: the seed rule and the
        hand-tuned family on the same validation instances) measures it here, after every
        decision is made. Returns ``{"tables": [{"title", "rows", "note"}]}`` for the summary,
        or None."""
        return None

    def usage(self) -> dict:
        """Model usage of the whole run, across resumes: the workers' calls, and (``rollout_*``)
        what agent targets spent through their model proxies in this run's rollouts."""
        now = dict(self.ctx.workers.usage()) if self.ctx.workers is not None else {}
        now.update(getattr(self.ctx.evaluator, "rollout_usage", {}))
        base = getattr(self, "_usage_base", {})
        keys = set(now) | set(base)
        return {k: base.get(k, 0) + now.get(k, 0) for k in keys}

    def budget_exhausted(self) -> str | None:
        """Why new proposals must stop (``budget.max_cost_usd`` / ``max_calls``), or None."""
        budget = self.ctx.config.run.budget
        if budget.max_cost_usd is None and budget.max_calls is None:
            return None
        used = self.usage()
        spent = used.get("cost_usd", 0.0) + used.get("rollout_cost_usd", 0.0)
        if budget.max_cost_usd is not None and spent >= budget.max_cost_usd:
            return f"budget: model spend ${spent:.4f} reached max_cost_usd {budget.max_cost_usd}"
        if budget.max_calls is not None and used.get("calls", 0) >= budget.max_calls:
            return f"budget: {used['calls']} model calls reached max_calls {budget.max_calls}"
        return None

    def stopped_by_budget(self) -> bool:
        """True (with a ``stop`` decision recorded) when the budget forbids a new proposal."""
        reason = self.budget_exhausted()
        if reason:
            self.decide("stop", None, None, reason=reason, reason_code="budget", usage=self.usage())
        return bool(reason)

    # ---- resume --------------------------------------------------------------------------------
    def get_state(self) -> dict:
        return {"step": self.step, "rng": rng_state(self.rng), "usage": self.usage()}

    def load_state(self, state: dict) -> None:
        """Resume from the saved state (``RunRecords.read_state``); with none, the run restarts
        from its first decision (every stored rollout is reused)."""
        if "step" in state:
            self.set_state(state)
            self.restore(state)
            self.seeded = True

    def set_state(self, state: dict) -> None:
        self.step = state["step"]
        self._usage_base = state.get("usage", {})
        self.rng.setstate(rng_unstate(state["rng"]))


def rng_state(rng: random.Random) -> list:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def rng_unstate(state: list):
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def _figures(figures: dict) -> str:
    """The numbers that decided, after the reason on a decision line."""
    shown = []
    for key, label in (
        ("gain", "gain"),
        ("regression_mass", "regression"),
        ("train_mean", "train mean"),
        ("score", "score"),
    ):
        value = figures.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            shown.append(f"{label} {value:+.4f}" if key == "gain" else f"{label} {value:.4f}")
    return f"  [{', '.join(shown)}]" if shown else ""
