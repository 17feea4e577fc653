"""Throughput of meta-evolve's inner searches: a serial single-process loop vs the cluster fan-out.

Both sides run one gate round as the outer loop does it: ``--rules`` rules (the incumbent and
its candidates: flat PUCT at several constants) each on the same hold-out (the gate's train
split of ``meta_landscape``), through the same code (``PolicyTarget.run``): serially in this
process, and as one ``evaluate_many`` call through the evaluator actor as batched Ray tasks on a
local Ray with ``--cpus`` CPUs, with the run's records written (Parquet rows and trace files, as
in a real run). Each fan-out measurement uses fresh
sample seeds, so nothing is served from the rollout cache; the first one also pays for starting
the Ray worker processes (reported apart as "cold").

Serial and fan-out passes alternate, so the machine's load (shared CPUs) hits both sides of
each ratio. The fan-out's fixed cost per rollout is measured on the same rollouts at inner
budget 1, where nearly all of a pass is overhead, and set against one real inner search. Run it
inside a loopback-only network namespace:

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/meta_throughput.py'
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from algorithms.meta.benchmark import LandscapeBenchmark, MetaParams
from algorithms.meta.target import PolicyTarget
from algorithms.meta.validation import c_rule
from rsi.config import EvaluatorConfig, TargetConfig
from rsi.records import RunRecords
from rsi.results import Request
from rsi.snapshot import Snapshot

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_page import write_page  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def serial(target, rules: list[Snapshot], tasks) -> tuple[float, float]:
    """(wall seconds, summed per-search seconds) of one in-process pass: every rule on ``tasks``."""
    t0, inner = time.perf_counter(), 0.0
    for rule in rules:
        with rule.check_out() as work:
            inner += sum(target.run(work, t, 0, 0).duration_s for t in tasks)
    return time.perf_counter() - t0, inner


def _chunk(job) -> float:
    target, jobs = job
    return sum(target.run(Path(workdir), t, 0, 0).duration_s for workdir, t in jobs)


def pooled(pool, target, workdirs: list[Path], tasks, cpus: int) -> float:
    """Wall seconds of the same searches split over ``cpus`` plain processes: the machine's own
    parallel ceiling right now, with no Ray in the way."""
    jobs = [(str(w), t) for w in workdirs for t in tasks]
    t0 = time.perf_counter()
    pool.map(_chunk, [(target, jobs[i::cpus]) for i in range(cpus)])
    return time.perf_counter() - t0


def fanned(client, rules: list[Snapshot], salt: str) -> tuple[float, float, int]:
    """One gate round's measurement: every rule on the hold-out, in one concurrent call."""
    t0 = time.perf_counter()
    tables = client.evaluate_many([Request(r, "train", salt=salt) for r in rules])
    wall = time.perf_counter() - t0
    return wall, sum(sum(t["duration_s"].to_pylist()) for t in tables), sum(t.num_rows for t in tables)


