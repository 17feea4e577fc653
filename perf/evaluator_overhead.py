"""Study: what the evaluator costs per rollout, against a bare ``ray.remote`` loop on the same work.

The work is trivial on purpose (a target that scores 1.0 without running anything), so every
microsecond measured is machinery: for the bare loop, Ray's task submission, scheduling and
result transfer; for the evaluator, also the actor hop, batching, the node's snapshot copy per
rollout (each rollout gets a fresh working directory, unless the target declares it only
reads its snapshot), Arrow rows and, with records, the Parquet and trace files. For scale, the same rollouts through the real sandbox (the
``table_demo`` program: a Python process per rollout) are timed serially.

Each round runs every variant once on fresh sample seeds (no cache hits), in the same order, so
load from other jobs hits all of them; ratios are medians of per-round ratios.

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/evaluator_overhead.py --rollouts 1000 --rounds 5'
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.table import TableBenchmark, TableParams
from rsi.config import EvaluatorConfig, TargetConfig
from rsi.records import RunRecords
from rsi.snapshot import Snapshot
from rsi.target import ProgramTarget, RolloutResult, Target

REPO = Path(__file__).resolve().parents[1]


class NoopTarget(Target):
    """Scores 1.0 and runs nothing: the rollout's own cost is zero."""

    kind = "noop"

    def run(self, workdir, task, trial, sample_seed) -> RolloutResult:
        return RolloutResult(1.0, "ok", 0.0, {})


class ReadOnlyNoopTarget(NoopTarget):
    """The same, declaring it only reads its snapshot: no per-rollout copy of the checkout."""

    needs_private_workdir = False


def noop(target, task):
    return target.run(None, task, 0, 0)


def noop_batch(target, tasks):
    return [target.run(None, t, 0, 0) for t in tasks]


def setup(n: int, tmp: Path):
    ids = [f"t{i}" for i in range(n)]
    (tmp / "table.yaml").write_text(yaml.safe_dump({"splits": {"train": ids}, "scores": {"v0": {t: 1.0 for t in ids}}}))
    bench = TableBenchmark(TableParams(name="table", path="table.yaml"), base_dir=tmp)
    snap = Snapshot.from_dir(REPO / "targets" / "table_demo")
    cfg = TargetConfig(path=str(REPO / "targets" / "table_demo"), entry="solve.py")
    return bench, snap, NoopTarget(cfg, bench), ReadOnlyNoopTarget(cfg, bench), ProgramTarget(cfg, bench)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rollouts", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--sandboxed", type=int, default=20, help="rollouts timed through the real sandbox")
    args = ap.parse_args()
    # A token made for this run: nothing is read from or written to ~/.ray.
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    import ray

    from actors.client import EvaluatorClient

    tmp = Path(tempfile.mkdtemp(prefix="rsi-perf-"))
    load0 = os.getloadavg()[0]
    try:
        bench, snap, target, read_only, program = setup(args.rollouts, tmp)
        ray.init(num_cpus=args.cpus, include_dashboard=False, configure_logging=False, log_to_driver=False)
        tasks = bench.split("train")
        bare = ray.remote(noop).options(num_cpus=1)
        bare_batch = ray.remote(noop_batch).options(num_cpus=1)
        ev = EvaluatorClient.start("perf", target, EvaluatorConfig(), 0, False, None)
        records = RunRecords.create(str(tmp / "runs"), "perf")
        ev_rec = EvaluatorClient.start("perf", target, EvaluatorConfig(), 0, False, records)
        ev_ro = EvaluatorClient.start("perf", read_only, EvaluatorConfig(), 0, False, None)
        batch = max(1, min(8, math.ceil(args.rollouts / (args.cpus * 4))))  # the evaluator's own choice
        target_ref = ray.put(target)
        variants = {
            "bare ray.remote, 1 rollout per task": lambda r: ray.get([bare.remote(target_ref, t) for t in tasks]),
            f"bare ray.remote, {batch} rollouts per task": lambda r: ray.get(
                [bare_batch.remote(target_ref, tasks[i : i + batch]) for i in range(0, len(tasks), batch)]
            ),
            "evaluator, no records": lambda r: ev.evaluate(snap, "train", salt=f"round{r}"),
            "evaluator + Parquet/trace records": lambda r: ev_rec.evaluate(snap, "train", salt=f"round{r}"),
            "evaluator, read-only target (no checkout copy)": lambda r: ev_ro.evaluate(snap, "train", salt=f"round{r}"),
        }
        for fn in variants.values():  # warm: Ray worker processes, snapshot on the node, imports
            fn(-1)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for r in range(args.rounds):
            for name, fn in variants.items():
                times[name].append(timed(lambda: fn(r)))
        stats = ray.get(ev.actor.stats.remote())
        assert stats["cache_hits"] == 0 and stats["executed"] == args.rollouts * (args.rounds + 1)
        sandbox_s = []
        for task in tasks[: args.sandboxed]:
            with snap.check_out() as work:
                sandbox_s.append(timed(lambda: program.run(work, task, 0, 0)))
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)

    base, same_batching = list(variants)[:2]
    sandbox_ms = statistics.median(sandbox_s) * 1e3
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load0:.1f} before / {os.getloadavg()[0]:.1f} after; "
        f"local Ray with {args.cpus} CPUs; {args.rollouts} rollouts per pass, {args.rounds} rounds"
    )
    print()
    print(
        "| variant | per rollout (ms, median wall/rollouts) | x bare 1-per-task (median of per-round ratios) "
        f"| x bare at the evaluator's batching ({batch} per task) | share of one sandboxed rollout |"
    )
    print("| --- | --- | --- | --- | --- |")
    for name, ts in times.items():
        per = statistics.median(ts) / args.rollouts * 1e3
        ratio = statistics.median(t / b for t, b in zip(ts, times[base]))
        same = statistics.median(t / b for t, b in zip(ts, times[same_batching]))
        print(f"| {name} | {per:.3f} | x{ratio:.2f} | x{same:.2f} | {per / sandbox_ms:.1%} |")
    print()
    print(f"one sandboxed `table_demo` rollout, serial, no Ray: {sandbox_ms:.1f} ms (median of {len(sandbox_s)})")


if __name__ == "__main__":
    main()
