"""DarwinX rounds against their critical path: where a round's wall time goes.

DarwinX with ``parallel_candidates: 4`` and the ``agent`` worker on bin packing (the peer
comparison's config, ``perf/peer_openevolve.py``), against ``perf/peer/model.py``: an
OpenAI-compatible server on 127.0.0.1 that answers every call after a fixed latency (2 s) with
a valid edit, here a rotation of priority functions of which some beat best fit on some
instances (so screens pass and confirms run).

Measured per round, from the server's request log and the run's own records (each rollout
batch's ``sized_at``/``returned_at`` from the traces, each rollout's ``duration_s`` from the
Parquet rows, each candidate's step and screen/confirm outcome from ``decisions.jsonl``):

- wall: from the round's first edit request to the next round's (the last round: to its last
  model reply);
- model: time with a model request in flight (edits, their retries, the distil questions);
- evaluating: time with a rollout batch in flight;
- critical path: the model latency the round cannot avoid (the span of its edit requests, then
  the span of its distil questions) plus its longest evaluation chain, the longest
  ``screen -> confirm`` chain of one candidate with unlimited CPUs (its longest screen rollout
  plus its longest confirm rollout);
- CPU bound: the same model latency plus the round's summed rollout time over the cores: what
  the round would take on these cores with no gap at all.

``--tree LABEL=DIR`` (repeatable) runs the same search with the code of another checkout of this
repository (its ``rsi``, its Ray workers) beside this one, alternating, so a change is measured
before/after in one invocation under the same load. Run it in a fresh network namespace::

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/pipeline_overlap.py'
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.peer.model import FixedLatencyModel  # noqa: E402
from perf.peer_openevolve import KEY_ENV, length, rsi_config, union  # noqa: E402

# FunSearch's published Weibull heuristic (beats best fit), best fit itself (no task improves),
# two that trade instances, one that loses everywhere.
VARIANTS = [
    "score = (bins - np.max(bins)) ** 2 / item + bins**2 / item**2\n"
    "    score = score + bins**2 / item**3\n"
    "    score[bins > item] = -score[bins > item]\n"
    "    score[1:] -= score[:-1]\n"
    "    return score",
    "return -(bins - item)",
    "remaining = bins - item\n    return -remaining + 10.0 * (remaining < 5)",
    "remaining = bins - item\n    return np.where(remaining == 0, 1e9, -remaining - 0.1 * np.log1p(remaining))",
    "return -np.arange(len(bins), dtype=float)",
]


def run_search(tree: Path, work: Path, args) -> dict:
    """One ``rsi run`` with ``tree``'s code against a fresh fixed-latency model."""
    work.mkdir(parents=True, exist_ok=True)
    model = FixedLatencyModel(args.latency, variants=VARIANTS).start()
    run_dir = work / "run"
    ns = SimpleNamespace(workers=args.candidates, candidates=args.rounds * args.candidates, screen_size=args.screen)
    cfg = rsi_config(model.base_url, ns, run_dir)
    cfg["algorithm"]["merge_every"] = args.merge_every
    cfg["ray"]["num_cpus"] = args.cpus
    (work / "rsi.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        KEY_ENV: "fixed-latency",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    cmd = [sys.executable, "-m", "rsi.driver.cli", "run", str(work / "rsi.yaml"), "--run-dir", str(run_dir)]
    load = os.getloadavg()[0]
    try:
        with open(work / "stdout.log", "wb") as log:
            rc = subprocess.run(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout)
    finally:
        model.stop()
    if rc.returncode != 0:
        raise SystemExit(f"{work}: exit {rc.returncode}\n{(work / 'stdout.log').read_text()[-3000:]}")
    (work / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in model.log))
    return {"run_dir": run_dir, "requests": [r for r in model.log if r["system"] == "rsi"], "load": load}


def rounds_of(requests: list[dict]) -> list[dict]:
    """The request log cut into rounds: a round's edits (retries included) and then its
    distil questions; the next edit after a distil opens the next round."""
    out: list[dict] = []
    for r in sorted(requests, key=lambda r: r["start"]):
        if r["kind"] == "edit" and (not out or out[-1]["distil"]):
            out.append({"edit": [], "distil": []})
        out[-1][r["kind"]].append((r["start"], r["end"]))
    return out


