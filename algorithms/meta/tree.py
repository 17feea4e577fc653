"""An ERA-style flat tree search whose node-selection rule is a decision slot.

Every node is a selection candidate ("flat": no descent from the root). The policy only answers
"which node next"; visit reservation along the parent chain and back-propagation stay here, so
no policy can skip them. Upstream ERA (``futs.py``) fixes three details the rules depend on:

- rank: a node's position among all nodes by value, ``rank / (N - 1)``, ascending with a stable
  sort (ties keep insertion order), and ``0.5`` when the tree holds one node;
- visits: subtree counts. Selecting a node reserves one visit on it and every ancestor, and a
  new child starts with one visit; ``total`` is the sum of all nodes' visits;
- prior: ``P = 1/N`` for every node (``prior_exponent = 0``).

A failed expansion is a node too, valued ``-inf``: dropping it would change every later rank.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from rsi.errors import RsiError

_MASK = (1 << 64) - 1


def mix(*parts: int) -> int:
    """A 64-bit hash of integers (splitmix64 rounds), stable across processes and platforms.

    Child keys derive from the parent key and the child's ordinal, so a node's randomness
    depends on where it sits in the tree, not on when it was expanded: two policies that expand
    the same node draw the same child (common random numbers for paired comparisons).
    """
    h = 0x9E3779B97F4A7C15
    for p in parts:
        h = (h ^ (p & _MASK)) & _MASK
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK
        h ^= h >> 31
    return h


class PolicyError(RsiError):
    """A selection policy returned something that is not a node of the tree, or raised."""


@dataclass(eq=False)
class Node:
    index: int
    parent: Node | None = field(repr=False)
    #: What ranking uses (train score); ``-inf`` for a failed expansion.
    value: float
    #: What the curve reports (held-out score); ``value`` when the domain has no held-out split.
    held_out: float
    #: A domain's own hint of promise; None when it has none.
    prior: float | None = None
    depth: int = 0
    visits: int = 0
    key: int = 0
    payload: Any = field(default=None, repr=False)
    children: list = field(default_factory=list, repr=False)
    #: Best value in this node's subtree, back-propagated on every expansion.
    best: float = -math.inf


class Tree:
    """The node list, reservation and back-propagation; ``policy`` answers which node to expand."""

    def __init__(self, policy: Any):
        self.policy = policy
        self.nodes: list[Node] = []

    def add_root(
        self, value: float, held_out: float | None = None, prior: float | None = None, payload: Any = None, key: int = 0
    ) -> Node:
        if self.nodes:
            raise ValueError("the tree already has a root")
        value = _orderable(value)
        root = Node(0, None, value, value if held_out is None else held_out, prior, 0, 0, key, payload, best=value)
        self.nodes.append(root)
        return root

    def total_visits(self) -> int:
        return sum(n.visits for n in self.nodes)

    def select(self) -> Node:
        """Ask the policy, check the answer is one of ours, reserve the visit."""
        try:
            node = self.policy.select(self)
        except Exception as exc:  # the policy is candidate code: its failure is recorded, not raised raw
            raise PolicyError(f"selection policy raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(node, Node) or not node.index < len(self.nodes) or self.nodes[node.index] is not node:
            raise PolicyError(f"selection policy returned {node!r}, not a node of this tree")
        self.reserve(node)
        return node

    def reserve(self, node: Node) -> None:
        """One visit on the node and each ancestor, before the expansion runs (virtual loss)."""
        cursor: Node | None = node
        while cursor is not None:
            cursor.visits += 1
            cursor = cursor.parent

    def expand(
        self, parent: Node, value: float, held_out: float | None = None, prior: float | None = None, payload: Any = None
    ) -> Node:
        """Append the child of an expansion and back-propagate its value up the chain."""
        key, value = self.child_key(parent), _orderable(value)
        child = Node(
            len(self.nodes),
            parent,
            value,
            value if held_out is None else held_out,
            prior,
            parent.depth + 1,
            1,
            key,
            payload,
            best=value,
        )
        parent.children.append(child)
        self.nodes.append(child)
        cursor: Node | None = parent
        while cursor is not None and value > cursor.best:
            cursor.best = value
            cursor = cursor.parent
        return child

    def child_key(self, parent: Node) -> int:
        """The key the next child of ``parent`` will get: seed for that expansion's randomness."""
        return mix(parent.key, len(parent.children))