def rule_snapshots(seed: Snapshot, constants: list[float]) -> list[Snapshot]:
    """The seed rule and flat PUCT at other constants (``c_rule``): a round's incumbent and
    candidates."""
    out = []
    for c in constants:
        if c == 1.0:
            out.append(seed)
            continue
        with seed.check_out() as work:
            (work / "policy.py").write_text(c_rule(c))
            out.append(seed.commit(work, "*"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--holdout", type=int, default=200, help="hold-out pairs (instances, one seed each)")
    ap.add_argument("--rules", type=int, default=5, help="rules measured per round (incumbent + candidates)")
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch-sizes", default="0,8,1", help="evaluator.batch_size values; 0 = the target's hint")
    ap.add_argument("--out", default=str(REPO / "perf" / "results" / "meta-throughput.md"))
    args = ap.parse_args()

    import ray

    from actors.client import EvaluatorClient

    def target_for(budget: int) -> PolicyTarget:
        bench = LandscapeBenchmark(MetaParams(name="meta_landscape", holdout=args.holdout, budget=budget))
        return PolicyTarget(TargetConfig(path=str(REPO / "targets" / "meta_policy"), kind="policy"), bench)

    target, probe = target_for(args.budget), target_for(1)
    seed = Snapshot.from_dir(REPO / "targets" / "meta_policy")
    rules = rule_snapshots(seed, [1.0, 0.0, 0.25, 0.5, 2.0, 0.75, 1.5, 3.0][: args.rules])
    tasks = target.benchmark.split("train")
    n = len(tasks) * len(rules)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    load_before = os.getloadavg()[0]
    pool = multiprocessing.get_context("fork").Pool(args.cpus)  # forked before Ray starts
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    with tempfile.TemporaryDirectory() as tmp:
        workdirs = [r.materialize(Path(tmp) / f"rule{i}") for i, r in enumerate(rules)]

        def client(name: str, tgt, bs: int):
            return EvaluatorClient.start(
                name, tgt, EvaluatorConfig(batch_size=bs or None), 0, False, RunRecords.create(tmp, name)
            )

        clients = {bs: client(f"tp{bs}", target, bs) for bs in sizes}
        probe_client = client("probe", probe, 0)
        serial(target, rules, tasks[:20])  # warm this process's caches (landscapes, the rule's gate)
        cold = {bs: fanned(c, rules, "cold")[0] for bs, c in clients.items()}
        fanned(probe_client, rules, "cold")
        pooled(pool, target, workdirs, tasks, args.cpus)
        # Serial and fan-out passes alternate, so a change in the machine's load hits both sides.
        pairs: dict[int, list] = {bs: [] for bs in sizes}
        serials, probes, pools = [], [], []
        for i in range(args.repeats):
            s = serial(target, rules, tasks)
            serials.append(s)
            pools.append(s[0] / pooled(pool, target, workdirs, tasks, args.cpus))
            for bs, c in clients.items():
                pairs[bs].append((s[0], fanned(c, rules, f"warm{i}")))
            probes.append((serial(probe, rules, tasks)[0], fanned(probe_client, rules, f"warm{i}")[0]))
    ray.shutdown()
    pool.close()
    s_wall = statistics.median(w for w, _ in serials)
    s_inner = statistics.median(i for _, i in serials)
    rows = []
    for bs in sizes:
        walls = [f[0] for _, f in pairs[bs]]
        inner = statistics.median(f[1] for _, f in pairs[bs])
        wall = statistics.median(walls)
        rows.append(
            {
                "batch": bs or f"target hint (<= {target.batch_hint}, equal per CPU)",
                "cold_s": cold[bs],
                "wall_s": wall,
                "rate": n / wall,
                "speedup": statistics.median(sw / f[0] for sw, f in pairs[bs]),
                "inner_ms": 1e3 * inner / n,
                "overhead_ms": 1e3 * (wall * args.cpus - inner) / n,
            }
        )
        r = rows[-1]
        print(
            f"fan-out batch {r['batch']}: warm {wall:.2f}s = {r['rate']:.1f}/s, speedup x{r['speedup']:.2f} "
            f"(median of paired passes), idle CPU-time per search {r['overhead_ms']:.2f} ms"
        )
    probe_fan = statistics.median(f for _, f in probes)
    probe_serial = statistics.median(s for s, _ in probes)
    fixed = {"fan_ms": 1e3 * probe_fan / n, "serial_ms": 1e3 * probe_serial / n, "search_ms": 1e3 * s_wall / n}
    print(
        f"serial: {n / s_wall:.1f}/s, {fixed['search_ms']:.2f} ms per search; budget-1 probe: fan-out "
        f"{fixed['fan_ms']:.3f} ms per rollout, serial {fixed['serial_ms']:.3f} ms"
    )
    ceiling = statistics.median(pools)
    print(f"plain {args.cpus}-process pool: speedup x{ceiling:.2f} (median of paired passes)")
    write(args, n, s_wall, s_inner, rows, fixed, ceiling, (load_before, os.getloadavg()[0]))


def write(args, n, s_wall, s_inner, rows, fixed, ceiling, load) -> None:
    lines = [
        "# meta-evolve: inner-search throughput, serial loop vs cluster fan-out",
        "",
        "Measured by `perf/meta_throughput.py` (command below): one gate round as the outer loop runs it, "
        f"{args.rules} rules (incumbent and candidates: flat PUCT at several constants) each on the gate hold-out "
        f"of `meta_landscape` ({args.holdout} pairs of landscape-source, budget {args.budget}), {n} inner searches "
        "in all, through the same code (`PolicyTarget.run`): serially in one process, and as one `evaluate_many` "
        f"call through the evaluator on a local Ray with {args.cpus} CPUs, the run's records written. "
        f"{args.repeats} rounds; in each, a serial pass and then one "
        "fan-out pass per batch size (fresh sample seeds: no cache hits), so load changes hit both sides; the "
        "speedup is the median of the per-round ratios.",
        "",
        f"Machine load average before/after: {load[0]:.1f} / {load[1]:.1f} on {os.cpu_count()} CPUs, shared "
        "with other jobs: absolute rates are not the machine's, read the paired ratios.",
        "",
        f"Serial loop: {n / s_wall:.1f} searches/s, {1e3 * s_wall / n:.2f} ms per inner search (wall). "
        f"The machine's own parallel ceiling in the same rounds: the same searches split over {args.cpus} plain "
        f"forked processes (no Ray) ran x{ceiling:.2f} faster than the serial loop.",
        "",
        "| evaluator.batch_size | cold pass (s) | warm pass (s) | searches/s | speedup vs serial | "
        "inner time per search in workers (ms) | idle CPU-time per search (ms) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['batch']} | {r['cold_s']:.2f} | {r['wall_s']:.2f} | {r['rate']:.1f} | "
            f"x{r['speedup']:.2f} | {r['inner_ms']:.2f} | {r['overhead_ms']:.2f} |"
        )
    pct = 100 * fixed["fan_ms"] / fixed["search_ms"]
    lines += [
        "",
        f"Fixed cost of the fan-out per rollout (the same {n} rollouts at inner budget 1, so nearly all of the "
        f"pass is Ray scheduling, (de)serialisation, the evaluator actor and the driver's Parquet/trace writes): "
        f"{fixed['fan_ms']:.3f} ms per rollout of wall time through the fan-out, against {fixed['serial_ms']:.3f} ms "
        f"serially; that is {pct:.1f}% of one real inner search ({fixed['search_ms']:.2f} ms).",
        "",
        "Idle CPU-time per search = `(warm wall x cpus - summed in-worker rollout durations) / searches`: CPU "
        "capacity of the fan-out not spent inside inner searches (overhead, the tail of the last batch, and "
        "time the CPUs spent on other jobs). In-worker durations are wall-clock, so contention inflates them too.",
        "",
        "```",
        f"unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/meta_throughput.py "
        f"--holdout {args.holdout} --rules {args.rules} --budget {args.budget} --cpus {args.cpus} "
        f"--repeats {args.repeats} --batch-sizes {args.batch_sizes}'",
        "```",
    ]
    write_page(args.out, lines)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
