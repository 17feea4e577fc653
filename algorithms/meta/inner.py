"""One inner search: a pure function of (policy, domain, instance, seed, budget).

That purity is what makes an inner search a rollout like any other: the outer loop ships the
policy's source text, a domain name and three integers to a worker and gets back a
``MetaOutcome``; the same arguments always give the same curve, so paired comparisons and the
rollout cache mean something.

A domain maps an instance id to an ``InnerProblem``: a root and an ``expand(node, rng)`` that
returns the child's train value (what ranking sees), held-out value (what the curve reports)
and payload. ``rng`` is seeded from the child's place in the tree (``Tree.child_key``), not
from a shared stream, so the same node expanded under two policies yields the same child.
"""

from __future__ import annotations

import importlib
import random
from dataclasses import dataclass
from typing import Any, Iterable, Protocol, Sequence

import numpy as np

from algorithms.meta.rewards import MetaOutcome, Reward, auc
from algorithms.meta.tree import FlatPuct, PolicyError, Tree, mix
from rsi.errors import ConfigError


@dataclass(frozen=True)
class Expansion:
    value: float
    held_out: float | None = None
    payload: Any = None
    prior: float | None = None


class InnerProblem(Protocol):
    def root(self) -> Expansion: ...

    def expand(self, parent: Any, rng: random.Random) -> Expansion: ...


class Domain(Protocol):
    name: str

    def problem(self, instance_id: int) -> InnerProblem: ...


DOMAINS = {
    "landscape-source": "algorithms.meta.landscape:SOURCE",
    "landscape-target": "algorithms.meta.landscape:TARGET",
    "binpack-or": "algorithms.meta.binpack:OR",
    "binpack-weibull": "algorithms.meta.binpack:WEIBULL",
}


def domain_named(name: str) -> Domain:
    if name not in DOMAINS:
        raise ConfigError(f"unknown inner domain {name!r}; valid: {', '.join(DOMAINS)}")
    module, _, attr = DOMAINS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def _summary(tree: Tree, policy: Any, faults_before: int) -> dict:
    return {
        "selection": type(policy).__name__,
        "nodes": len(tree.nodes),
        "max_depth": max(n.depth for n in tree.nodes),
        "root_visits": tree.nodes[0].visits,
        "best_value": tree.nodes[0].best,
        # A rule whose value raised or was not finite at some node (that node scored -inf).
        "faults": getattr(policy, "faults", 0) - faults_before,
    }


def tree_search(problem: InnerProblem, policy: Any, budget: int, key: int = 0) -> MetaOutcome:
    """``budget`` expansions; the incumbent is the best node by train value (ties: earliest)."""
    tree, faults_before = Tree(policy), getattr(policy, "faults", 0)
    start = problem.root()
    incumbent = tree.add_root(start.value, start.held_out, start.prior, start.payload, key)
    curve = [incumbent.held_out]
    for _ in range(budget):
        try:
            parent = tree.select()
        except PolicyError as exc:
            detail = _summary(tree, policy, faults_before) | {"error": str(exc)}
            return MetaOutcome(tuple(curve), curve[-1], len(curve) - 1, detail)
        made = problem.expand(parent, random.Random(tree.child_key(parent)))
        child = tree.expand(parent, made.value, made.held_out, made.prior, made.payload)
        if child.value > incumbent.value:
            incumbent = child
        curve.append(incumbent.held_out)
    return MetaOutcome(tuple(curve), curve[-1], budget, _summary(tree, policy, faults_before))


def compile_policy(policy: Any) -> Any:
    """A NodeSelection object as is; a string is a narrow-face priority source, gated."""
    if not isinstance(policy, str):
        return policy
    from algorithms.meta.gate import InvalidProposal
    from algorithms.meta.values import priority_selection

    try:
        return priority_selection().compile(policy)
    except InvalidProposal as exc:
        raise ConfigError(f"priority source rejected by the gate: {exc}") from None


def run_inner(policy: Any, domain: Any, instance_id: int, seed: int, budget: int) -> MetaOutcome:
    """Run one inner search. ``policy``: a NodeSelection or priority source text; ``domain``: a
    Domain or its registered name. Deterministic in all five arguments (a policy object that
    keeps state between calls carries it from run to run; source text is built afresh)."""
    if budget < 1:
        raise ConfigError(f"inner budget must be >= 1, got {budget}")
    selection = compile_policy(policy)
    dom = domain_named(domain) if isinstance(domain, str) else domain
    return tree_search(dom.problem(int(instance_id)), selection, int(budget), mix(int(instance_id), int(seed)))


def scores(policy: Any, domain: Any, pairs: Iterable[tuple[int, int]], budget: int,
           reward: Reward = auc) -> np.ndarray:
    """Meta-reward per (instance, seed) pair, in order: the in-process twin of a fan-out."""
    selection = compile_policy(policy)
    return np.array([reward(run_inner(selection, domain, i, s, budget)) for i, s in pairs])


def c_sweep(domain: Any, pairs: Sequence[tuple[int, int]], budget: int,
            cs: Sequence[float] = (0.0, 0.25, 0.5, 1.0, 2.0), reward: Reward = auc) -> dict:
    """Measure the seed rule's own constant first: per ``c``, the reward of every pair.

    This is the ceiling an evolved rule is placed against (on, beyond or behind the hand-tuned
    family's front).
    """
    return {c: scores(FlatPuct(c_puct=c), domain, pairs, budget, reward) for c in cs}
