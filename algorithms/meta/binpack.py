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

Every program is hostile code, whoever wrote it (today the offline mutator, tomorrow a model):
a node is scored by packing its lists in the rollout jail, the same skeleton and lockstep
dialogue as a bin-packing rollout (``benchmarks.binpack.lockstep.jailed_assignments``), all of
a node's train and held-out lists in one jail start. Nothing here executes a program; the bins
are counted from assignments the trusted side watched being made. The decision rule under
evaluation answers from a jail of its own (``algorithms.meta.jailed``). A node's jail gets the
rollout's limits with a wall clock sized to its lists, so one looping program costs seconds,
not the whole search.
"""

from __future__ import annotations

import dataclasses
import math
import random
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from algorithms.meta.inner import Expansion
from algorithms.meta.mutate import mutate_source
from benchmarks.binpack.instances import CAPACITY, sample_items
from benchmarks.binpack.lockstep import jailed_assignments
from benchmarks.binpack.online import l1_bound
from rsi.sandbox import Limits

SEED_PROGRAM = Path(__file__).resolve().parents[2] / "targets" / "binpack_bestfit" / "heuristic.py"

Mutate = Callable[[str, random.Random], str]


def offline_mutation(source: str, rng: random.Random) -> str:
    """The project's mutator with a per-expansion seed, at bin-packing's constant scale."""
    return mutate_source(source, seed=rng.getrandbits(63), max_ops=3, scale=10.0)


#: Calls of ``priority`` recorded while best fit packed an instance of each family (the DarwinX
#: bin-packing configs' ``probe_inputs``): an item and the residuals of the bins it fits in.
RECORDED_CALLS = {"weibull": SEED_PROGRAM.parent / "probe.json", "or": SEED_PROGRAM.parent / "probe_or.json"}


@dataclass(frozen=True)
class RecordedCallMutation:
    """The mutator as the DarwinX bin-packing configs run it, for one family.

    Its probe ranks the bins of calls recorded on that family (``probe: order``), so an edit that
    ranks every recorded call's bins as its parent does is drawn again inside the mutator, before
    any node is packed; and a share ``data_thresholds`` of new conditions gets a threshold between
    two neighbouring values the compared quantity takes in those calls, where a decision flips.
    The synthetic probe of ``offline_mutation`` compares values, not rankings, on inputs around
    the constant scale, so most of what it passes still packs as the parent does. New constants
    are drawn around a tenth of the family's capacity. A frozen dataclass, not a closure: a
    domain travels to worker processes by pickling.
    """

    family: str
    data_thresholds: float = 0.0

    def __call__(self, source: str, rng: random.Random) -> str:
        return mutate_source(
            source,
            seed=rng.getrandbits(63),
            max_ops=3,
            scale=CAPACITY[self.family] / 10,
            probe="order",
            probe_calls=_recorded_calls(self.family),
            data_thresholds=self.data_thresholds,
        )


def expansion(kind: str, family: str, data_thresholds: float = 0.0) -> Mutate:
    """The expansion a ``meta_binpack`` suite names: ``plain`` (``offline_mutation``) or
    ``recorded`` (``RecordedCallMutation`` for ``family``)."""
    if kind == "plain":
        return offline_mutation
    if kind == "recorded":
        return RecordedCallMutation(family, data_thresholds)
    raise ValueError(f"unknown expansion {kind!r}: 'plain' or 'recorded'")


@lru_cache(maxsize=4)
def _recorded_calls(family: str) -> str:
    return RECORDED_CALLS[family].read_text()


def node_limits(limits: Limits | None, items: int) -> Limits:
    """The rollout's limits, with a wall clock for one node: a jail start plus about 200 us per
    item (packing measures 40-55 us per item through the jail), never more than the rollout's."""
    base = limits or Limits()
    return dataclasses.replace(base, timeout_s=min(base.timeout_s, 10.0 + 2e-4 * items), cpu_s=None)


def quality(assignments: Sequence, item_lists: Sequence, capacity: int) -> float:
    """Mean ``l1_bound / bins used`` over the lists, from assignments the jail's dialogue checked."""
    return float(np.mean([l1_bound(items, capacity) / len(set(a)) for items, a in zip(item_lists, assignments)]))


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
    limits: Limits | None = None  # the jail a node's program packs in (None: the sandbox's defaults)

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
        lists = [*self.train, *self.held_out]
        limits = node_limits(self.domain.limits, sum(map(len, lists)))
        with tempfile.TemporaryDirectory(prefix="rsi-node-") as checkout:
            (Path(checkout) / "heuristic.py").write_text(source)
            packed = jailed_assignments(Path(checkout), lists, self.capacity, limits)
        if packed is None:  # raised, timed out, broke the protocol: a failed node
            return Expansion(-math.inf, -math.inf, source)
        n = len(self.train)
        return Expansion(
            quality(packed[:n], self.train, self.capacity), quality(packed[n:], self.held_out, self.capacity), source
        )

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
