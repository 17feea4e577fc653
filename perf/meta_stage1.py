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
node). ``--expansion recorded`` runs the mutator with the probe of calls recorded on the family
(the suite's ``expansion: recorded``); records of a study stay apart by expansion.

A study of hundreds of pairs takes hours on a laptop, so every search's reward is appended to
``--out`` (JSON lines) as it finishes and a progress line goes to stderr every ``--every``
searches; run again with the same ``--out`` and the searches already there are read back, not
repeated, so an interrupted study loses at most the searches in flight.

    .venv/bin/python perf/meta_stage1.py --family weibull --items 500 --pairs 120 --redraws 0,8
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from algorithms.meta.binpack import OR, WEIBULL, expansion
from algorithms.meta.inner import run_inner
from algorithms.meta.rewards import auc
from algorithms.meta.tree import FlatPuct


def one(job: tuple) -> tuple[float, float]:
    family, items, lists, redraws, c, instance, budget, kind, data_thresholds = job
    domain = dataclasses.replace(
        OR if family == "or" else WEIBULL,
        items=items,
        n_train=lists,
        n_held_out=lists,
        redraws=redraws,
        mutate=expansion(kind, family, data_thresholds),
    )
    start = time.perf_counter()
    reward = auc(run_inner(FlatPuct(c), domain, instance, 0, budget))
    return reward, time.perf_counter() - start


#: What records written before ``--expansion`` existed were measured with.
BEFORE_EXPANSIONS = {"expansion": "plain", "data_thresholds": 0.0}


def already_done(out: Path | None, setting: dict) -> dict[tuple, tuple[float, float]]:
    """Searches an earlier run of the same study left in ``out``, keyed by (redraws, c, instance).

    A record measured under other settings (family, items, lists, budget) is refused rather than
    mixed in: the study would silently compare rewards of different problems."""
    if out is None or not out.exists():
        return {}
    lines = out.read_text().splitlines()
    if lines:
        try:
            json.loads(lines[-1])
        except json.JSONDecodeError:  # killed while writing its last record: drop that line
            lines.pop()
            out.write_text("".join(line + "\n" for line in lines))
    done = {}
    for n, line in enumerate(lines, 1):
        rec = json.loads(line)
        if any(rec.get(k, BEFORE_EXPANSIONS.get(k)) != v for k, v in setting.items()):
            raise ValueError(f"{out}:{n} was measured with other settings ({rec}); use another --out")
        done[(rec["redraws"], rec["c"], rec["instance"])] = (rec["reward"], rec["seconds"])
    return done


def key(job: tuple) -> tuple:
    """(redraws, c, instance): what tells a study's searches apart."""
    return job[3], job[4], job[5]


def search_all(args: argparse.Namespace, setting: dict, jobs: list[tuple], done: dict) -> dict:
    """Every job's (reward, seconds), the new ones run on a process pool and saved as they end."""
    out = args.out
    todo = [j for j in jobs if key(j) not in done]
    if done:
        print(f"{len(jobs) - len(todo)} of {len(jobs)} searches read back from {out}", file=sys.stderr)
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        pool = ProcessPoolExecutor(args.procs)
        # One shutdown, which on an interrupt drops the queued searches instead of running them all.
        stack.callback(pool.shutdown, cancel_futures=True)
        sink = stack.enter_context(out.open("a")) if out else None
        futures = {pool.submit(one, j): j for j in todo}
        for n, fut in enumerate(as_completed(futures), 1):
            job = futures[fut]
            reward, seconds = fut.result()
            done[key(job)] = (reward, seconds)
            rec = {**setting, "redraws": job[3], "c": job[4], "instance": job[5], "reward": reward, "seconds": seconds}
            if sink:
                sink.write(json.dumps(rec) + "\n")
                sink.flush()
            if n % args.every == 0 or n == len(todo):
                spent = time.perf_counter() - start
                left = spent / n * (len(todo) - n)
                print(
                    f"{n} of {len(todo)} searches, {spent / 60:.1f} min, about {left / 60:.0f} min left",
                    file=sys.stderr,
                    flush=True,
                )
    return done


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
    ap.add_argument(
        "--expansion",
        choices=("plain", "recorded"),
        default="plain",
        help="plain: the mutator probes its edits on synthetic inputs; recorded: it ranks the bins of calls "
        "recorded on the family (probe: order), as the DarwinX bin-packing configs run it",
    )
    ap.add_argument(
        "--data-thresholds",
        type=float,
        default=0.0,
        help="with --expansion recorded: share of new conditions thresholded between recorded values",
    )
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--out", type=Path, help="JSON lines of every search's reward, kept and read back on a rerun")
    ap.add_argument("--every", type=int, default=20, help="searches between progress lines on stderr")
    args = ap.parse_args()
    cs = [float(c) for c in args.cs.split(",")]
    redraws_all = [int(r) for r in args.redraws.split(",")]
    instances = [args.first + i for i in range(args.pairs)]
    if args.data_thresholds and args.expansion != "recorded":
        ap.error("--data-thresholds draws from recorded calls: it needs --expansion recorded")
    setting = {
        "family": args.family,
        "items": args.items,
        "lists": args.lists,
        "budget": args.budget,
        "expansion": args.expansion,
        "data_thresholds": args.data_thresholds,
    }
    # Both rules of a pair run side by side, so a study stopped early still holds whole pairs.
    jobs = [
        (args.family, args.items, args.lists, r, c, i, args.budget, args.expansion, args.data_thresholds)
        for r in redraws_all
        for i in instances
        for c in cs
    ]
    try:
        done = already_done(args.out, setting)
    except ValueError as err:
        ap.error(str(err))  # a usage error: exit 2 with the line to fix
    got = search_all(args, setting, jobs, done)
    print(
        f"{args.family}, {args.items} items x {args.lists}+{args.lists} lists, budget {args.budget}, "
        f"{args.pairs} pairs (instances {args.first}+i, seed 0), {args.expansion} expansion"
        + (f", data thresholds {args.data_thresholds:g}" if args.data_thresholds else "")
        + "\n"
    )
    print("| redraws | rule | mean auc | s per search | vs | difference ± SE | z | pairs that differ |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for redraws in redraws_all:
        rewards = {c: np.array([got[(redraws, c, i)][0] for i in instances]) for c in cs}
        seconds = {c: float(np.mean([got[(redraws, c, i)][1] for i in instances])) for c in cs}
        for a, b in itertools.combinations(cs, 2):
            d = rewards[a] - rewards[b]
            se = float(d.std(ddof=1) / math.sqrt(len(d)))
            z = f"{d.mean() / se:+.2f}" if se > 0 else "n/a"
            print(
                f"| {redraws} | c = {a:g} | {rewards[a].mean():.5f} | {seconds[a]:.2f} | c = {b:g} "
                f"({rewards[b].mean():.5f}) | {d.mean():+.5f} ± {se:.5f} | {z} | {np.count_nonzero(d)} of {len(d)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
