"""One inner search: a pure function of (policy, domain, instance, seed, budget).

That purity is what makes an inner search a rollout like any other: the outer loop ships the
policy's source text, a domain name and three integers to a worker and gets back a
``MetaOutcome``; the same arguments always give the same curve, so paired comparisons and the
rollout cache mean something. A candidate's rule answers from the rollout jail, one selection
at a time, while the search itself (``InnerSearch``) runs in the worker
(``algorithms.meta.jailed``); ``run_inner`` and ``tree_search`` run a policy in this process,
for the engine's own rules and trusted source text only.

A domain maps an instance id to an ``InnerProblem``: a root and an ``expand(node, rng)`` that
returns the child's train value (what ranking sees), held-out value (what the curve reports)
and payload. ``rng`` is seeded from the child's place in the tree (``Tree.child_key``), not
from a shared stream, so the same node expanded under two policies yields the same child.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from algorithms.meta.rewards import MetaOutcome, Reward, auc
from algorithms.meta.tree import FlatPuct, Node, PolicyError, Tree, mix
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
    @property
    def name(self) -> str: ...  # read-only: the domains are frozen dataclasses

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


class InnerSearch:
    """One inner search's trusted state: the tree, the incumbent (the best node by train value,
    ties: earliest) and the held-out curve. Which node to expand comes from outside: from a
    policy in this process (``tree_search``) or, answer by answer, from the jail
    (``algorithms.meta.jailed``). Either way the expansions, the curve and the summary are
    computed here, so both give the same outcome for the same selections."""

    def __init__(self, problem: InnerProblem, budget: int, key: int = 0, policy: Any = None):
        self.problem, self.budget = problem, budget
        self.tree = Tree(policy)
        start = problem.root()
        self.incumbent = self.tree.add_root(start.value, start.held_out, start.prior, start.payload, key)
        self.curve = [self.incumbent.held_out]

    @property
    def done(self) -> bool:
        return len(self.curve) - 1 >= self.budget

    def expand(self, parent: Node) -> Node:
        """Expand ``parent`` (its visit already reserved) and extend the curve."""
        made = self.problem.expand(parent, random.Random(self.tree.child_key(parent)))
        child = self.tree.expand(parent, made.value, made.held_out, made.prior, made.payload)
        if child.value > self.incumbent.value:
            self.incumbent = child
        self.curve.append(self.incumbent.held_out)
        return child

    def outcome(self, selection: str, faults: int, error: str | None = None) -> MetaOutcome:
        tree = self.tree
        detail = {
            "selection": selection,
            "nodes": len(tree.nodes),
            "max_depth": max(n.depth for n in tree.nodes),
            "root_visits": tree.nodes[0].visits,
            "best_value": tree.nodes[0].best,
            # A rule whose value raised or was not finite at some node (that node scored -inf).
            "faults": faults,
        }
        if error is not None:
            detail["error"] = error
        return MetaOutcome(tuple(self.curve), self.curve[-1], len(self.curve) - 1, detail)


def tree_search(problem: InnerProblem, policy: Any, budget: int, key: int = 0) -> MetaOutcome:
    """``budget`` expansions, each choice by ``policy`` in this process (trusted policies only:
    candidate rules are asked from the jail, ``algorithms.meta.jailed``)."""
    search, faults_before = InnerSearch(problem, budget, key, policy), getattr(policy, "faults", 0)
    while not search.done:
        try:
            parent = search.tree.select()
        except PolicyError as exc:
            return search.outcome(type(policy).__name__, getattr(policy, "faults", 0) - faults_before, str(exc))
        search.expand(parent)
    return search.outcome(type(policy).__name__, getattr(policy, "faults", 0) - faults_before)


def compile_policy(policy: Any) -> Any:
    """A NodeSelection object as is; a string is a narrow-face priority source, gated and
    built in this process (trusted text only: candidate rules run in the jail)."""
    if not isinstance(policy, str):
        return policy
    from algorithms.meta.proposal_check import InvalidProposal
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


def scores(policy: Any, domain: Any, pairs: Iterable[tuple[int, int]], budget: int, reward: Reward = auc) -> np.ndarray:
    """Meta-reward per (instance, seed) pair, in order: the in-process twin of a fan-out."""
    selection = compile_policy(policy)
    return np.array([reward(run_inner(selection, domain, i, s, budget)) for i, s in pairs])


def c_sweep(
    domain: Any,
    pairs: Sequence[tuple[int, int]],
    budget: int,
    cs: Sequence[float] = (0.0, 0.25, 0.5, 1.0, 2.0),
    reward: Reward = auc,
) -> dict:
    """Measure the seed rule's own constant first: per ``c``, the reward of every pair.

    This is the ceiling an evolved rule is placed against (on, beyond or behind the hand-tuned
    family's front).
    """
    return {c: scores(FlatPuct(c_puct=c), domain, pairs, budget, reward) for c in cs}
