"""The ``policy`` target: one rollout is one whole inner search run with the snapshot's rule.

The snapshot holds the value of the node-selection slot in ``policy.py`` (``target.entry``
renames it): either the narrow face ``def priority(...)`` or a full ``class Policy``. A task of
a meta benchmark names ``(family, instance, seed)``; the rollout runs the inner search on the
trusted side and asks the rule, built and run in the rollout jail, for each selection
(``algorithms.meta.jailed``); the meta-reward is computed here from the trusted search. A batch
of rollouts of one snapshot shares one jail (``run_many``), each search in a fresh process. The
curve and the tree summary go to the trace, where the reflector reads them.

A rule that fails its gate, or whose selection raises mid-search, is a rollout with status
``error`` and score 0, never an exception; one that runs past ``limits.timeout_s`` in one search
is a ``timeout``. The inner seed is part of the task, so the rollout's ``sample_seed`` is
ignored: candidates are compared on common random numbers, and the same (rule, instance, seed)
always gives the same score, which is what makes the rollout cache and paired gates meaningful.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from algorithms.meta.proposal_check import PRIORITY_FACE, check_priority_source, policy_face
from algorithms.meta.tree import PrioritySelection, mix
from algorithms.meta.values import policy_source, priority_selection, validate_proposal
from rsi.benchmark import Task
from rsi.errors import ConfigError
from rsi.snapshot import Snapshot
from rsi.target import RolloutResult, Target

if TYPE_CHECKING:
    from algorithms.meta.benchmark import MetaBenchmark

POLICY_FILE = "policy.py"
SLOT = "node_selection"


def defines_policy_class(source: str) -> bool:
    try:
        module = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(s, ast.ClassDef) and s.name == "Policy" for s in module.body)


def value_kind(source: str, limits: Any = None):
    """The slot value kind a source is judged as: ``class Policy`` -> the general face,
    anything else -> the narrow ``priority`` face (whose gate then names what is wrong).
    ``limits`` (a ``LimitsConfig`` or ``rsi.sandbox.Limits``) bound the jailed check."""
    return policy_source(SLOT, limits) if defines_policy_class(source) else priority_selection(limits)


def face_of(source: str) -> str:
    return policy_face(SLOT) if defines_policy_class(source) else PRIORITY_FACE


@functools.lru_cache(maxsize=256)
def _checked_priority(source: str):
    """Gate verdict per source text (trusted text only: it runs the rule in this process)."""
    return check_priority_source(source)


def build(source: str) -> Any:
    """A fresh selection object for one in-process inner search. Executes ``source`` here:
    for trusted text only (the engine's own rules, tests); rollouts run rules in the jail."""
    if defines_policy_class(source):
        return policy_source(SLOT).compile(source)
    return PrioritySelection(_checked_priority(source), source=source)


class PolicyTarget(Target):
    kind = "policy"
    #: An inner search only reads the rule: no private copy of the checkout per rollout (the
    #: rule file is copied into the jail's own private checkout per batch instead).
    needs_private_workdir: ClassVar[bool] = False
    #: Rollouts per remote task when the config sets no ``evaluator.batch_size``: inner searches
    #: take milliseconds, so large batches amortise Ray's per-task overhead and, above all, the
    #: jail's start (~80 ms: bubblewrap, the interpreter, the gate's modules), paid once a batch.
    batch_hint: ClassVar[int] = 128
    #: ``check`` refuses any other benchmark (imported there: the benchmark imports this module).
    benchmark: MetaBenchmark

    def entry(self) -> str:
        return self.config.entry or POLICY_FILE

    def limits(self):
        from rsi.sandbox import Limits

        return Limits(**self.config.limits.model_dump())

    def check(self, snapshot: Snapshot) -> None:
        from algorithms.meta.benchmark import MetaBenchmark
        from rsi.sandbox import check_backend

        if not isinstance(self.benchmark, MetaBenchmark):
            raise ConfigError(
                f"target kind policy runs inner searches; benchmark {self.benchmark.name!r} is not a "
                f"meta benchmark (meta_landscape, meta_binpack)"
            )
        entry = self.entry()
        if entry not in snapshot.files:
            raise ConfigError(f"target: the rule file {entry!r} is not in the target directory")
        self.backend = check_backend(self.config.limits.backend)
        source = snapshot.text(entry)
        ok, reason = validate_proposal(value_kind(source, self.config.limits), source)
        if not ok:
            raise ConfigError(f"target: the seed value {entry} fails its own gate: {reason}")

    def run(self, workdir: Path, task: Task, trial: int, sample_seed: int) -> RolloutResult:
        return self.run_many(workdir, [(task, trial, sample_seed)])[0]

    def run_many(self, workdir: Path, rollouts: list) -> list[RolloutResult]:
        """Every ``(task, trial, sample_seed)`` on the rule at ``workdir``, in one jail."""
        from algorithms.meta.inner import InnerSearch
        from algorithms.meta.jailed import run_searches

        try:
            source = (Path(workdir) / self.entry()).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            return [RolloutResult(0.0, "error", 0.0, {"error": f"rule not usable: {exc}"}) for _ in rollouts]
        budget = self.benchmark.params.budget
        if budget < 1:
            raise ConfigError(f"inner budget must be >= 1, got {budget}")

        limits = self.limits()

        def start(spec: dict):
            instance, seed = int(spec["instance"]), int(spec["seed"])
            return lambda: InnerSearch(
                self.benchmark.domain(spec["domain"], limits).problem(instance), budget, mix(instance, seed)
            )

        face = face_of(source)
        selection = "PrioritySelection" if face == PRIORITY_FACE else "Policy"
        ended = run_searches(
            source,
            face,
            [start(task.input) for task, _, _ in rollouts],
            selection,
            limits,
            self.benchmark.harness_mounts() or None,
        )
        reward = self.benchmark.reward()
        return [self._result(e, reward) for e in ended]

    @staticmethod
    def _result(ended, reward) -> RolloutResult:
        from algorithms.meta.jailed import finite

        if ended.outcome is None:
            return RolloutResult(0.0, ended.status, ended.duration_s, {"error": ended.reason})
        outcome = ended.outcome
        trace = {"curve": [finite(v) for v in outcome.curve], "detail": outcome.detail}
        if ended.status != "ok" or outcome.failed:
            return RolloutResult(0.0, "error" if ended.status == "ok" else ended.status, ended.duration_s, trace)
        return RolloutResult(float(reward(outcome)), "ok", ended.duration_s, trace)
