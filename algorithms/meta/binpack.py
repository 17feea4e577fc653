"""Stage 1: tree search over real online bin-packing heuristics.

A node is a heuristic program (``def priority(item, bins)``, the FunSearch skeleton's face);
expanding it applies the offline mutator to the parent's source; the train value is packing
quality on the instance's train item lists and the held-out value the same on its held-out
lists. Quality of one list is ``l1_bound / bins_used`` (1 = as few bins as the lower bound).
A program that fails to build, raises, or returns an invalid packing is a failed node.

Most single mutations of a heuristic pack exactly as their parent does (a monotone transform of
a priority ranks the bins the same way). Such a child adds a node no selection rule can gain
from, and with 16 expansions a tree of them leaves every rule on the root's curve. So an
expansion may draw again, up to ``redraws`` times, while the child's train value equals its
parent's: the same semantic de-duplication the DarwinX mutator does with its probe, here
measured on the instance itself. The draws come from the node's own RNG, so a search stays a
pure function of its seed.

Mutated programs run in this process (the Ray worker process of the rollout, on its trusted side). They
come from the offline mutator applied to the project's own seed heuristic, so no candidate
writes them: the decision rule under evaluation only chooses which node is mutated next, and it
answers from the rollout jail (``algorithms.meta.jailed``). A misbehaving program can cost a
rollout, never the driver. A model as the expansion operator would need its programs jailed too.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from algorithms.meta.inner import Expansion
from algorithms.meta.mutate import mutate_source
from benchmarks.binpack.instances import CAPACITY, sample_items
from benchmarks.binpack.online import InvalidPacking, count_bins, l1_bound, pack

SEED_PROGRAM = Path(__file__).resolve().parents[2] / "targets" / "binpack_bestfit" / "heuristic.py"

Mutate = Callable[[str, random.Random], str]


def offline_mutation(source: str, rng: random.Random) -> str:
    """The project's mutator with a per-expansion seed, at bin-packing's constant scale."""
    return mutate_source(source, seed=rng.getrandbits(63), max_ops=3, scale=10.0)


def _build(source: str) -> Callable:
    namespace: dict = {"__name__": "heuristic"}
    exec(compile(source, "<heuristic>", "exec"), namespace)
    return namespace["priority"]


def quality(priority: Callable, item_lists: Sequence, capacity: int) -> float:
    """Mean ``l1_bound / bins`` over the lists; NaN when the program fails on any of them."""
    try:
        with np.errstate(all="ignore"):
            ratios = [
                l1_bound(items, capacity) / count_bins(items, capacity, pack(items, capacity, priority))
                for items in item_lists
            ]
    except (InvalidPacking, ArithmeticError, ValueError, TypeError, IndexError, AttributeError, NameError):
        return math.nan
    return float(np.mean(ratios))


@dataclass(frozen=True)
class BinpackDomain:
    name: str
    family: str  # "or" or "weibull" (benchmarks/binpack/instances.py)
    code: int
    items: int = 120
    n_train: int = 3
    n_held_out: int = 3
    mutate: Mutate = offline_mutation
    redraws: int = 0  # draws again while a child packs the train lists exactly as well as its parent

    def problem(self, instance_id: int) -> BinpackProblem:
        return BinpackProblem(
            self, *_item_lists(self.family, self.code, self.items, self.n_train, self.n_held_out, int(instance_id))
        )


@lru_cache(maxsize=1024)
def _item_lists(family: str, code: int, items: int, n_train: int, n_held: int, instance_id: int) -> tuple:
    rng = np.random.default_rng([code, instance_id])
    lists = [[int(x) for x in sample_items(family, rng, items)] for _ in range(n_train + n_held)]
    return tuple(lists[:n_train]), tuple(lists[n_train:])


class BinpackProblem:
    def __init__(self, domain: BinpackDomain, train: tuple, held_out: tuple):
        self.domain, self.train, self.held_out = domain, train, held_out
        self.capacity = CAPACITY[domain.family]

    def _score(self, source: str) -> Expansion:
        try:
            priority = _build(source)
        except Exception:  # a mutated program that does not build is a failed node, like one that raises
            return Expansion(-math.inf, -math.inf, source)
        value = quality(priority, self.train, self.capacity)
        if math.isnan(value):
            return Expansion(-math.inf, -math.inf, source)
        return Expansion(value, quality(priority, self.held_out, self.capacity), source)

    def root(self) -> Expansion:
        return self._score(SEED_PROGRAM.read_text())

    def expand(self, parent, rng: random.Random) -> Expansion:
        last = self.domain.redraws
        for draw in range(last + 1):
            child = self.domain.mutate(parent.payload, rng)
            if child == parent.payload:  # the mutator found no change: nothing new to measure
                out = Expansion(-math.inf, -math.inf, child)
                continue
            out = self._score(child)
            if draw == last or out.value != parent.value:
                break
        return out


OR = BinpackDomain("binpack-or", "or", 11, items=120)
WEIBULL = BinpackDomain("binpack-weibull", "weibull", 12, items=500)
