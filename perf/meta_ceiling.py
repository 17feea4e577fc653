"""Stage 0's ceiling beyond the c-family: hand-written selection rules on SOURCE and TARGET.

The meta-evolve runs (``meta_quality.py``) end at the greedy end of the c-family (c = 0): best
on SOURCE, worst on TARGET. This asks whether the narrow face ``priority(rank, visits, total,
prior, depth, n_nodes)`` holds a rule that transfers, and whether SOURCE could tell it apart.
Each rule below is ours (trusted text, built in-process by the same gate as a proposal's); its
gain over the seed rule (flat PUCT, c = 1) is paired by (instance, seed) on two sets of pairs:

- **exploration** (instances 300000+i): where the rules were written and tuned;
- **validation** (instances 200000+i): the pairs every meta-evolve run reports on, used here
  only to print the rules chosen on exploration once more.

Columns: gain ± SE per family, the transfer ratio (TARGET gain / SOURCE gain), where the rule
sits against the c-sweep's Pareto front on the same pairs, and its SOURCE difference from
c = 0 (paired, ± SE): what a SOURCE-only gate would see between the two.

    .venv/bin/python perf/meta_ceiling.py            # about a minute on one core
    .venv/bin/python perf/meta_ceiling.py --steps 100  # + every step rank + w * (arg >= t), ~4 min
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from algorithms.meta.inner import scores
from algorithms.meta.tree import FlatPuct
from algorithms.meta.validation import placement

SOURCE, TARGET = "landscape-source", "landscape-target"
HEAD = "import math\n\n\ndef priority(rank, visits, total, prior, depth, n_nodes):\n    return "
C_SWEEP = (0.0, 0.25, 0.5, 1.0, 2.0)
RULES = {
    "c = 0 (greedy; the runs' end point)": "rank",
    "penalise the share of visits: rank - 0.5 visits/(1+total)": "rank - 0.5 * visits / (1 + total)",
    "visit cap: rank - 0.3 (visits >= 4)": "rank - 0.3 * (visits >= 4)",
    "visit cap: rank - 1.0 (visits >= 6)": "rank - 1.0 * (visits >= 6)",
    "visit cap: rank - 0.3 (visits >= 8)": "rank - 0.3 * (visits >= 8)",
    "visit cap: rank - 1.0 (visits >= 12)": "rank - 1.0 * (visits >= 12)",
    "seed + visit cap: c = 1, - 0.3 (visits >= 6)": "rank + prior * math.sqrt(total) / (1 + visits) - 0.3 * (visits >= 6)",
}


def pairs(base: int, n: int) -> list[tuple[int, int]]:
    return [(base + i, 0) for i in range(n)]


def table(ps: list[tuple[int, int]], budget: int) -> list[str]:
    seed = {f: scores(FlatPuct(1.0), f, ps, budget) for f in (SOURCE, TARGET)}
    greedy_source = scores(FlatPuct(0.0), SOURCE, ps, budget)
    sweep: dict[str, tuple[float, float]] = {}
    for c in C_SWEEP:
        got = {f: scores(FlatPuct(c), f, ps, budget) for f in (SOURCE, TARGET)}
        sweep[f"c={c:g}"] = (float((got[SOURCE] - seed[SOURCE]).mean()), float((got[TARGET] - seed[TARGET]).mean()))
    rows = [
        "| rule | SOURCE gain ± SE | TARGET gain ± SE | transfer | vs c-front | SOURCE vs c = 0 ± SE |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, body in RULES.items():
        got = {f: scores(HEAD + body + "\n", f, ps, budget) for f in (SOURCE, TARGET)}
        gain = {f: got[f] - seed[f] for f in got}
        mean = {f: float(g.mean()) for f, g in gain.items()}
        se = {f: float(g.std(ddof=1) / np.sqrt(len(g))) for f, g in gain.items()}
        versus = got[SOURCE] - greedy_source
        ratio = f"{mean[TARGET] / mean[SOURCE]:.2f}" if abs(mean[SOURCE]) > 1e-12 else "n/a"
        verdict = placement((mean[SOURCE], mean[TARGET]), sweep)["verdict"]
        rows.append(
            f"| {name} | {mean[SOURCE]:+.4f} ± {se[SOURCE]:.4f} | {mean[TARGET]:+.4f} ± {se[TARGET]:.4f} | {ratio} "
            f"| {verdict} | {versus.mean():+.4f} ± {versus.std(ddof=1) / np.sqrt(len(versus)):.4f} |"
        )
    return rows


def step_grid(ps: list[tuple[int, int]], budget: int) -> list[str]:
    """Every step ``rank + w * (arg >= t)`` on a count, against greed (c = 0), on both families:
    which part of the symbolic proposer's step move gains where the outer loop looks, and
    whether it gains on TARGET too."""
    greedy = {f: scores(FlatPuct(0.0), f, ps, budget) for f in (SOURCE, TARGET)}
    rows = ["| step | SOURCE vs c = 0 ± SE | TARGET vs c = 0 ± SE |", "| --- | --- | --- |"]
    grid = itertools.product(("visits", "depth", "total", "n_nodes"), (2, 4, 6, 8, 12, 16, 24, 40), (-1, -0.3, 0.3, 1))
    for arg, t, w in grid:
        body = f"rank + {w} * ({arg} >= {t})"
        cells = []
        for f in (SOURCE, TARGET):
            d = scores(HEAD + body + "\n", f, ps, budget) - greedy[f]
            cells.append(f"{d.mean():+.4f} ± {d.std(ddof=1) / np.sqrt(len(d)):.4f}")
        rows.append(f"| `{body}` | {cells[0]} | {cells[1]} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=200, help="pairs per set (the runs validate on 200)")
    ap.add_argument("--budget", type=int, default=60, help="expansions per inner search (metasearch.yaml: 60)")
    ap.add_argument("--steps", type=int, default=0, help="also the step grid on this many exploration pairs")
    args = ap.parse_args()
    for title, base in (("exploration pairs (300000+i)", 300_000), ("validation pairs (200000+i)", 200_000)):
        print(f"\n{title}, {args.pairs} pairs, budget {args.budget}\n")
        print("\n".join(table(pairs(base, args.pairs), args.budget)), flush=True)
    if args.steps:
        print(f"\nstep grid, exploration pairs (300000+i), {args.steps} pairs, budget {args.budget}\n")
        print("\n".join(step_grid(pairs(300_000, args.steps), args.budget)), flush=True)


if __name__ == "__main__":
    main()
