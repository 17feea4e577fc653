"""A meta gate at hold-out scale: one node against a three-node local cluster.

One gate round as meta-evolve runs it (``docs/algorithms/meta.md``): the incumbent and four
candidates (``candidates_per_round: 4``; here flat PUCT at several constants, built by
``perf/meta_throughput.py``'s ``rule_snapshots``) each on every gate hold-out instance of
``meta_landscape`` (``train``, one seed per instance), as one ``evaluate_many`` call through the
evaluator actor with the run's records written: ``--holdout`` instances x 5 rules inner searches.

Each configuration is a real local Ray cluster started as ``tests/_cluster.py`` starts one
(every node a ``ray start --block`` in its own process group, on loopback, token auth with a
token made for it, stopped by killing exactly those groups), with this script's measuring part
as a separate driver process connected to it:

* ``single``: one node with ``--cpus`` CPUs;
* ``cluster``: a head with ``--head-cpus`` CPUs (default 0: driver, evaluator and records only,
  as ``docs/cluster.md`` sets a head up) and worker nodes sharing ``--cpus`` CPUs between them.

On one machine the nodes share its cores, so the figure that matters is throughput per core
and whether the cluster loses or serialises anything: every pass checks that each of the
searches came back ``ok`` exactly once and counts the rollouts per node from the traces.
Each driver does one cold pass (Ray worker processes start) and ``--repeats`` warm passes,
each on fresh sample seeds (nothing from the rollout cache). Run it in a loopback-only network
namespace:

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/gate_scale.py'
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the test suite's loopback cluster

RULE_CONSTANTS = [1.0, 0.0, 0.25, 0.5, 2.0]  # the incumbent (seed rule, c = 1) and four candidates


def measure(args) -> dict:
    """The driver: connect to the cluster in ``RAY_ADDRESS``, run the gate passes, report."""
    import ray

    from actors.client import EvaluatorClient
    from algorithms.meta.benchmark import LandscapeBenchmark, MetaParams
    from algorithms.meta.target import PolicyTarget
    from perf.meta_throughput import fanned, rule_snapshots
    from rsi.config import EvaluatorConfig, TargetConfig
    from rsi.records import RunRecords
    from rsi.snapshot import Snapshot

    bench = LandscapeBenchmark(MetaParams(name="meta_landscape", holdout=args.holdout, budget=args.budget))
    target = PolicyTarget(TargetConfig(path=str(REPO / "targets" / "meta_policy"), kind="policy"), bench)
    rules = rule_snapshots(Snapshot.from_dir(REPO / "targets" / "meta_policy"), RULE_CONSTANTS)
    n = len(bench.split("train")) * len(rules)
    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False, configure_logging=False)
    cpus = ray.cluster_resources().get("CPU", 0)
    nodes = len([x for x in ray.nodes() if x["Alive"]])
    out: dict = {"searches": n, "cluster_cpus": cpus, "nodes": nodes, "passes": []}
    with tempfile.TemporaryDirectory() as tmp:
        records = RunRecords.create(tmp, "gate")
        client = EvaluatorClient.start("gate", target, EvaluatorConfig(), 0, False, records)
        for i in range(args.repeats + 1):
            seen = set(Path(tmp).rglob("traces/*.jsonl.gz"))
            load = os.getloadavg()[0]
            wall, inner, rows = fanned(client, rules, f"pass{i}")
            per_node: collections.Counter = collections.Counter()
            for f in set(Path(tmp).rglob("traces/*.jsonl.gz")) - seen:
                with gzip.open(f, "rt") as fh:
                    for line in fh:
                        per_node[json.loads(line).get("node_id")] += 1
            out["passes"].append(
                {
                    "cold": i == 0,
                    "wall_s": wall,
                    "inner_s": inner,
                    "rows": rows,
                    "load": load,
                    "per_node": sorted(per_node.values(), reverse=True),
                }
            )
            print(json.dumps(out["passes"][-1]), file=sys.stderr, flush=True)
        stats = client.stats()
        out["executed"], out["cache_hits"] = stats.get("executed"), stats.get("cache_hits")
    ray.shutdown()
    return out


def serial_rate(args) -> float:
    """The per-core reference: a slice of the same searches with no Ray, one after another in
    this process, each rule's searches through one jail as a rollout batch runs them."""
    from algorithms.meta.benchmark import LandscapeBenchmark, MetaParams
    from algorithms.meta.target import PolicyTarget
    from perf.meta_throughput import rule_snapshots
    from rsi.config import TargetConfig
    from rsi.snapshot import Snapshot

    bench = LandscapeBenchmark(MetaParams(name="meta_landscape", holdout=args.holdout, budget=args.budget))
    target = PolicyTarget(TargetConfig(path=str(REPO / "targets" / "meta_policy"), kind="policy"), bench)
    rules = rule_snapshots(Snapshot.from_dir(REPO / "targets" / "meta_policy"), RULE_CONSTANTS)
    tasks = bench.split("train")[: args.serial]
    t0 = time.perf_counter()
    for rule in rules:
        with rule.check_out() as work:
            for i in range(0, len(tasks), target.batch_hint):
                target.run_many(work, [(t, 0, 0) for t in tasks[i : i + target.batch_hint]])
    return len(tasks) * len(rules) / (time.perf_counter() - t0)


