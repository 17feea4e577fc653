"""Study: does the offline mutator alone find online bin-packing heuristics better than best fit?

A (1+1) hill climb: start from best fit, let ``MutatorWorker.edit`` change a checkout of the
current heuristic, measure the child on a few small Weibull instances (FunSearch's benchmark:
capacity 100, items ~ Weibull(scale 45, shape 3) clipped to 100 and cast to int), keep it when
it uses no more bins. The figure of merit is excess bins over the L1 lower bound
``ceil(sum(items) / capacity)``, in percent: on training instances while searching, then on
held-out 5 x 5000-item instances for the final heuristic.

    .venv/bin/python perf/mutator_binpack.py --evals 200 --runs 6 --jobs 2
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np

from rsi.workers.mutator import MutatorWorker

CAPACITY = 100
SEED_SOURCE = '''"""Online bin packing: priority of each bin that fits the item; the highest wins."""
import numpy as np


# rsi: evolve
def priority(item, bins):
    return -(bins - item)
'''


def weibull_items(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(45.0 * rng.weibull(3.0, n), 0, CAPACITY).astype(int)


def pack(priority, items: np.ndarray, capacity: int = CAPACITY) -> int:
    """Bins used. Only open bins plus one empty bin are offered: for an elementwise priority
    that is the same choice as offering every empty bin (they tie and the lowest index wins)."""
    residual = np.full(len(items) + 1, float(capacity))
    used = 0
    for item in items:
        fits = np.nonzero(residual[: used + 1] >= item)[0]
        scores = np.asarray(priority(item, residual[fits]), dtype=float)
        choice = fits[int(np.argmax(np.broadcast_to(scores, fits.shape)))]
        residual[choice] -= item
        used += choice == used
    return used


def excess(source: str, instances: list[np.ndarray]) -> float:
    """Mean percent of bins over the L1 bound; inf for a heuristic that crashes."""
    namespace: dict = {}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            exec(compile(source, "heuristic.py", "exec"), namespace)
            ratios = []
            for items in instances:
                bound = np.ceil(items.sum() / CAPACITY)
                ratios.append((pack(namespace["priority"], items) - bound) / bound)
    except Exception:  # a candidate's failure is a score, not a crash of the study
        return float("inf")
    return 100.0 * float(np.mean(ratios))


def climb(run: int, evals: int, train: list[np.ndarray], config: MutatorWorker.Config) -> tuple[str, list[float]]:
    """Best source found and the best-so-far training excess after each evaluation."""
    worker = MutatorWorker(config, base_dir=Path("."), seed=run)
    best, best_score, curve = SEED_SOURCE, excess(SEED_SOURCE, train), []
    with tempfile.TemporaryDirectory() as tmp:
        checkout = Path(tmp) / "checkout"
        for _ in range(evals):
            shutil.rmtree(checkout, ignore_errors=True)
            checkout.mkdir()
            (checkout / "heuristic.py").write_text(best)
            worker.edit(checkout, "improve the priority function")
            child = (checkout / "heuristic.py").read_text()
            score = excess(child, train)
            if score < best_score:  # strict, as a gain > 0 gate
                best, best_score = child, score
            curve.append(best_score)
    return best, curve


def study(args, run: int) -> str:
    """One climb, as a table row followed by the heuristic it ended with."""
    train = [weibull_items(args.items, seed) for seed in range(args.train)]
    test = [weibull_items(5000, 1000 + seed) for seed in range(5)]
    config = MutatorWorker.Config(type="mutator", constant_scale=args.scale, max_ops=args.max_ops)
    start = time.perf_counter()
    best, curve = climb(run, args.evals, train, config)
    below = next((i + 1 for i, v in enumerate(curve) if v < excess(SEED_SOURCE, train) - 1e-9), None)
    at = [f"{curve[min(n, len(curve)) - 1]:.2f}%" for n in (50, 100, 200)]
    body = "\n".join("    " + line for line in best.split("# rsi: evolve\n")[1].splitlines())
    return (f"| {run} | {below} | {' | '.join(at)} | {excess(best, test):.2f}% "
            f"| {time.perf_counter() - start:.0f} |\n{body}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evals", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1, help="climbs in parallel processes")
    parser.add_argument("--train", type=int, default=4, help="training instances")
    parser.add_argument("--items", type=int, default=1000, help="items per training instance")
    parser.add_argument("--scale", type=float, default=10.0, help="mutator constant_scale")
    parser.add_argument("--max-ops", type=int, default=3, help="mutator max_ops")
    args = parser.parse_args()
    train = [weibull_items(args.items, seed) for seed in range(args.train)]
    test = [weibull_items(5000, 1000 + seed) for seed in range(5)]
    print(f"best fit: train {excess(SEED_SOURCE, train):.2f}%  held-out Weibull 5k {excess(SEED_SOURCE, test):.2f}%")
    print("| run | first eval below best fit | train @50 | @100 | @200 | held-out 5k | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- |", flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        for row in pool.map(partial(study, args), range(args.runs)):
            print(row, flush=True)


if __name__ == "__main__":
    main()
