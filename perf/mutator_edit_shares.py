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

``--data-thresholds`` sets the share of new thresholds drawn from the probe inputs.
``--source`` edits another heuristic instead (say, a run's stalled best member, written out by
``rsi export RUN --snapshot ID DEST``), ``--items`` sets the instances' length and ``--max-ops``
the mutator's; the last line then gives the change in bins of the distinct measured edits.
``--donors`` makes every edit a graft (subtree crossover) from one of the given heuristics, drawn
uniformly per edit: the edit DarwinX's ``graft_probability`` asks for, with another member of
the run as the donor. ``--local-share`` sets the mutator's share of local edits, and
``--weight OP=W`` sets an operator's weight (``jitter_constants=1`` adds joint small steps of every
constant), and ``--by-decisions`` (with ``--probe-inputs``) splits the measured edits by how many of the recorded
calls pick another element than the parent (the jailed probe's count, ``compare``).
"""

from __future__ import annotations

import argparse
import ast
import json
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
from mutator_binpack import edited, train_instances  # the same edits on the same instances

from benchmarks.binpack.lockstep import jailed_assignments
from benchmarks.binpack.online import l1_bound
from rsi.sandbox import Limits
from rsi.workers._mutations import scalar_args
from rsi.workers._probe import compare, load_cases
from rsi.workers._pyedit import marked_functions, module_names
from rsi.workers.mutator import MutatorWorker, OperatorWeights

CAPACITY = 100
BUCKETS = ((0, 0), (1, 2), (3, 8), (9, 10**9))  # recorded calls deciding otherwise

SEED = (Path(__file__).resolve().parents[1] / "targets" / "binpack_bestfit" / "heuristic.py").read_text()


def packings(source: str, instances: list[list[int]]) -> list[np.ndarray] | None:
    """The assignments of ``source``'s heuristic, all instances packed in one rollout jail (the
    mutator's output is candidate code and never runs here); None when it fails on any instance."""
    with tempfile.TemporaryDirectory(prefix="rsi-study-") as tmp:
        (Path(tmp) / "heuristic.py").write_text(source)
        got = jailed_assignments(Path(tmp), instances, CAPACITY, Limits(timeout_s=600))
    return None if got is None else [np.asarray(a) for a in got]


def shares(
    edits: int,
    seed: int,
    config: MutatorWorker.Config,
    probe_file: Path | None,
    source: str = SEED,
    length: int = 1000,
    deltas: list[int] | None = None,
    donors: list[str] | None = None,
    by_decisions: dict[tuple[int, int], list[int]] | None = None,
) -> Counter:
    """Edit outcomes by kind on two instances of ``length`` items; ``deltas`` (if given) collects
    each measured edit's change in bins."""
    train = train_instances(2, length)
    base = packings(source, train)
    assert base is not None
    base_bins = sum(np.unique(a).size for a in base)
    l1 = sum(l1_bound(items, CAPACITY) for items in train)
    worker = MutatorWorker(config, base_dir=Path("."), seed=seed)
    pick = np.random.default_rng([seed, 1])
    seen: set[str] = set()
    out: Counter = Counter()
    cases = load_cases(json.loads(probe_file.read_text())) if by_decisions is not None and probe_file else None
    with tempfile.TemporaryDirectory() as tmp:
        checkout = Path(tmp) / "checkout"
        for _ in range(edits):
            donor = donors[int(pick.integers(len(donors)))] if donors else None
            child = edited(worker, checkout, source, probe_file, donor)
            if child in seen:
                out["repeat"] += 1
                continue
            seen.add(child)
            got = packings(child, train)
            if got is None:
                out["crash"] += 1
                continue
            bins = sum(np.unique(a).size for a in got)
            if all(np.array_equal(a, b) for a, b in zip(got, base)):
                out["neutral"] += 1
                if deltas is not None:
                    deltas.append(0)
            else:
                if deltas is not None:
                    deltas.append(bins - base_bins)
                out["better" if bins < base_bins else "worse"] += 1
                out["large"] += bins - l1 <= (base_bins - l1) / 2
            moved = decisions_changed(source, child, cases, config.constant_scale) if by_decisions is not None else None
            if moved is not None and by_decisions is not None:
                bucket = next(b for b in BUCKETS if b[0] <= moved <= b[1])
                by_decisions.setdefault(bucket, []).append(bins - base_bins)
    return out


def decisions_changed(parent: str, child: str, cases: list[dict] | None, scale: float) -> int | None:
    """On how many recorded calls the child's marked function picks another element than the
    parent's: the jailed probe's count (both run only in the jail), at the worker's constant scale."""
    trees = [ast.parse(source) for source in (parent, child)]
    before, after = (marked_functions(source, tree)[0] for source, tree in zip((parent, child), trees))
    return compare(before, after, module_names(trees[0]), scalar_args(before), scale, "order", cases).changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=800)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--probe", default="equal", choices=["off", "equal", "order"])
    parser.add_argument("--probe-inputs", type=Path)
    parser.add_argument("--source", type=Path, help="the heuristic to edit (default: best fit)")
    parser.add_argument("--items", type=int, default=1000, help="items per instance (two instances)")
    parser.add_argument("--max-ops", type=int, default=3, help="operators per edit: 1..max-ops")
    parser.add_argument("--donors", type=Path, nargs="+", help="heuristics to graft from (every edit is a graft)")
    parser.add_argument("--local-share", type=float, default=0.0, help="the mutator's local_share")
    parser.add_argument("--weight", action="append", default=[], metavar="OP=W", help="an operator weight (repeatable)")
    parser.add_argument("--by-decisions", action="store_true", help="split edits by recorded decisions changed")
    parser.add_argument(
        "--data-thresholds", type=float, default=0.0, help="the mutator's data_thresholds (needs --probe-inputs)"
    )
    args = parser.parse_args()
    config = MutatorWorker.Config(
        type="mutator",
        probe=args.probe,
        probe_inputs="probe.json" if args.probe_inputs else None,
        max_ops=args.max_ops,
        data_thresholds=args.data_thresholds,
        local_share=args.local_share,
        weights=OperatorWeights(**{op: float(w) for op, w in (item.split("=", 1) for item in args.weight)}),
    )
    source = args.source.read_text() if args.source else SEED
    deltas: list[int] = []
    donors = [path.read_text() for path in args.donors or []]
    split: dict[tuple[int, int], list[int]] | None = {} if args.by_decisions else None
    got = shares(args.edits, args.seed, config, args.probe_inputs, source, args.items, deltas, donors, split)
    measured = got["neutral"] + got["better"] + got["worse"] + got["crash"]
    print(
        f"probe {args.probe}{' + inputs' if args.probe_inputs else ''}, data thresholds {args.data_thresholds}, "
        f"{f'grafts from {len(donors)} donors, ' if donors else ''}"
        f"seed {args.seed}: "
        + ", ".join(f"{k} {got[k]}" for k in ("repeat", "neutral", "better", "worse", "crash", "large"))
        + f"; better per distinct edit {100 * got['better'] / max(measured, 1):.1f}%"
        + f", large {100 * got['large'] / max(measured, 1):.2f}%"
    )
    if deltas:
        d = np.array(deltas)
        q10, q50, q90 = np.percentile(d, [10, 50, 90])
        print(
            f"max_ops {args.max_ops}, {args.items} items x 2: change in bins of {d.size} measured edits: "
            f"10/50/90 % quantiles {q10:+.0f} / {q50:+.0f} / {q90:+.0f}, best {d.min():+d}, "
            f"worse by 1-2 bins {int(((d > 0) & (d <= 2)).sum())}"
        )

    for (low, high), changes in sorted((split or {}).items()):
        d = np.array(changes)
        span = f"{low}-{high}" if high < 10**9 else f"{low}+"
        print(f"edits changing {span} recorded decisions: {d.size}, better {(d < 0).sum()}, median {np.median(d):+.0f}")


if __name__ == "__main__":
    main()
