"""Quickstart search quality: figures of finished runs, and reference heuristics.

For each run directory: the promoted heuristic, its excess on the generated Weibull dev split
(5 instances x 5000 items, seeds apart from train; the split levers are chosen on), the test
figures the run itself printed (OR1-4, Weibull 5k), admitted candidates, duplicate declines, screen
passes not confirmed as twins of a measured version, confirms under the gain ratio and,
when the runner's wrapper left ``wall.txt`` beside the run (``seconds load1 load5 load15``), the
wall time and load average.

With ``--references``: first fit, best fit and Sum-of-Squares packed in-process on dev and test.
Sum-of-Squares (Csirik et al., ``benchmarks/binpack/sum_of_squares.py``) keeps a count of bins
per gap size and puts each item where the sum of squared counts grows least: it keeps state
across items, so it is not expressible in the ``priority(item, bins)`` template and is shown as
a reference only.

    .venv/bin/python perf/search_quality.py --references runs/qs-1 runs/qs-2 ...

``--write-probe targets/binpack_bestfit/probe.json`` writes the example inputs the quickstart's
mutator probes edits with (``probe_cases``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.binpack import BinPack, BinPackParams
from benchmarks.binpack.instances import TEST_SETS, generated, load_test_set, sample_items
from benchmarks.binpack.lockstep import PackingDialogue
from benchmarks.binpack.online import best_fit, count_bins, first_fit, l1_bound, open_bins, pack, place
from benchmarks.binpack.sum_of_squares import sum_of_squares
from rsi.benchmark import Task
from rsi.records import RunRecords
from rsi.sandbox import Limits, run_program

PROBE_SEED = 40_000  # the probe instance; train draws from 30_000 + i, dev from 31_000 + i


def excess(tasks: list[Task], assign) -> float:
    """Percent excess bins over L1, ratio of means over ``tasks``; ``assign(items, capacity)``."""
    used = sum(np.unique(assign(t.input["items"], t.input["capacity"])).size for t in tasks)
    bound = sum(l1_bound(t.input["items"], t.input["capacity"]) for t in tasks)
    return 100.0 * (used - bound) / bound


def dev_tasks() -> list[Task]:
    return generated("weibull", "dev")


def jailed_excess(tasks: list[Task], checkout: Path) -> float:
    """Percent excess bins over L1 of the heuristic in ``checkout`` on ``tasks``, packed the way
    a rollout packs: the lockstep harness in the rollout jail (the promoted heuristic is
    candidate code; it never runs in this process)."""
    bench = BinPack(BinPackParams(name="binpack"))
    used = bound = 0
    for t in tasks:
        items, capacity = t.input["items"], t.input["capacity"]
        out = run_program(
            [sys.executable, str(bench.harness.resolve())],
            checkout,
            None,
            Limits(timeout_s=600),
            harness=bench.harness_mounts(),
            dialogue=PackingDialogue(items, capacity),
        )
        if out.status != "ok" or out.output is None:
            raise RuntimeError(f"{t.task_id}: the heuristic ended {out.status}: {out.reason}")
        used += count_bins(items, capacity, out.output["assignment"])
        bound += l1_bound(items, capacity)
    return 100.0 * (used - bound) / bound


def probe_cases(seed: int = PROBE_SEED, every: int = 40, limit: int = 30) -> list[dict]:
    """Example inputs of ``priority`` for the mutator's probe, recorded while best fit packs one
    generated Weibull instance (its own seed, apart from train and dev): every ``every``-th item
    whose fitting bins hold at least 3 distinct residuals, with those residuals (distinct, sorted:
    a repeat changes no comparison)."""
    items = sample_items("weibull", np.random.default_rng(seed), 5000).tolist()
    bins, cases = open_bins(100, len(items)), list[dict]()
    for i, item in enumerate(items):
        distinct = sorted({int(b) for b in bins[bins >= item]})
        if i % every == every // 2 and len(distinct) >= 3 and len(cases) < limit:
            cases.append({"item": int(item), "bins": distinct})
        place(bins, item, best_fit)
    return cases


def run_figures(run_dir: Path) -> dict:
    """What a finished run recorded, read from its files only (nothing of the candidate runs
    here): the test figures the runner printed, decision counts, the train rollouts it executed
    and, when a wrapper left ``wall.txt`` beside the run, its wall time and load average."""
    summary = json.loads((run_dir / "summary.json").read_text())
    decisions = [json.loads(line) for line in (run_dir / "decisions.jsonl").read_text().splitlines()]
    rollouts = RunRecords.open(str(run_dir)).rollouts()
    row = {
        "run": run_dir.name,
        "snapshot_id": summary["snapshot_id"],
        "test": {r["dataset"]: r["excess_pct"] for r in summary.get("test_report", [])},
        "train_rollouts": sum(1 for s in rollouts["split"].to_pylist() if s == "train"),
        "admitted": sum(1 for d in decisions if d["kind"] == "confirm" and d["accepted"]),
        "confirms": sum(1 for d in decisions if d["kind"] == "confirm"),
        "duplicates": sum(1 for d in decisions if d["kind"] == "decline" and d.get("reason_code") == "duplicate"),
        "twins": sum(1 for d in decisions if d.get("reason_code") == "screen_matches_known"),
        "below_ratio": sum(1 for d in decisions if d.get("reason_code") == "gain_below_ratio"),
        "decisions": decisions,
    }
    wall = run_dir / "wall.txt"
    if wall.exists():
        seconds, *load = wall.read_text().split()
        row["wall_s"], row["load"] = float(seconds), " ".join(load)
    return row


def run_row(run_dir: Path) -> dict:
    """``run_figures`` plus the promoted heuristic's excess on the generated dev split."""
    records = RunRecords.open(str(run_dir))
    row = run_figures(run_dir)
    snapshot = records.get_snapshot(row["snapshot_id"])
    source = snapshot.text("heuristic.py")
    with tempfile.TemporaryDirectory(prefix="rsi-quality-") as tmp:
        row["dev_weibull"] = jailed_excess(dev_tasks(), snapshot.materialize(Path(tmp) / "checkout"))
    row["heuristic"] = source.split("# rsi: evolve\n", 1)[-1].strip().splitlines()[-1].strip()
    return row