def _orderable(value: float) -> float:
    """NaN cannot be ranked (it breaks sorting); a domain's NaN is a failed expansion."""
    value = float(value)
    return -math.inf if math.isnan(value) else value


# ---- normalisation shared by every rule ------------------------------------------------------
def rank_scores(nodes: Sequence[Node]) -> list[float]:
    if len(nodes) == 1:
        return [0.5]
    order = sorted(range(len(nodes)), key=lambda i: nodes[i].value)
    ranks = [0.0] * len(nodes)
    for rank, i in enumerate(order):
        ranks[i] = rank / (len(nodes) - 1)
    return ranks


def _rated(prior: float | None) -> TypeGuard[float]:
    return prior is not None and math.isfinite(prior) and prior > 0


def normalised_priors(nodes: Sequence[Node], exponent: float = 1.0) -> list[float]:
    """Priors summing to 1: uniform when no node is rated (or ``exponent <= 0``); an unrated
    node gets the mean of the rated ones, so the absence of a number never bars a node."""
    rated = [n.prior for n in nodes if _rated(n.prior)] if exponent > 0.0 else []
    if not rated:
        return [1.0 / len(nodes)] * len(nodes)
    fallback = sum(rated) / len(rated)
    raw = [(n.prior if _rated(n.prior) else fallback) ** exponent for n in nodes]
    total = sum(raw)
    if not total or not math.isfinite(total):
        return [1.0 / len(nodes)] * len(nodes)
    return [r / total for r in raw]


def _argmax_first(nodes: Sequence[Node], scores: Sequence[float]) -> Node:
    """The first maximal score; NaN never wins, and all ``-inf``/NaN falls back to the root."""
    best, best_score = 0, -math.inf
    for i, s in enumerate(scores):
        if s > best_score:
            best, best_score = i, s
    return nodes[best]


@dataclass(frozen=True)
class FlatPuct:
    """ERA's selection rule: ``rank + c * P * sqrt(total) / (1 + visits)``."""

    c_puct: float = 1.0
    prior_exponent: float = 0.0

    def select(self, tree: Tree) -> Node:
        nodes = tree.nodes
        ranks = rank_scores(nodes)
        priors = normalised_priors(nodes, self.prior_exponent)
        total = tree.total_visits()
        scores = [ranks[i] + self.c_puct * priors[i] * math.sqrt(total) / (1 + n.visits) for i, n in enumerate(nodes)]
        return _argmax_first(nodes, scores)


Priority = Callable[[float, float, float, float, float, float], float]


class PrioritySelection:
    """Runs a narrow-face rule ``priority(rank, visits, total, prior, depth, n_nodes)``.

    Rank and prior normalisation, ties (first maximal node) and the guarantee of a valid answer
    are here, so a rule can only be wrong about priorities: a value that raises or is not finite
    scores ``-inf`` for that node and is counted in ``faults`` (reported in the run's detail).
    Every argument is passed as a float, so no rule computes with unbounded integers.
    """

    def __init__(self, priority: Priority, source: str | None = None):
        self.priority = priority
        self.source = source
        self.faults = 0

    def _score(self, *args: float) -> float:
        try:
            value = float(self.priority(*args))
        except Exception:  # rule code: the fault is counted and reported, the search goes on
            self.faults += 1
            return -math.inf
        if not math.isfinite(value):
            self.faults += 1
            return -math.inf
        return value

    def select(self, tree: Tree) -> Node:
        nodes = tree.nodes
        ranks = rank_scores(nodes)
        priors = normalised_priors(nodes)
        total, n = float(tree.total_visits()), float(len(nodes))
        scores = [
            self._score(ranks[i], float(node.visits), total, priors[i], float(node.depth), n)
            for i, node in enumerate(nodes)
        ]
        return _argmax_first(nodes, scores)
