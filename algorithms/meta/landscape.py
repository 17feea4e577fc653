"""Stage 0: synthetic landscapes, a few milliseconds per inner search, fully seed-deterministic.

A node holds a point in ``[0, 1]^dim``; expanding it takes a Gaussian step and scores the new
point on the instance's landscape: the highest of a few Gaussian peaks plus a ripple term. Two
things make a selection rule matter:

- failed expansions (value ``-inf``, like a program that does not run), and
- dead ends: a node that scores normally but whose every expansion fails, so a rule that keeps
  expanding the best node can stall on it for the rest of the budget.

The train value a node is ranked by carries observation noise; the held-out value the curve
reports is the clean landscape. ``SOURCE`` (evolve here) is low-dimensional, smooth, one peak,
few dead ends (2 % of new nodes) and no noise, so greed pays: ``c_puct = 0`` beats the seed's
``c_puct = 1``. ``TARGET`` (never seen by the outer loop) has more dimensions, peaks, ripple,
failures, dead ends (15 %) and noise, so greed stalls and over-trusts lucky nodes: there
``c_puct = 0`` loses to ``c_puct = 1``.

The order of the hand-tuned constants reverses between the families, so whether a rule evolved
on SOURCE transfers is a real question (``c_sweep`` shows it; the figures are pinned in
tests/test_meta_domains.py).

SOURCE's few dead ends are what lets a rule that gives up on a stalled node show its worth
where the outer loop can see it: with none, a greedy rule never stalls on SOURCE, a visit cap is
a neutral edit there, and the skill that transfers to TARGET carries no signal for the gate
(``perf/results/meta-ceiling.md`` measures both).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from algorithms.meta.inner import Expansion


@dataclass(frozen=True)
class Family:
    name: str
    code: int  # separates the instance streams of families
    dim: int
    peaks: int
    width: tuple[float, float]  # (low, high) of a peak's standard deviation
    ripple: float  # amplitude of the rugged term
    frequency: float  # ripple cycles per unit
    step: float  # standard deviation of an expansion's step
    fail: float  # probability an expansion fails outright
    dead: float  # probability a new node is a dead end
    noise: float  # standard deviation of the train observation

    def problem(self, instance_id: int) -> Landscape:
        return _landscape(self, int(instance_id))


@dataclass(frozen=True)
class Point:
    x: tuple
    dead: bool = False


class Landscape:
    """One instance: peaks and ripple drawn from ``(family.code, instance_id)``."""

    def __init__(self, family: Family, instance_id: int):
        self.family = family
        rng = np.random.default_rng([family.code, instance_id])
        self.centres = rng.random((family.peaks, family.dim))
        self.heights = rng.uniform(0.4, 1.0, family.peaks)
        self.heights[0] = 1.0  # every instance has a global optimum of 1 (+ ripple)
        self.inv_width = 1.0 / (2.0 * rng.uniform(*family.width, family.peaks) ** 2)
        self.phase = rng.random(family.dim) * 2 * math.pi
        self.start = tuple(float(v) for v in rng.random(family.dim))

    def true_value(self, x: tuple) -> float:
        p = np.asarray(x)
        bumps = self.heights * np.exp(-((self.centres - p) ** 2).sum(axis=1) * self.inv_width)
        ripple = np.cos(2 * math.pi * self.family.frequency * p + self.phase).mean()
        return float(bumps.max() + self.family.ripple * ripple)

    def _scored(self, point: Point, rng: random.Random) -> Expansion:
        clean = self.true_value(point.x)
        return Expansion(clean + rng.gauss(0.0, self.family.noise), clean, point)

    def root(self) -> Expansion:
        point = Point(self.start)
        clean = self.true_value(point.x)
        return Expansion(clean, clean, point)

    def expand(self, parent, rng: random.Random) -> Expansion:
        f = self.family
        here: Point | None = parent.payload
        if here is None or here.dead or rng.random() < f.fail:
            return Expansion(-math.inf, -math.inf, None)
        x = tuple(min(1.0, max(0.0, v + rng.gauss(0.0, f.step))) for v in here.x)
        return self._scored(Point(x, rng.random() < f.dead), rng)


@lru_cache(maxsize=4096)
def _landscape(family: Family, instance_id: int) -> Landscape:
    """Building an instance costs more than searching it; workers reuse it across seeds."""
    return Landscape(family, instance_id)


SOURCE = Family(
    "landscape-source",
    1,
    dim=2,
    peaks=1,
    width=(0.15, 0.35),
    ripple=0.0,
    frequency=3.0,
    step=0.05,
    fail=0.05,
    dead=0.02,
    noise=0.0,
)
TARGET = Family(
    "landscape-target",
    2,
    dim=6,
    peaks=6,
    width=(0.3, 0.5),
    ripple=0.1,
    frequency=4.0,
    step=0.07,
    fail=0.15,
    dead=0.15,
    noise=0.04,
)
FAMILIES = {f.name: f for f in (SOURCE, TARGET)}
