"""Study: what single mutator edits of best fit do to the packing, by mutator setting.

Each of ``--edits`` edits starts from the quickstart's best-fit heuristic (with its type hints);
the child packs 2 generated Weibull instances of 1000 items (``mutator_binpack``'s training
seeds, apart from the benchmark's train, dev and test). An edit is a repeat (the same text as an
earlier edit), neutral (the very same bins as best fit), better or worse (fewer or more bins in
total), or a crash. "large": a better edit that also removes at least half of best fit's excess bins over
the L1 bound, the kind of step that decides a quickstart seed (a band or ``where`` rule that
changes how gaps are left, not a nudge of best fit).

    .venv/bin/python perf/mutator_edit_shares.py --edits 800 --seed 0 --probe order \\
        --probe-inputs targets/binpack_bestfit/probe.json
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
from mutator_binpack import edited, train_instances  # the same edits on the same instances

from benchmarks.binpack.lockstep import jailed_assignment
from benchmarks.binpack.online import l1_bound
from rsi.workers.mutator import MutatorWorker

CAPACITY = 100

SEED = (Path(__file__).resolve().parents[1] / "targets" / "binpack_bestfit" / "heuristic.py").read_text()


def packings(source: str, instances: list[list[int]]) -> list[np.ndarray] | None:
    """The assignments of ``source``'s heuristic, packed in the rollout jail (the mutator's
    output is candidate code and never runs here); None when it fails on any instance."""
    with tempfile.TemporaryDirectory(prefix="rsi-study-") as tmp:
        (Path(tmp) / "heuristic.py").write_text(source)
        out = []
        for items in instances:
            assignment = jailed_assignment(Path(tmp), items, CAPACITY)
            if assignment is None:
                return None
            out.append(np.asarray(assignment))
        return out


def shares(edits: int, seed: int, config: MutatorWorker.Config, probe_file: Path | None) -> Counter:
    train = train_instances(2, 1000)
    base = packings(SEED, train)
    assert base is not None
    base_bins = sum(np.unique(a).size for a in base)
    l1 = sum(l1_bound(items, CAPACITY) for items in train)
    worker = MutatorWorker(config, base_dir=Path("."), seed=seed)
    seen: set[str] = set()
    out: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        checkout = Path(tmp) / "checkout"
        for _ in range(edits):
            child = edited(worker, checkout, SEED, probe_file)
            if child in seen:
                out["repeat"] += 1
                continue
            seen.add(child)
            got = packings(child, train)
            if got is None:
                out["crash"] += 1
            elif all(np.array_equal(a, b) for a, b in zip(got, base)):
                out["neutral"] += 1
            else:
                bins = sum(np.unique(a).size for a in got)
                out["better" if bins < base_bins else "worse"] += 1
                out["large"] += bins - l1 <= (base_bins - l1) / 2
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=800)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--probe", default="equal", choices=["off", "equal", "order"])
    parser.add_argument("--probe-inputs", type=Path)
    args = parser.parse_args()
    config = MutatorWorker.Config(
        type="mutator", probe=args.probe, probe_inputs="probe.json" if args.probe_inputs else None
    )
    got = shares(args.edits, args.seed, config, args.probe_inputs)
    measured = got["neutral"] + got["better"] + got["worse"] + got["crash"]
    print(
        f"probe {args.probe}{' + inputs' if args.probe_inputs else ''}, seed {args.seed}: "
        + ", ".join(f"{k} {got[k]}" for k in ("repeat", "neutral", "better", "worse", "crash", "large"))
        + f"; better per distinct edit {100 * got['better'] / max(measured, 1):.1f}%"
        + f", large {100 * got['large'] / max(measured, 1):.2f}%"
    )


if __name__ == "__main__":
    main()
