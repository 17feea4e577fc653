"""Study: a run on an autoscaling cluster that starts with no worker node.

A head with 0 CPUs runs Ray's autoscaler with the fake multi-node provider
(``cluster/fake_multinode.yaml``: worker nodes of 1 CPU, at most 3, removed after 12 s idle),
every node a real raylet on this machine with token auth. The workload is DarwinX on the table
benchmark (scripted worker, program rollouts in the jail, each sleeping ``--sleep`` seconds so
that rollouts queue while nodes start), submitted with ``rsi submit``. Two runs of the same
config and seed, each from an empty cluster: one undisturbed, and one in which a worker node is
SIGKILLed while it runs a rollout. Measured from the submission: when the first worker node
joined, the worker nodes alive over time, rollouts finished per time bin (from the batch return
times the evaluator writes into every rollout's trace), the CPU count each measurement's batches
were sized for, and how long after the run the cluster was back to no worker node.

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/autoscaling.py'

``tests/test_autoscaling.py`` runs the same scenario (these functions) and asserts on it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from _cluster import FakeAutoscalingCluster, decisions, slow_table_scenario  # noqa: E402

SLEEP_S = 1.0  # seconds each scripted rollout sleeps
SCENARIO = {"train": 8, "test": 2, "edits": ("v2", "v1"), "sleep_s": SLEEP_S}


def scenario(root: Path, sleep_s: float = SLEEP_S) -> Path:
    """The config both runs use (DarwinX, seed 11, 8 train tasks, two scripted edits)."""
    return slow_table_scenario(root, **{**SCENARIO, "sleep_s": sleep_s})


def traces(run_dir: Path) -> list[dict]:
    files = sorted((run_dir / "traces").glob("*.jsonl.gz"))
    return [json.loads(line) for f in files for line in gzip.decompress(f.read_bytes()).decode().splitlines()]


def submit(
    cluster: FakeAutoscalingCluster, config: Path, run_dir: Path, kill: bool = False, timeout: float = 600
) -> dict:
    """``rsi submit`` the config and follow it to the end, sampling the cluster's worker nodes
    throughout. ``kill``: once the run is past its first decision, SIGKILL a worker node while
    a rollout runs on it. -> what happened, with epoch times."""
    watch = cluster.watch()
    watch.wait_first()
    t0 = time.time()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rsi.driver.cli",
            "submit",
            str(config),
            "--address",
            cluster.dashboard_url,
            "--run-dir",
            str(run_dir),
        ],
        cwd=REPO,
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    killed = None
    try:
        deadline = time.monotonic() + timeout
        while kill and killed is None:
            if proc.poll() is not None:
                raise RuntimeError(
                    "the run ended before a worker node could be killed:\n"
                    + (proc.stdout.read() if proc.stdout else "")[-3000:]
                )
            if time.monotonic() > deadline:
                raise RuntimeError("no worker node ran a rollout after the first decision")
            busy = cluster.busy_workers("solve.py") if decisions(run_dir) else []
            if busy:
                kinds = [d["kind"] for d in decisions(run_dir)]
                killed = {
                    "node_id": busy[0],
                    "t": time.time(),
                    "pids": len(cluster.kill_worker(busy[0])),
                    "decisions_before": kinds,
                }
            time.sleep(0.1)
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        t_end = time.time()
        samples = watch.stop()
    return {
        "returncode": proc.returncode,
        "output": out,
        "t_submit": t0,
        "t_end": t_end,
        "samples": samples,
        "killed": killed,
        "run_dir": str(run_dir),
    }


def scale_down(cluster: FakeAutoscalingCluster, t_end: float, timeout: float) -> float | None:
    """Seconds from the end of a run until no worker node is alive; None: still some after
    ``timeout`` seconds of waiting."""
    try:
        cluster.wait_scaled_down(timeout)
    except RuntimeError:
        return None
    return round(time.time() - t_end, 1)


def summarise(run: dict, bin_s: float = 10.0) -> dict:
    """The figures of one run, times in seconds from its submission."""
    t0 = run["t_submit"]
    rel = lambda t: round(t - t0, 1)  # noqa: E731
    run_traces = traces(Path(run["run_dir"]))
    samples = [s for s in run["samples"] if s["t"] >= t0]
    first_node = next((rel(s["t"]) for s in samples if s["workers"]), None)
    # nodes over time: one entry per change of the alive worker count
    timeline, last = [], None
    for s in samples:
        if len(s["workers"]) != last:
            last = len(s["workers"])
            timeline.append([rel(s["t"]), last])
    returned = sorted(t["batch"]["returned_at"] for t in run_traces)
    bins = Counter(int((t - t0) // bin_s) for t in returned)
    span = int((run["t_end"] - t0) // bin_s) + 1
    throughput = [[int(b * bin_s), round(bins.get(b, 0) / bin_s, 2)] for b in range(span)]
    # one entry per measurement that ran rollouts: when it was sized, the CPUs it saw, its batch size
    requests = Counter((t["batch"]["sized_at"], t["batch"]["cluster_cpus"], t["batch"]["size"]) for t in run_traces)
    first_demand = min(t for t, _, _ in requests) if requests else None
    node_at = next((s["t"] for s in samples if s["workers"]), None)
    return {
        "wall_s": rel(run["t_end"]),
        "first_demand_s": rel(first_demand) if first_demand else None,
        "first_node_s": first_node,
        "demand_to_first_node_s": round(node_at - first_demand, 1) if node_at and first_demand else None,
        "first_rollout_s": rel(returned[0]) if returned else None,
        "rollouts_per_s_from_first_node": (
            round(len(returned) / (returned[-1] - node_at), 2)
            if node_at and returned and returned[-1] > node_at
            else None
        ),
        "max_workers_seen": max((len(s["workers"]) for s in samples), default=0),
        "nodes_over_time": timeline,
        "throughput_per_s": throughput,
        "throughput_bin_s": bin_s,
        "rollouts": len(run_traces),
        "rollouts_by_node": dict(Counter(t["node_id"] for t in run_traces)),
        "requests": [
            {"t": rel(t), "cluster_cpus": c, "batch_size": b, "rollouts": k}
            for (t, c, b), k in sorted(requests.items())
        ],
        "killed": _killed(run, samples, run_traces) if run["killed"] else None,
    }


def _killed(run: dict, samples: list[dict], run_traces: list[dict]) -> dict:
    """The kill, and the recovery: until the measurements in flight at the kill were complete
    (their lost batch run again elsewhere), and until a new node took the lost one's place."""
    k, t0 = run["killed"], run["t_submit"]
    before = {w for s in samples if s["t"] <= k["t"] for w in s["workers"]}
    new = next((s["t"] for s in samples if s["t"] > k["t"] and set(s["workers"]) - before), None)
    in_flight = [
        t["batch"]["returned_at"] for t in run_traces if t["batch"]["sized_at"] < k["t"] < t["batch"]["returned_at"]
    ]
    return {
        **k,
        "t": round(k["t"] - t0, 1),
        "kill_to_in_flight_done_s": round(max(in_flight) - k["t"], 1) if in_flight else None,
        "kill_to_new_node_s": round(new - k["t"], 1) if new else None,
    }