def analyse(run_dir: Path, requests: list[dict], cpus: int, per_round: int) -> list[dict]:
    import pyarrow.parquet as pq

    decisions = [json.loads(x) for x in (run_dir / "decisions.jsonl").read_text().splitlines() if x]
    step_of = {d["snapshot_id"]: d["step"] for d in decisions if d["kind"] == "screen"}
    batches: list[tuple[float, float]] = []
    for f in (run_dir / "traces").glob("*-train-*.jsonl.gz"):
        with gzip.open(f, "rt") as fh:
            for line in fh:
                b = json.loads(line).get("batch") or {}
                if "sized_at" in b:
                    batches.append((b["sized_at"], b["returned_at"]))
    # Per candidate (by step): its rollouts' durations at the screen (subset) and the confirm
    # (whole pool); a candidate's rows are its own, the parents' come from the cache.
    levels: dict[int, dict[str, list[float]]] = {}
    screened_tasks = {d["step"]: set(d["tasks"]) for d in decisions if d["kind"] == "screen"}
    for f in sorted((run_dir / "rollouts").glob("*-train-*.parquet")):
        for row in pq.read_table(f, columns=["snapshot_id", "task_id", "duration_s"]).to_pylist():
            step = step_of.get(row["snapshot_id"])
            if step is None:
                continue
            got = levels.setdefault(step, {"screen": [], "confirm": []})
            first = row["task_id"] in screened_tasks[step] and len(got["screen"]) < len(screened_tasks[step])
            got["screen" if first else "confirm"].append(row["duration_s"])
    cut = rounds_of(requests)
    out = []
    for k, rnd in enumerate(cut):
        start = rnd["edit"][0][0]
        end = cut[k + 1]["edit"][0][0] if k + 1 < len(cut) else max(b for _, b in rnd["edit"] + rnd["distil"])
        model_iv = union(rnd["edit"] + rnd["distil"], start, end)
        eval_iv = union(batches, start, end)
        steps = range(k * per_round + 1, (k + 1) * per_round + 1)
        chains = [
            max(levels.get(s, {}).get("screen", [0.0]) or [0.0]) + max(levels.get(s, {}).get("confirm", [0.0]) or [0.0])
            for s in steps
        ]
        work = sum(sum(levels.get(s, {}).get(lv, [])) for s in steps for lv in ("screen", "confirm"))
        latency = length(union(rnd["edit"], start, end)) + length(union(rnd["distil"], start, end))
        out.append(
            {
                "round": k + 1,
                "wall": end - start,
                "model": length(model_iv),
                "eval": length(eval_iv),
                "neither": (end - start) - length(union(model_iv + eval_iv, start, end)),
                "latency": latency,
                "chain": max(chains),
                "critical": latency + max(chains),
                "cpu_bound": latency + work / cpus,
                "confirms": sum(1 for s in steps if levels.get(s, {}).get("confirm")),
                "edits": len(rnd["edit"]),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--candidates", type=int, default=4, help="parallel_candidates (and agent replicas)")
    ap.add_argument("--latency", type=float, default=2.0, help="seconds per model call")
    ap.add_argument("--screen", type=int, default=2, help="screen_size (of the 5 train instances)")
    ap.add_argument("--merge-every", type=int, default=0)
    ap.add_argument("--cpus", type=int, default=2, help="local Ray's CPUs")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--tree", action="append", default=[], help="LABEL=DIR: also run with that checkout's code")
    ap.add_argument("--timeout", type=float, default=1200)
    ap.add_argument("--analyse", action="store_true", help="only re-read the runs already in --out")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / f"pipeline-{time.strftime('%Y%m%dT%H%M%S')}")
    args = ap.parse_args()
    trees = {"this": REPO, **{t.split("=", 1)[0]: Path(t.split("=", 1)[1]).resolve() for t in args.tree}}
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; output {args.out}", flush=True)
    results: dict[str, list[list[dict]]] = {label: [] for label in trees}
    for i in range(args.repeats):
        for label, tree in trees.items():
            work = args.out / f"{label}-{i}"
            if args.analyse:
                got = {
                    "run_dir": work / "run",
                    "load": float("nan"),
                    "requests": [json.loads(x) for x in (work / "requests.jsonl").read_text().splitlines()],
                }
                got["requests"] = [r for r in got["requests"] if r["system"] == "rsi"]
            else:
                got = run_search(tree, work, args)
            rows = analyse(got["run_dir"], got["requests"], args.cpus, args.candidates)
            results[label].append(rows)
            print(f"\n{label} (repeat {i}, load average {got['load']:.2f} at start, {got['run_dir']})")
            print(table(rows))
    print("\nsummary: every round of every repeat, by whether the round ran a confirm (medians)")
    print(
        "| code | round kind | rounds | wall s | critical path s | wall / critical | CPU bound s | wall - CPU bound s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label in trees:
        for kind, pick in (
            ("with a confirm", lambda r: r["confirms"] > 0),
            ("screens only", lambda r: not r["confirms"]),
        ):
            rounds = [r for rows in results[label] for r in rows if pick(r)]
            if not rounds:
                continue
            med = {k: statistics.median(r[k] for r in rounds) for k in ("wall", "critical", "cpu_bound")}
            ratio = statistics.median(r["wall"] / r["critical"] for r in rounds)
            slack = statistics.median(r["wall"] - r["cpu_bound"] for r in rounds)
            print(
                f"| {label} | {kind} | {len(rounds)} | {med['wall']:.2f} | {med['critical']:.2f} | x{ratio:.2f} | "
                f"{med['cpu_bound']:.2f} | {slack:.2f} |"
            )
    # The model hands out its variants in the order requests arrive, and a round's four edit
    # requests race: which candidate gets which variant (so which rounds confirm) differs from
    # run to run. Decisions of a fixed seed and a deterministic worker, with and without the
    # overlap, are compared by tests/test_darwinx_pipeline.py, not here.


def table(rows: list[dict]) -> str:
    lines = [
        "| round | edits asked | confirms | wall s | model s | evaluating s | neither s | model latency s | "
        "longest eval chain s | critical path s | wall / critical | CPU bound s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['round']} | {r['edits']} | {r['confirms']} | {r['wall']:.2f} | {r['model']:.2f} | {r['eval']:.2f} | "
            f"{r['neither']:.2f} | {r['latency']:.2f} | {r['chain']:.2f} | {r['critical']:.2f} | "
            f"x{r['wall'] / r['critical']:.2f} | {r['cpu_bound']:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
