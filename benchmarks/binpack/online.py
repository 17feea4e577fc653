"""The online bin-packing skeleton of FunSearch (Romera-Paredes et al., Nature 2023), shared.

One copy of the packing loop serves the sandboxed skeleton (``skeleton.py``) and every
in-process tool (baselines, reports, tests), so a heuristic measured either way packs the same
bins. The loop is the paper's to the letter: one bin per item, all open at full capacity; each
item asks ``priority(item, residuals of the bins it fits in)`` in bin-index order and goes to
the highest priority, ties to the lowest index (``np.argmax``). A heuristic written for the
paper's notebook therefore gives the same bins here.

Stdlib and NumPy only: the skeleton loads this file by path inside the sandbox.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Priority = Callable[[float, np.ndarray], np.ndarray]


def pack(items: Sequence[int], capacity: int, priority: Priority) -> np.ndarray:
    """Bin index per item. ``items`` is iterated as given (a JSON list yields Python ints,
    as in the paper's notebook), so heuristics see the same types there and here."""
    bins = open_bins(capacity, len(items))
    assignment = np.empty(len(items), dtype=np.int64)
    for i, item in enumerate(items):
        assignment[i] = place(bins, item, priority)
    return assignment


def open_bins(capacity: int, n: int) -> np.ndarray:
    """The paper's start: one bin per item, all at full capacity."""
    return np.array([capacity] * n)


def place(bins: np.ndarray, item, priority: Priority) -> int:
    """One online step: the bin ``item`` goes to (updated in place). The lockstep harness and
    ``pack`` both call it, so a heuristic packs the same bins in the jail and in-process."""
    valid = np.nonzero(bins >= item)[0]
    # Fancy indexing copies, so a heuristic that writes into its argument changes nothing.
    best = int(valid[np.argmax(priority(item, bins[valid]))])
    bins[best] -= item
    return best


def best_fit(item: float, bins: np.ndarray) -> np.ndarray:
    """The paper's starting heuristic: the tightest fit wins."""
    return -(bins - item)


def first_fit(item: float, bins: np.ndarray) -> np.ndarray:
    """The first bin in index order that fits (``bins`` holds only those that fit)."""
    return -np.arange(len(bins), dtype=float)


class InvalidPacking(ValueError):
    """An assignment that is not a packing of the instance."""


def count_bins(items: Sequence[int], capacity: int, assignment) -> int:
    """Bins a packing uses, after checking it really is one: one int bin index in
    ``[0, len(items))`` per item and no bin over capacity. Trusts nothing about ``assignment``."""
    n = len(items)
    if isinstance(assignment, np.ndarray):  # in-process callers; JSON gives lists
        ok = assignment.ndim == 1 and assignment.dtype.kind in "iu"
        assignment = assignment.tolist() if ok else None
    if not isinstance(assignment, (list, tuple)) or len(assignment) != n:
        got = len(assignment) if isinstance(assignment, (list, tuple)) else type(assignment).__name__
        raise InvalidPacking(f"assignment must list one integer bin index per item: {n} items, got {got}")
    # bool and float are not bin indices; the range check precedes any int64 conversion.
    if any(type(b) is not int or not 0 <= b < n for b in assignment):
        raise InvalidPacking(f"bin indices must be integers in [0, {n})")
    if n == 0:
        return 0
    a = np.asarray(assignment, dtype=np.int64)
    loads = np.bincount(a, weights=np.asarray(items, dtype=np.float64), minlength=n)
    over = np.nonzero(loads > capacity)[0]
    if over.size:
        raise InvalidPacking(f"bin {int(over[0])} holds {loads[over[0]]:g} > capacity {capacity}")
    return int(np.count_nonzero(np.bincount(a, minlength=n)))


def l1_bound(items: Sequence[int], capacity: int) -> int:
    """ceil(sum / capacity): the lower bound the published excess figures divide by."""
    return -(-int(sum(items)) // int(capacity))
