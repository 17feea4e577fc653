"""The ``policy`` target: one rollout is one whole inner search run with the snapshot's rule.

The snapshot holds the value of the node-selection slot in ``policy.py`` (``target.entry``
renames it): either the narrow face ``def priority(...)`` or a full ``class Policy``. A task of
a meta benchmark names ``(family, instance, seed)``; the rollout compiles the rule through its
gate, runs ``run_inner`` and scores the meta-reward. The curve and the tree summary go to the
trace, where the reflector reads them.

A rule that fails its gate, or whose selection raises mid-search, is a rollout with status
``error`` and score 0, never an exception. The inner seed is part of the task, so the
rollout's ``sample_seed`` is ignored: candidates are compared on common random numbers, and the
same (rule, instance, seed) always gives the same score, which is what makes the rollout cache
and paired gates meaningful.
"""

from __future__ import annotations

import ast
import functools
import math
import time
from pathlib import Path
from typing import Any, ClassVar

from algorithms.meta.gate import InvalidProposal, check_priority_source
from algorithms.meta.inner import run_inner
from algorithms.meta.tree import PrioritySelection
from algorithms.meta.values import policy_source, priority_selection, validate_proposal
from rsi.benchmark import Task
from rsi.errors import ConfigError
from rsi.snapshot import Snapshot
from rsi.target import RolloutResult, Target

POLICY_FILE = "policy.py"
SLOT = "node_selection"


def defines_policy_class(source: str) -> bool:
    try:
        module = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(s, ast.ClassDef) and s.name == "Policy" for s in module.body)


def value_kind(source: str):
    """The slot value kind a source is judged as: ``class Policy`` -> the general face,
    anything else -> the narrow ``priority`` face (whose gate then names what is wrong)."""
    return policy_source(SLOT) if defines_policy_class(source) else priority_selection()


@functools.lru_cache(maxsize=256)
def _checked_priority(source: str):
    """Gate verdict per source text. A pure function of its argument: a worker process that
    runs a batch of hundreds of searches with one rule pays for the gate's grid once."""
    return check_priority_source(source)


def build(source: str) -> Any:
    """A fresh selection object for one inner search (a rule never carries state across runs)."""
    if defines_policy_class(source):
        return policy_source(SLOT).compile(source)
    return PrioritySelection(_checked_priority(source), source=source)


def _finite(v: float) -> float | None:
    return round(float(v), 6) if math.isfinite(v) else None


class PolicyTarget(Target):
    kind = "policy"
    #: An inner search only reads the rule: no private copy of the checkout per rollout (at a
    #: few milliseconds per search the copy would cost more than the search).
    needs_private_workdir: ClassVar[bool] = False
    #: Rollouts per remote task when the config sets no ``evaluator.batch_size``: inner searches
    #: are short, so large batches amortise Ray's per-task overhead.
    batch_hint: ClassVar[int] = 64

    def entry(self) -> str:
        return self.config.entry or POLICY_FILE

    def check(self, snapshot: Snapshot) -> None:
        from algorithms.meta.benchmark import MetaBenchmark

        if not isinstance(self.benchmark, MetaBenchmark):
            raise ConfigError(f"target kind policy runs inner searches; benchmark {self.benchmark.name!r} is not a "
                              f"meta benchmark (meta_landscape, meta_binpack)")
        entry = self.entry()
        if entry not in snapshot.files:
            raise ConfigError(f"target: the rule file {entry!r} is not in the target directory")
        source = snapshot.text(entry)
        ok, reason = validate_proposal(value_kind(source), source)
        if not ok:
            raise ConfigError(f"target: the seed value {entry} fails its own gate: {reason}")

    def run(self, workdir: Path, task: Task, trial: int, sample_seed: int) -> RolloutResult:
        t0 = time.perf_counter()
        try:
            source = (Path(workdir) / self.entry()).read_text()
            policy = build(source)
        except (OSError, UnicodeDecodeError, InvalidProposal) as exc:
            return RolloutResult(0.0, "error", time.perf_counter() - t0, {"error": f"rule not usable: {exc}"})
        spec = task.input
        outcome = run_inner(policy, self.benchmark.domain(spec["domain"]), spec["instance"], spec["seed"],
                            self.benchmark.params.budget)
        trace = {"curve": [_finite(v) for v in outcome.curve], "detail": outcome.detail}
        if outcome.failed:
            return RolloutResult(0.0, "error", time.perf_counter() - t0, trace)
        score = float(self.benchmark.reward()(outcome))
        return RolloutResult(score, "ok", time.perf_counter() - t0, trace)
