"""The statistics of DarwinX's screen and confirm gates: per-task figures of the
preserve-and-extend gate, and the paired uncertainty (sign test, bootstrap) beside it.

Scores stay per task until here: a gate reduces them to gain and regression mass (sums, never
means) and names the inherited solved tasks that fell.
"""

from __future__ import annotations

import math

import numpy as np

from algorithms.slots import TOLERANCE, GateFigures


def solved_set(means: dict[str, float], threshold: float) -> set[str]:
    return {t for t, v in means.items() if v >= threshold - TOLERANCE}


def gate_figures(
    cand: dict[str, float],
    primary: dict[str, float],
    reference: dict[str, float],
    invariant: set[str],
    threshold: float,
    tolerance: float,
) -> GateFigures:
    """``primary``: gain is measured against it; ``reference``: per-task regression reference
    (the primary itself for a mutation, the max of both parents for a recombination)."""
    tasks = sorted(cand)
    gain = sum(cand[t] - primary[t] for t in tasks)
    regression = sum(max(reference[t] - cand[t], 0.0) for t in tasks)
    lost = tuple(sorted(t for t in invariant if t in cand and cand[t] < threshold - TOLERANCE))
    return GateFigures(gain=gain, regression_mass=regression, regression_tolerance=tolerance, lost_invariant=lost)


def screen_passes(
    cand: dict[str, float], primary: dict[str, float], reference: dict[str, float], tolerance: float
) -> tuple[bool, float, float]:
    improved = any(cand[t] > primary[t] + TOLERANCE for t in cand)
    regression = sum(max(reference[t] - cand[t], 0.0) for t in cand)
    return improved and regression <= tolerance + TOLERANCE, sum(cand[t] - primary[t] for t in cand), regression


def screen_reason(ok: bool, cand: dict, primary: dict, regression: float, tolerance: float) -> tuple[str, str]:
    """One condition per reason: the screen fails on no improvement, or on regression."""
    if ok:
        return "screen_passed", "screen passed"
    if not any(cand[t] > primary[t] + TOLERANCE for t in cand):
        return "no_task_improved", "no task improved"
    return "screen_regression", f"regression {regression:.4f} over screen tolerance {tolerance:g}"


def paired_uncertainty(cand: dict[str, float], parent: dict[str, float], seed: int = 0, resamples: int = 2000) -> dict:
    """How much of a gain could be noise: sign test over tasks and a bootstrap 95% interval of
    the summed per-task gain. Reported beside the numeric gate, never part of it."""
    diffs = np.array([cand[t] - parent[t] for t in sorted(cand)])
    wins, losses = int((diffs > TOLERANCE).sum()), int((diffs < -TOLERANCE).sum())
    n = wins + losses
    p = 1.0 if n == 0 else min(1.0, 2 * sum(math.comb(n, k) for k in range(0, min(wins, losses) + 1)) / 2**n)
    rng = np.random.default_rng(seed)
    if len(diffs):
        sums = diffs[rng.integers(0, len(diffs), size=(resamples, len(diffs)))].sum(axis=1)
        lo, hi = np.percentile(sums, [2.5, 97.5])
    else:
        lo = hi = 0.0
    return {
        "wins": wins,
        "losses": losses,
        "sign_test_p": round(p, 6),
        "bootstrap_gain_95": [round(float(lo), 6), round(float(hi), 6)],
    }
