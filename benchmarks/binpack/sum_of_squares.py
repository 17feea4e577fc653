"""Sum-of-Squares online bin packing (Csirik, Johnson, Kenyon, Orlin, Shor and Weber, "On the
Sum-of-Squares algorithm for bin packing", J. ACM 53(1), 2006), a trusted reference.

For integer item sizes and capacity B, let N(g) be the number of partially filled bins with gap
g (0 < g < B). Each item goes where the sum over g of N(g)^2 after placing it is least: into a
partial bin whose gap fits it, or into a new bin. It keeps N across items, so it is not a
function of ``(item, bins)`` alone and cannot be written in the ``priority`` template the
benchmark evolves: it is ours, packed in-process, never a candidate and never jailed. Ties
between choices with the same sum go to the smallest resulting gap (0 first: a perfect fit),
then to the lowest bin index; a new bin is the highest index so far.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from benchmarks.binpack.online import count_bins, l1_bound
from rsi.benchmark import Task


def sum_of_squares(items: Sequence[int], capacity: int) -> np.ndarray:
    """Bin index per item (bins numbered in the order they are opened)."""
    capacity = int(capacity)
    count = np.zeros(capacity + 1, dtype=np.int64)  # N(g): partial bins with gap g, 0 < g < capacity
    by_gap: dict[int, list[int]] = {}  # gap -> the partial bins with that gap
    assignment = np.empty(len(items), dtype=np.int64)
    opened = 0
    for i, item in enumerate(items):
        s = int(item)
        if not 0 < s <= capacity:
            raise ValueError(f"item {i} has size {item}, outside (0, {capacity}]")
        best, best_key = capacity, None  # gap ``capacity`` stands for a new bin
        for g in (capacity, *(int(g) + s for g in np.nonzero(count[s:capacity])[0])):
            # change of sum N^2: one bin leaves gap g (none for a new bin), one joins gap g - s
            rest = g - s
            delta = (0 if g == capacity else 1 - 2 * int(count[g])) + (0 if rest == 0 else 1 + 2 * int(count[rest]))
            key = (delta, rest)
            if best_key is None or key < best_key:
                best, best_key = g, key
        if best == capacity:
            b, opened = opened, opened + 1
        else:
            b = min(by_gap[best])
            by_gap[best].remove(b)
            count[best] -= 1
        rest = best - s
        if rest > 0:
            count[rest] += 1
            by_gap.setdefault(rest, []).append(b)
        assignment[i] = b
    return assignment


def sum_of_squares_excess(tasks: Iterable[Task]) -> dict[str, float]:
    """Excess-bin fraction per dataset, (sum bins - sum L1) / sum L1 as the benchmark reports
    it, each packing checked by ``count_bins``."""
    bins: dict[str, int] = {}
    l1: dict[str, int] = {}
    for t in tasks:
        ds = t.meta["dataset"]
        items, cap = t.input["items"], t.input["capacity"]
        bins[ds] = bins.get(ds, 0) + count_bins(items, cap, sum_of_squares(items, cap))
        l1[ds] = l1.get(ds, 0) + l1_bound(items, cap)
    return {ds: (bins[ds] - l1[ds]) / l1[ds] for ds in bins}
