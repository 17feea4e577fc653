"""Stage 1's signal: can two node-selection rules be told apart on a tree search over real
bin-packing heuristics?

An inner search of ``meta_binpack`` expands a node by mutating its program with the offline
mutator and packing the result. Each rule of the flat-PUCT family (``--cs``) searches the same
(instance, seed) pairs, once per ``--redraws`` setting (how often an expansion may draw again
while its child packs the train lists exactly as its parent does); the table gives each rule's
mean meta-reward (auc of the held-out best-so-far curve), every pair of rules' paired difference
± SE and z, and on how many pairs the two differ at all. Pairs are instances ``--first``+i
(300000 unless told), apart from every split a run uses; a confirmation of an earlier reading
takes a fresh ``--first`` so that it does not reuse the pairs the reading came from. Every
mutated program packs in the rollout jail, as the domain does in a rollout (one jail start per
node).

    .venv/bin/python perf/meta_stage1.py --family weibull --items 500 --pairs 120 --redraws 0,8
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from algorithms.meta.binpack import OR, WEIBULL
from algorithms.meta.inner import run_inner
from algorithms.meta.rewards import auc
from algorithms.meta.tree import FlatPuct


def one(job: tuple) -> tuple[float, float]:
    family, items, lists, redraws, c, instance, budget = job
    domain = dataclasses.replace(
        OR if family == "or" else WEIBULL, items=items, n_train=lists, n_held_out=lists, redraws=redraws
    )
    start = time.perf_counter()
    reward = auc(run_inner(FlatPuct(c), domain, instance, 0, budget))
    return reward, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=("or", "weibull"), default="weibull")
    ap.add_argument("--items", type=int, default=500, help="items per list")
    ap.add_argument("--lists", type=int, default=2, help="train lists and held-out lists per instance (each)")
    ap.add_argument("--budget", type=int, default=16, help="expansions per inner search")
    ap.add_argument("--pairs", type=int, default=120)
    ap.add_argument("--first", type=int, default=300_000, help="the first pair's instance number")
    ap.add_argument("--cs", default="0,1", help="flat-PUCT constants to compare")
    ap.add_argument("--redraws", default="0,8", help="redraw settings, each measured on the same pairs")
    ap.add_argument("--procs", type=int, default=2)
    args = ap.parse_args()
    cs = [float(c) for c in args.cs.split(",")]
    instances = [args.first + i for i in range(args.pairs)]
    print(
        f"{args.family}, {args.items} items x {args.lists}+{args.lists} lists, budget {args.budget}, "
        f"{args.pairs} pairs (instances {args.first}+i, seed 0)\n"
    )
    print("| redraws | rule | mean auc | s per search | vs | difference ± SE | z | pairs that differ |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    with ProcessPoolExecutor(args.procs) as pool:
        for redraws in (int(r) for r in args.redraws.split(",")):
            got = {}
            for c in cs:
                jobs = [(args.family, args.items, args.lists, redraws, c, i, args.budget) for i in instances]
                out = list(pool.map(one, jobs, chunksize=4))
                got[c] = (np.array([r for r, _ in out]), float(np.mean([t for _, t in out])))
            for a, b in itertools.combinations(cs, 2):
                d = got[a][0] - got[b][0]
                se = float(d.std(ddof=1) / math.sqrt(len(d)))
                z = f"{d.mean() / se:+.2f}" if se > 0 else "n/a"
                print(
                    f"| {redraws} | c = {a:g} | {got[a][0].mean():.5f} | {got[a][1]:.2f} | c = {b:g} "
                    f"({got[b][0].mean():.5f}) | {d.mean():+.5f} ± {se:.5f} | {z} | {np.count_nonzero(d)} of {len(d)} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