def run_config(name: str, args) -> dict:
    from _cluster import LocalCluster

    t0 = time.monotonic()
    if name == "single":
        cluster = LocalCluster(head_cpus=args.cpus)
    else:
        cluster = LocalCluster(head_cpus=args.head_cpus)
        share = [args.cpus // args.workers + (1 if i < args.cpus % args.workers else 0) for i in range(args.workers)]
        cluster.add_nodes(*[(f"w{i}", c, {}) for i, c in enumerate(share)])
    try:
        cluster.wait_ready()
        started = time.monotonic() - t0
        cmd = [
            sys.executable,
            __file__,
            "--measure",
            "--holdout",
            str(args.holdout),
            "--budget",
            str(args.budget),
            "--repeats",
            str(args.repeats),
        ]
        env = {**cluster.env, "RAY_ADDRESS": cluster.gcs_address, "PYTHONPATH": str(REPO)}
        got = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=args.timeout)
        if got.returncode != 0:
            raise SystemExit(f"{name}: driver failed\n{got.stdout[-2000:]}\n{got.stderr[-4000:]}")
        result = json.loads(got.stdout.strip().splitlines()[-1])
    finally:
        cluster.shutdown()
    result.update(config=name, start_s=started)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--holdout", type=int, default=1000, help="gate hold-out instances (x 5 rules)")
    ap.add_argument("--budget", type=int, default=60, help="expansions per inner search")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the single node; shared by the cluster's workers")
    ap.add_argument("--workers", type=int, default=2, help="worker nodes of the cluster (plus the head)")
    ap.add_argument("--head-cpus", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="warm passes per configuration")
    ap.add_argument("--order", default="single,cluster,single")
    ap.add_argument("--serial", type=int, default=200, help="instances of the in-process serial reference")
    ap.add_argument("--timeout", type=float, default=1200)
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args)))
        return
    from algorithms.meta.target import PolicyTarget

    load0 = os.getloadavg()
    serial = serial_rate(args)
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load0[0]:.2f}; serial loop (no Ray, batches of "
        f"{PolicyTarget.batch_hint}) {serial:.1f} searches/s on one core",
        flush=True,
    )
    results = []
    for name in args.order.split(","):
        r = run_config(name, args)
        results.append(r)
        warm = [p for p in r["passes"] if not p["cold"]]
        ok = all(p["rows"] == r["searches"] for p in r["passes"])
        print(
            f"{name}: {r['nodes']} nodes, {r['cluster_cpus']:g} CPUs, started in {r['start_s']:.0f} s; warm walls "
            + ", ".join(f"{p['wall_s']:.1f}" for p in warm)
            + f" s; all {r['searches']} rows every pass: {ok}; per node {warm[-1]['per_node']}",
            flush=True,
        )
    print()
    print(
        "| configuration | nodes | CPUs (Ray) | searches per pass | cold pass s | warm pass s (median) | "
        "searches/s | per core | x serial loop per core | rollouts per node (last pass) | load at passes |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        warm = [p for p in r["passes"] if not p["cold"]]
        wall = statistics.median(p["wall_s"] for p in warm)
        rate = r["searches"] / wall
        cold = next(p for p in r["passes"] if p["cold"])
        loads = " / ".join(f"{p['load']:.1f}" for p in r["passes"])
        print(
            f"| {r['config']} | {r['nodes']} | {r['cluster_cpus']:g} | {r['searches']} | {cold['wall_s']:.1f} | "
            f"{wall:.1f} | {rate:.1f} | {rate / args.cpus:.1f} | x{rate / args.cpus / serial:.2f} | "
            f"{' + '.join(map(str, warm[-1]['per_node']))} | {loads} |"
        )
    # Each cluster pass against the single-node passes just before and after it: the machine's
    # load (other jobs) drifts, and a bracket pairs the cluster with single-node runs made
    # under the load it ran under.
    rate_of = [r["searches"] / statistics.median(p["wall_s"] for p in r["passes"] if not p["cold"]) for r in results]
    for k, r in enumerate(results):
        if r["config"] != "cluster":
            continue
        near = [rate_of[j] for j in (k - 1, k + 1) if 0 <= j < len(results) and results[j]["config"] == "single"]
        if near:
            print(
                f"\nscaling ratio, cluster / single node, searches per second per core (same {args.cpus} cores), "
                f"against the single-node run(s) before/after it: x{rate_of[k] / statistics.mean(near):.3f}"
            )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
