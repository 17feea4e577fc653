"""Study: the two-band family that ``rebuild_band`` proposes, mapped on the generated train split.

``np.where(gap < cut, 1000 - gap, -np.abs(gap - target))`` with ``gap = bins - item``: exact
(or nearly exact) fits first, else the bin that keeps a gap nearest ``target``. The hand rules
of ``perf/results/search-quality.md`` that reach the published Weibull level have this shape;
this maps where in (cut, target) the family is good, so a reader can see how wide the basin a
random draw of the operator has to land in is, and how far a best member of a run is from the
family's best. The rule is ours, not a candidate, so it packs in-process (two processes); only
generated train instances are read, never a test set.

    .venv/bin/python perf/band_family.py [--instances 20] [--cuts 1 2 3 4 6] [--targets 30 58 2]
"""

from __future__ import annotations

import argparse
import itertools
import time
from multiprocessing import Pool

import numpy as np

from benchmarks.binpack.instances import generated
from benchmarks.binpack.online import count_bins, pack

_TASKS: list = []


def _packed(rule: tuple[float, float]) -> tuple[float, float, list[int]]:
    """Bins used on each train instance by the rule (cut, target)."""
    cut, target = rule

    def priority(item: float, bins: np.ndarray) -> np.ndarray:
        gap = bins - item
        return np.where(gap < cut, 1000.0 - gap, -np.abs(gap - target))

    return (
        cut,
        target,
        [
            count_bins(t.input["items"], t.input["capacity"], pack(t.input["items"], t.input["capacity"], priority))
            for t in _TASKS
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--instances", type=int, default=20, help="generated Weibull train instances (the hour config's 20)"
    )
    parser.add_argument("--cuts", type=float, nargs="+", default=[1, 2, 3, 4, 6])
    parser.add_argument("--targets", type=float, nargs=3, default=[30, 58, 2], metavar=("FROM", "TO", "STEP"))
    args = parser.parse_args()
    targets = list(np.arange(*args.targets)) if args.targets[2] > 0 else []
    if args.instances < 1 or not targets:
        parser.error("need --instances of at least 1 and --targets FROM TO STEP with FROM < TO and STEP > 0")
    _TASKS[:] = generated("weibull", "train", count=args.instances)
    rules = list(itertools.product(args.cuts, targets))
    start = time.perf_counter()
    with Pool(2) as pool:
        packed = pool.map(_packed, rules)
    l1 = [t.meta["l1"] for t in _TASKS]
    # (cut, target, bins, excess % over L1, mean score L1/bins: the runs' "train mean")
    results = [
        (c, g, sum(b), 100.0 * (sum(b) - sum(l1)) / sum(l1), float(np.mean(np.divide(l1, b)))) for c, g, b in packed
    ]
    print(
        f"excess % over L1 on {args.instances} generated Weibull train instances, {len(rules)} rules, "
        f"{time.perf_counter() - start:.0f} s"
    )
    print("cut \\ target " + " ".join(f"{t:5g}" for t in targets))
    for cut in args.cuts:
        row = [e for c, _, _, e, _ in results if c == cut]
        print(f"{cut:<13g} " + " ".join(f"{e:5.2f}" for e in row))
    best = min(results, key=lambda r: r[2])
    print(
        f"best: cut {best[0]:g}, target {best[1]:g}: {best[2]} bins, {best[3]:.3f} % excess, train mean {best[4]:.5f}"
    )


if __name__ == "__main__":
    main()