def references() -> list[tuple[str, dict]]:
    test = {name: load_test_set(name) for name in TEST_SETS}
    out = []
    for name, assign in (
        ("first fit", lambda items, cap: pack(items, cap, first_fit)),
        ("best fit", lambda items, cap: pack(items, cap, best_fit)),
        ("Sum-of-Squares (keeps state; not expressible in the priority template)", sum_of_squares),
    ):
        figures = {"dev_weibull": excess(dev_tasks(), assign)}
        figures.update({ds: excess(tasks, assign) for ds, tasks in test.items()})
        out.append((name, figures))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path)
    parser.add_argument("--references", action="store_true")
    parser.add_argument("--write-probe", type=Path, help="write the mutator's probe inputs (JSON) there and stop")
    args = parser.parse_args()
    if args.write_probe:
        args.write_probe.write_text(json.dumps(probe_cases()) + "\n")
        return
    cols = [*TEST_SETS]
    print(
        "| run | dev Weibull (generated) | "
        + " | ".join(cols)
        + " | admitted | duplicates declined | twins not confirmed | under gain ratio | wall | load |"
    )
    print("| --- " * (len(cols) + 8) + "|")
    for run_dir in args.runs:
        r = run_row(run_dir)
        test = " | ".join(f"{r['test'].get(c, float('nan')):.2f}" for c in cols)
        wall = f"{r['wall_s']:.0f} s" if "wall_s" in r else ""
        print(
            f"| {r['run']} | {r['dev_weibull']:.2f} | {test} | {r['admitted']} of {r['confirms']} confirmed "
            f"| {r['duplicates']} | {r['twins']} | {r['below_ratio']} | {wall} | {r.get('load', '')} |",
            flush=True,
        )
    for r in map(run_row, args.runs):
        print(f"{r['run']}: {r['heuristic']}")
    if args.references:
        for name, figures in references():
            test = " | ".join(f"{figures[c]:.2f}" for c in cols)
            print(f"| {name} | {figures['dev_weibull']:.2f} | {test} | | | | | | |", flush=True)


if __name__ == "__main__":
    main()
