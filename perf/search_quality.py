"""Quickstart search quality: figures of finished runs, and reference heuristics.

For each run directory: the promoted heuristic, its excess on the generated Weibull dev split
(5 instances x 5000 items, seeds apart from train; the split levers are chosen on), the test
figures the run itself printed (OR1-4, Weibull 5k), admitted candidates, duplicate declines, screen
passes not confirmed as twins of a measured version, confirms under the gain ratio, and the wall
time: from ``wall.txt`` when the runner's wrapper left one beside the run (``seconds load1
load5 load15``, with the load average), else the runner's own ``elapsed_s``.

With ``--fresh``: also each heuristic's excess on the 100 fresh generated Weibull instances
(5000 items each; no run selects on them), beside the 5-instance published set, so a heuristic
fitted to its instances shows it. With ``--family or`` the dev and fresh columns are of the
OR-Library's distribution instead, one per instance size of OR1-OR4 (for ``binpack_or.yaml``
runs; dev: 20 instances, 5 of each size; fresh: 100, 25 of each).

With ``--references``: first fit, best fit, FunSearch's published Weibull heuristic and
Sum-of-Squares packed in-process on dev and test (ours or published, never a run's candidate).
Sum-of-Squares (Csirik et al., ``benchmarks/binpack/sum_of_squares.py``) keeps a count of bins
per gap size and puts each item where the sum of squared counts grows least: it keeps state
across items, so it is not expressible in the ``priority(item, bins)`` template and is shown as
a reference only.

    .venv/bin/python perf/search_quality.py --references runs/qs-1 runs/qs-2 ...

With ``--at-step N``: the member a run of the same configuration and seed stopped after N steps
would have promoted (the highest train mean among the members confirmed by step N: a DarwinX
run is, decision for decision, the first N steps of a longer one), with its test figures packed
here in the jail instead of read from the run's own test report. Use it to read a shorter
budget off one long run.

With ``--promote-on-dev K``: the member DarwinX's ``promote_on_dev: K`` would have promoted at
the end of the run (the K highest train means, each packed on ``--dev-instances`` generated dev
instances in the jail, the best mean score there), so one run shows both final choices, paired.
Its dev instances include the dev column's, so read such a row on the fresh column.

``--write-probe targets/binpack_bestfit/probe.json`` writes the example inputs the quickstart's
mutator probes edits with (``probe_cases``); with ``--probe-family or``, those of the OR config
(``probe_or.json``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from algorithms.slots import HighestTrainMean, Member, best_held_out, train_shortlist
from benchmarks.binpack.instances import TEST_SETS, generated, load_test_set, or_library_sizes, sample_items
from benchmarks.binpack.lockstep import jailed_assignment
from benchmarks.binpack.online import best_fit, count_bins, first_fit, l1_bound, open_bins, pack, place
from benchmarks.binpack.published import funsearch_weibull
from benchmarks.binpack.sum_of_squares import sum_of_squares
from rsi.benchmark import Task
from rsi.records import RunRecords

PROBE_SEED = 40_000  # the probe instance; train draws from 30_000 + i, dev from 31_000 + i


def excess(tasks: list[Task], assign) -> float:
    """Percent excess bins over L1, ratio of means over ``tasks``; ``assign(items, capacity)``."""
    used = sum(np.unique(assign(t.input["items"], t.input["capacity"])).size for t in tasks)
    bound = sum(l1_bound(t.input["items"], t.input["capacity"]) for t in tasks)
    return 100.0 * (used - bound) / bound


def generated_columns(family: str = "weibull", fresh: bool = False) -> dict[str, list[Task]]:
    """The generated instances a report shows, by column: dev (what levers are chosen on) and,
    with ``fresh``, the 100 fresh instances nothing selects on; for OR, one column per size."""
    splits = ["dev", "fresh"] if fresh else ["dev"]
    if family == "weibull":
        return {f"{split} Weibull": generated("weibull", split) for split in splits}
    out = {}
    sizes = or_library_sizes()  # OR runs are judged per OR-Library instance size
    for split in splits:
        tasks = generated("or", split, items=sizes)  # the sizes cycle: 5 (dev) or 25 (fresh) of each
        for n in sizes:
            out[f"{split} OR {n}"] = [t for t in tasks if len(t.input["items"]) == n]
    return out


def jailed_packings(tasks: list[Task], checkout: Path):
    """``(L1 bound, bins used)`` per task of the heuristic in ``checkout``, packed the way a
    rollout packs (``jailed_assignment``: a run's heuristic is candidate code; it never runs in
    this process)."""
    for t in tasks:
        items, capacity = t.input["items"], t.input["capacity"]
        assignment = jailed_assignment(checkout, items, capacity)
        if assignment is None:
            raise RuntimeError(f"{t.task_id}: the heuristic failed in the jail")
        yield l1_bound(items, capacity), count_bins(items, capacity, assignment)


def jailed_excess(tasks: list[Task], checkout: Path) -> float:
    """Percent excess bins over L1 of the heuristic in ``checkout`` on ``tasks``, ratio of sums."""
    bound, used = (sum(column) for column in zip(*jailed_packings(tasks, checkout), strict=True))
    return 100.0 * (used - bound) / bound


def probe_cases(family: str = "weibull", seed: int = PROBE_SEED, limit: int = 30) -> list[dict]:
    """Example inputs of ``priority`` for the mutator's probe, recorded while best fit packs one
    generated instance of ``family`` (its own seed, apart from train and dev; 5000 Weibull items
    or 1000 OR items, the sizes the configs train on): of every 40th item (Weibull) or 10th (OR),
    so both give ``limit`` cases, those whose fitting bins hold at least 3 distinct residuals,
    with those residuals (distinct, sorted: a repeat changes no comparison)."""
    n, capacity, every = {"weibull": (5000, 100, 40), "or": (1000, 150, 10)}[family]
    items = sample_items(family, np.random.default_rng(seed), n).tolist()
    bins, cases = open_bins(capacity, len(items)), list[dict]()
    for i, item in enumerate(items):
        distinct = sorted({int(b) for b in bins[bins >= item]})
        if i % every == every // 2 and len(distinct) >= 3 and len(cases) < limit:
            cases.append({"item": int(item), "bins": distinct})
        place(bins, item, best_fit)
    return cases


def decision_counts(decisions: list[dict]) -> dict[str, int]:
    """Admitted and confirmed candidates, duplicate declines, screen passes not confirmed as
    twins of a measured version, and confirms under the gain ratio."""
    return {
        "admitted": sum(1 for d in decisions if d["kind"] == "confirm" and d["accepted"]),
        "confirms": sum(1 for d in decisions if d["kind"] == "confirm"),
        "duplicates": sum(1 for d in decisions if d["kind"] == "decline" and d.get("reason_code") == "duplicate"),
        "twins": sum(1 for d in decisions if d.get("reason_code") == "screen_matches_known"),
        "below_ratio": sum(1 for d in decisions if d.get("reason_code") == "gain_below_ratio"),
    }


def run_figures(run_dir: Path) -> dict:
    """What a finished run recorded, read from its files only (nothing of the candidate runs
    here): the test figures the runner printed, decision counts, the train rollouts it executed
    and the wall time (a wrapper's ``wall.txt``, with the load average, else ``elapsed_s``)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    decisions = [json.loads(line) for line in (run_dir / "decisions.jsonl").read_text().splitlines()]
    rollouts = RunRecords.open(str(run_dir)).rollouts()
    row = {
        "run": run_dir.name,
        "snapshot_id": summary["snapshot_id"],
        "test": {r["dataset"]: r["excess_pct"] for r in summary.get("test_report", [])},
        "train_rollouts": sum(1 for s in rollouts["split"].to_pylist() if s == "train"),
        **decision_counts(decisions),
        "decisions": decisions,
    }
    wall = run_dir / "wall.txt"
    if wall.exists():
        seconds, *load = wall.read_text().split()
        row["wall_s"], row["load"] = float(seconds), " ".join(load)
    elif "elapsed_s" in summary:  # the runner's own clock, from its start to its summary
        row["wall_s"] = float(summary["elapsed_s"])
    return row


def members_by(decisions: list[dict], step: int | None = None) -> list[Member]:
    """The members DarwinX's promotion chooses among: the seed and the members admitted by
    ``step`` (None: by the end), in the order the run admitted them."""
    return [
        Member(d["snapshot_id"], d["train_mean"])
        for d in decisions
        if (step is None or d["step"] <= step) and (d["kind"] == "seed" or (d["kind"] == "confirm" and d["accepted"]))
    ]


def promoted_by(decisions: list[dict], step: int) -> str:
    """The snapshot DarwinX's promotion rule (``HighestTrainMean``) chooses after ``step`` steps."""
    return HighestTrainMean().choose(members_by(decisions, step)).member_id


def jailed_mean_score(tasks: list[Task], checkout: Path) -> float:
    """The heuristic's mean train-style score on ``tasks`` (L1 bound / bins per instance, the
    benchmark's primary score), packed in the jail."""
    return float(np.mean([bound / used for bound, used in jailed_packings(tasks, checkout)]))


def promoted_on_dev(run_dir: Path, decisions: list[dict], k: int, dev: list[Task]) -> tuple[str, list[dict]]:
    """The member ``promote_on_dev: k`` would promote at the end of this run, read off its
    records: the ``k`` highest train means (``train_shortlist``), each packed on ``dev`` in the
    jail, the best there (``best_held_out``); with the shortlist's figures, best train mean first."""
    records = RunRecords.open(str(run_dir))
    shortlist = train_shortlist(members_by(decisions), k)
    means = {}
    with tempfile.TemporaryDirectory(prefix="rsi-quality-") as tmp:
        for i, m in enumerate(shortlist):
            checkout = records.get_snapshot(m.member_id).materialize(Path(tmp) / f"checkout-{i}")
            means[m.member_id] = jailed_mean_score(dev, checkout)
    figures = [
        {"snapshot_id": m.member_id, "train_mean": m.train_mean, "dev_mean": means[m.member_id]} for m in shortlist
    ]
    return best_held_out(shortlist, means).member_id, figures


def run_row(
    run_dir: Path,
    columns: dict[str, list[Task]] | None = None,
    at_step: int | None = None,
    on_dev: tuple[int, list[Task]] | None = None,
) -> dict:
    """``run_figures`` plus the promoted heuristic's excess on each of the ``generated_columns``
    (default: the Weibull dev split), under ``generated``; with ``at_step``, those of the member
    promoted after that step (``promoted_by``), with ``on_dev`` (k, dev tasks), those of the
    member ``promote_on_dev`` would promote (``promoted_on_dev``); either way its test figures
    are measured here."""
    records = RunRecords.open(str(run_dir))
    row = run_figures(run_dir)
    if at_step is not None:
        row["run"], row["snapshot_id"] = f"{row['run']} at step {at_step}", promoted_by(row["decisions"], at_step)
        row.update(decision_counts([d for d in row["decisions"] if (d.get("step") or 0) <= at_step]))
        row.pop("wall_s", None)  # the wall time is the whole run's
    if on_dev is not None:
        row["snapshot_id"], row["shortlist"] = promoted_on_dev(run_dir, row["decisions"], *on_dev)
        row["run"] = f"{row['run']}, promoted on dev ({row['snapshot_id'][:8]})"
    snapshot = records.get_snapshot(row["snapshot_id"])
    source = snapshot.text("heuristic.py")
    with tempfile.TemporaryDirectory(prefix="rsi-quality-") as tmp:
        checkout = snapshot.materialize(Path(tmp) / "checkout")
        columns = generated_columns() if columns is None else columns
        row["generated"] = {name: jailed_excess(tasks, checkout) for name, tasks in columns.items()}
        if at_step is not None or on_dev is not None:
            row["test"] = {name: jailed_excess(load_test_set(name), checkout) for name in TEST_SETS}
    row["heuristic"] = source.split("# rsi: evolve\n", 1)[-1].strip().splitlines()[-1].strip()
    return row


def references(columns: dict[str, list[Task]]) -> list[tuple[str, dict]]:
    test = {name: load_test_set(name) for name in TEST_SETS}
    out = []
    for name, assign in (
        ("first fit", lambda items, cap: pack(items, cap, first_fit)),
        ("best fit", lambda items, cap: pack(items, cap, best_fit)),
        (
            "FunSearch's Weibull heuristic (published; packed here)",
            lambda items, cap: pack(items, cap, funsearch_weibull),
        ),
        ("Sum-of-Squares (keeps state; not expressible in the priority template)", sum_of_squares),
    ):
        figures = {name: excess(tasks, assign) for name, tasks in columns.items()}
        figures.update({ds: excess(tasks, assign) for ds, tasks in test.items()})
        out.append((name, figures))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path)
    parser.add_argument("--references", action="store_true")
    parser.add_argument("--fresh", action="store_true", help="add the 100 fresh generated instances")
    parser.add_argument(
        "--family", choices=["weibull", "or"], default="weibull", help="the dev and fresh instances' family"
    )
    parser.add_argument("--at-step", type=int, help="the member a run stopped after this many steps would promote")
    parser.add_argument(
        "--promote-on-dev",
        type=int,
        metavar="K",
        help="the member DarwinX's promote_on_dev: K would promote (the K highest train means, chosen on dev)",
    )
    parser.add_argument(
        "--dev-instances", type=int, default=20, help="dev instances --promote-on-dev chooses on (drawn as train is)"
    )
    parser.add_argument("--write-probe", type=Path, help="write the mutator's probe inputs (JSON) there and stop")
    parser.add_argument("--probe-family", choices=["weibull", "or"], default="weibull")
    args = parser.parse_args()
    if args.write_probe:
        args.write_probe.write_text(json.dumps(probe_cases(args.probe_family)) + "\n")
        return
    cols, columns = [*TEST_SETS], generated_columns(args.family, args.fresh)
    print(
        f"| run | {' | '.join(columns)} | "
        + " | ".join(cols)
        + " | admitted | duplicates declined | twins not confirmed | under gain ratio | wall | load |"
    )
    print("| --- " * (len(cols) + len(columns) + 7) + "|")
    rows = []
    on_dev = None
    if args.promote_on_dev:
        sizes = or_library_sizes() if args.family == "or" else None  # as the configs' train mixes them
        on_dev = (args.promote_on_dev, generated(args.family, "dev", args.dev_instances, sizes))
    for run_dir in args.runs:
        r = run_row(run_dir, columns, args.at_step, on_dev)
        rows.append(r)
        gen = " | ".join(f"{r['generated'][c]:.2f}" for c in columns)
        test = " | ".join(f"{r['test'].get(c, float('nan')):.2f}" for c in cols)
        wall = f"{r['wall_s']:.0f} s" if "wall_s" in r else ""
        print(
            f"| {r['run']} | {gen} | {test} | {r['admitted']} of {r['confirms']} confirmed "
            f"| {r['duplicates']} | {r['twins']} | {r['below_ratio']} | {wall} | {r.get('load', '')} |",
            flush=True,
        )
    for r in rows:
        print(f"{r['run']}: {r['heuristic']}")
        for m in r.get("shortlist", []):
            print(f"    {m['snapshot_id']}  train mean {m['train_mean']:.5f}  dev mean {m['dev_mean']:.5f}")
    if args.references:
        for name, figures in references(columns):
            gen = " | ".join(f"{figures[c]:.2f}" for c in columns)
            test = " | ".join(f"{figures[c]:.2f}" for c in cols)
            print(f"| {name} | {gen} | {test} | | | | | | |", flush=True)


if __name__ == "__main__":
    main()
