"""Throughput of meta-evolve's inner searches: a serial single-process loop vs the cluster fan-out.

Both sides run the same hold-out (the gate's train split of ``meta_landscape``) with the same
rule through the same code (``PolicyTarget.run``): serially in this process, and through the
evaluator actor as batched Ray tasks on a local Ray with ``--cpus`` CPUs, with the run's records
written (Parquet rows and trace files, as in a real run). Each fan-out measurement uses fresh
sample seeds, so nothing is served from the rollout cache; the first one also pays for starting
the worker processes (reported apart as "cold").

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
import tempfile
import time
from pathlib import Path

from algorithms.meta.benchmark import LandscapeBenchmark, MetaParams
from algorithms.meta.target import PolicyTarget
from rsi.config import EvaluatorConfig, TargetConfig
from rsi.records import RunRecords
from rsi.snapshot import Snapshot

REPO = Path(__file__).resolve().parents[1]


def serial(target, seed: Snapshot, tasks) -> tuple[float, float]:
    """(wall seconds, summed per-search seconds) of one in-process pass over ``tasks``."""
    with seed.check_out() as work:
        t0 = time.perf_counter()
        inner = sum(target.run(work, t, 0, 0).duration_s for t in tasks)
        return time.perf_counter() - t0, inner


def _chunk(job) -> float:
    target, workdir, tasks = job
    return sum(target.run(Path(workdir), t, 0, 0).duration_s for t in tasks)


def pooled(pool, target, workdir: Path, tasks, cpus: int) -> float:
    """Wall seconds of the same searches split over ``cpus`` plain processes: the machine's own
    parallel ceiling right now, with no Ray in the way."""
    t0 = time.perf_counter()
    pool.map(_chunk, [(target, str(workdir), tasks[i::cpus]) for i in range(cpus)])
    return time.perf_counter() - t0


def fanned(client, seed: Snapshot, salt: str) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    table = client.evaluate(seed, "train", salt=salt)
    wall = time.perf_counter() - t0
    return wall, sum(table["duration_s"].to_pylist()), table.num_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--holdout", type=int, default=400, help="hold-out pairs (instances, one seed each)")
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
    tasks = target.benchmark.split("train")
    n = len(tasks)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    load_before = os.getloadavg()[0]
    pool = multiprocessing.get_context("fork").Pool(args.cpus)  # forked before Ray starts
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = seed.materialize(Path(tmp) / "rule")
        def client(name: str, tgt, bs: int):
            return EvaluatorClient.start(name, tgt, EvaluatorConfig(batch_size=bs or None), 0, False,
                                         RunRecords.create(tmp, name))

        clients = {bs: client(f"tp{bs}", target, bs) for bs in sizes}
        probe_client = client("probe", probe, 0)
        serial(target, seed, tasks[:20])  # warm this process's caches (landscapes, the rule's gate)
        cold = {bs: fanned(c, seed, "cold")[0] for bs, c in clients.items()}
        fanned(probe_client, seed, "cold")
        pooled(pool, target, workdir, tasks, args.cpus)
        # Serial and fan-out passes alternate, so a change in the machine's load hits both sides.
        pairs: dict[int, list] = {bs: [] for bs in sizes}
        serials, probes, pools = [], [], []
        for i in range(args.repeats):
            s = serial(target, seed, tasks)
            serials.append(s)
            pools.append(s[0] / pooled(pool, target, workdir, tasks, args.cpus))
            for bs, c in clients.items():
                pairs[bs].append((s[0], fanned(c, seed, f"warm{i}")))
            probes.append((serial(probe, seed, tasks)[0], fanned(probe_client, seed, f"warm{i}")[0]))
    ray.shutdown()
    pool.close()
    s_wall = statistics.median(w for w, _ in serials)
    s_inner = statistics.median(i for _, i in serials)
    rows = []
    for bs in sizes:
        walls = [f[0] for _, f in pairs[bs]]
        inner = statistics.median(f[1] for _, f in pairs[bs])
        wall = statistics.median(walls)
        rows.append({"batch": bs or f"target hint (<= {target.batch_hint}, equal per CPU)", "cold_s": cold[bs],
                     "wall_s": wall, "rate": n / wall, "speedup": statistics.median(sw / f[0] for sw, f in pairs[bs]),
                     "inner_ms": 1e3 * inner / n, "overhead_ms": 1e3 * (wall * args.cpus - inner) / n})
        r = rows[-1]
        print(f"fan-out batch {r['batch']}: warm {wall:.2f}s = {r['rate']:.1f}/s, speedup x{r['speedup']:.2f} "
              f"(median of paired passes), idle CPU-time per search {r['overhead_ms']:.2f} ms")
    probe_fan = statistics.median(f for _, f in probes)
    probe_serial = statistics.median(s for s, _ in probes)
    fixed = {"fan_ms": 1e3 * probe_fan / n, "serial_ms": 1e3 * probe_serial / n, "search_ms": 1e3 * s_wall / n}
    print(f"serial: {n / s_wall:.1f}/s, {fixed['search_ms']:.2f} ms per search; budget-1 probe: fan-out "
          f"{fixed['fan_ms']:.3f} ms per rollout, serial {fixed['serial_ms']:.3f} ms")
    ceiling = statistics.median(pools)
    print(f"plain {args.cpus}-process pool: speedup x{ceiling:.2f} (median of paired passes)")
    write(args, n, s_wall, s_inner, rows, fixed, ceiling, (load_before, os.getloadavg()[0]))


def write(args, n, s_wall, s_inner, rows, fixed, ceiling, load) -> None:
    lines = [
        "# meta-evolve: inner-search throughput, serial loop vs cluster fan-out",
        "",
        "Measured by `perf/meta_throughput.py` (command below): the gate hold-out of `meta_landscape` "
        f"({n} pairs of landscape-source, budget {args.budget}, the seed rule) through the same code "
        "(`PolicyTarget.run`), serially in one process and through the evaluator on a local Ray with "
        f"{args.cpus} CPUs, the run's records written. {args.repeats} rounds; in each, a serial pass and then one "
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
        lines.append(f"| {r['batch']} | {r['cold_s']:.2f} | {r['wall_s']:.2f} | {r['rate']:.1f} | "
                     f"x{r['speedup']:.2f} | {r['inner_ms']:.2f} | {r['overhead_ms']:.2f} |")
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
        f"--holdout {args.holdout} --budget {args.budget} --cpus {args.cpus} --repeats {args.repeats} "
        f"--batch-sizes {args.batch_sizes}'",
        "```",
    ]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