def measure(root: Path, sleep_s: float = SLEEP_S) -> dict:
    """Both runs on one cluster, each from an empty cluster, each followed by its scale-down."""
    config = scenario(root, sleep_s)
    cluster = FakeAutoscalingCluster()
    try:
        cluster.wait_ready()
        out = {
            "idle_timeout_s": cluster.idle_timeout_s,
            "max_workers": cluster.autoscaling["max_workers"],
            "worker_cpus": cluster.autoscaling["available_node_types"]["cpu"]["resources"]["CPU"],
            "sleep_s": sleep_s,
            "load_before": os.getloadavg()[0],
        }
        for name, kill in (("undisturbed", False), ("node_killed", True)):
            assert not cluster.workers(), "each run starts with no worker node"
            run = submit(cluster, config, root / "runs" / name, kill=kill)
            if run["returncode"] != 0:
                raise RuntimeError(f"{name} failed:\n{run['output'][-4000:]}")
            out[name] = {**summarise(run), "scale_down_s": scale_down(cluster, run["t_end"], 120)}
        out["load_after"] = os.getloadavg()[0]
        return out
    finally:
        cluster.shutdown()


def table(m: dict) -> str:
    runs = [k for k in ("undisturbed", "node_killed") if k in m]
    rows = [
        ("submission -> first rollouts requested (s)", "first_demand_s"),
        ("first rollouts requested -> first worker node joined (s)", "demand_to_first_node_s"),
        ("submission -> first worker node joined (s)", "first_node_s"),
        ("submission -> first rollout batch back (s)", "first_rollout_s"),
        ("run wall time, submission -> job done (s)", "wall_s"),
        ("most worker nodes alive at once", "max_workers_seen"),
        ("rollouts", "rollouts"),
        ("rollouts/s from the first node to the last rollout", "rollouts_per_s_from_first_node"),
        ("job done -> no worker node alive (s)", "scale_down_s"),
    ]
    lines = ["| | " + " | ".join(runs) + " |", "| --- |" + " --- |" * len(runs)]
    lines += [f"| {label} | " + " | ".join(str(m[r][key]) for r in runs) + " |" for label, key in rows]
    for r in runs:
        lines.append("")
        lines.append(
            f"{r}: worker nodes over time (s: nodes) " + ", ".join(f"{t}: {n}" for t, n in m[r]["nodes_over_time"])
        )
        lines.append(
            f"{r}: rollouts/s per {m[r]['throughput_bin_s']:.0f} s from submission "
            + ", ".join(f"{t}: {v}" for t, v in m[r]["throughput_per_s"])
        )
        lines.append(
            f"{r}: measurements (s: cluster CPUs seen -> batch size x rollouts) "
            + ", ".join(
                f"{q['t']}: {q['cluster_cpus']} -> {q['batch_size']} x {q['rollouts']}" for q in m[r]["requests"]
            )
        )
        lines.append(
            f"{r}: rollouts per node "
            + ", ".join(f"…{k[-5:]}: {v}" for k, v in sorted(m[r]["rollouts_by_node"].items()))
        )
        if m[r]["killed"]:
            k = m[r]["killed"]
            lines.append(
                f"{r}: node …{k['node_id'][-5:]} SIGKILLed at {k['t']} s ({k['pids']} processes), "
                f"after decisions {k['decisions_before']}; the measurements in flight were complete "
                f"{k['kill_to_in_flight_done_s']} s later, a new node joined "
                f"{k['kill_to_new_node_s']} s later"
            )
    return "\n".join(lines)


def main() -> None:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sleep", type=float, default=SCENARIO["sleep_s"], help="seconds each rollout sleeps")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rsi-autoscaling-") as tmp:
        m = measure(Path(tmp), args.sleep)
    print(
        f"fake multi-node cluster: head 0 CPUs, worker nodes of {m['worker_cpus']} CPU, at most "
        f"{m['max_workers']}, idle timeout {m['idle_timeout_s']:.0f} s; rollouts sleep {m['sleep_s']} s; "
        f"load average {m['load_before']:.1f} before / {m['load_after']:.1f} after"
    )
    print(table(m))
    if args.json:
        args.json.write_text(json.dumps(m, indent=1))


if __name__ == "__main__":
    main()
