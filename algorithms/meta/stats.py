"""The outer loop's statistics: a paired gate, validation on unseen families, transfer.

The seed paid three times for an under-sized comparison (an inner budget too small, a gate
holding out 2 windows: fail-closed; a gate holding out 9 instances: a rule that loses 88/109 on
its own family committed). So every gate decision carries its standard error, and
``required_holdout`` sizes a hold-out from the measured paired sd before a run starts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from algorithms.slots import TOLERANCE


@dataclass(frozen=True)
class GateResult:
    mean_gain: float
    se: float
    z: float
    n: int
    wins: int
    losses: int
    accepted: bool


def _paired(before, after) -> np.ndarray:
    a, b = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired scores need equal 1-d shapes, got {a.shape} and {b.shape}")
    return b - a


def paired_gate(incumbent_scores, candidate_scores, z_gate: float = 2.0) -> GateResult:
    """Accept only a gain that is positive and at least ``z_gate`` standard errors.

    Scores are paired by position (same instance, same seed). With fewer than two pairs the
    standard error is unknown (infinite) and nothing is accepted.
    """
    d = _paired(incumbent_scores, candidate_scores)
    n = len(d)
    mean = float(d.mean()) if n else 0.0
    se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else math.inf
    z = mean / se if se > 0 else (math.copysign(math.inf, mean) if abs(mean) > TOLERANCE else 0.0)
    accepted = mean > TOLERANCE and mean >= z_gate * se
    return GateResult(mean, se, z, n, int((d > TOLERANCE).sum()), int((d < -TOLERANCE).sum()), accepted)


def required_holdout(paired_sd: float, gain: float, z_gate: float = 2.0) -> int:
    """Instances needed so a true ``gain`` sits ``z_gate`` standard errors above zero."""
    if gain <= 0:
        raise ValueError("the gain to detect must be positive")
    return max(2, math.ceil((z_gate * paired_sd / gain) ** 2))


@dataclass(frozen=True)
class FamilyReport:
    before: float
    after: float
    gain: float
    sd: float  # of the per-pair gain
    wins: int
    losses: int
    n: int


def meta_validate(before: Mapping[str, Mapping], after: Mapping[str, Mapping]) -> dict:
    """Per family, before / after / gain / sd of the gain / wins-losses.

    Each family maps ``(instance_id, seed)`` to a score, measured on instances disjoint from
    everything the outer loop saw; the two sides must hold the same keys (paired).
    """
    if set(before) != set(after):
        raise ValueError(f"families differ: {sorted(before)} vs {sorted(after)}")
    report = {}
    for family, old in before.items():
        new = after[family]
        if set(old) != set(new):
            raise ValueError(f"family {family}: before and after are not paired on the same (instance, seed)")
        keys = sorted(old)
        a, b = np.array([old[k] for k in keys], dtype=float), np.array([new[k] for k in keys], dtype=float)
        d = b - a
        report[family] = FamilyReport(
            float(a.mean()),
            float(b.mean()),
            float(d.mean()),
            float(d.std(ddof=1)) if len(d) > 1 else 0.0,
            int((d > TOLERANCE).sum()),
            int((d < -TOLERANCE).sum()),
            len(d),
        )
    return report


def transfer_ratio(report: Mapping[str, FamilyReport], source: str, target: str) -> float | None:
    """Target gain over source gain; None when the source gain is 0 (0/0 is no transfer result).

    Reading: about 1, a better rule; about 0 with a positive source gain, over-fitting to the
    training landscape; negative, generalisation traded for training fit.
    """
    gain = report[source].gain
    if abs(gain) <= TOLERANCE:
        return None
    return report[target].gain / gain
