"""rsi (DarwinX) beside OpenEvolve 0.4.0 on the same problem, model and budget.

Problem: evolve the online bin-packing ``priority(item, bins)`` function from best fit, scored
by rsi's ``binpack`` benchmark on its five generated Weibull train instances (primary score
L1 / bins, averaged). rsi runs the quickstart's DarwinX with the ``agent`` worker; OpenEvolve
runs ``perf/peer/evaluator.py`` (the same instances and score) over ``perf/peer/initial_program.py``.

Model: ``perf/peer/model.py``, an OpenAI-compatible server on 127.0.0.1 that answers every chat
completion after a fixed latency with the next of twelve priority variants, in each system's
own reply format (rsi: ``write_file`` + ``finish`` tool calls; OpenEvolve: a full rewrite).

Budget: the same number of candidates (``--candidates``), four proposals in flight (rsi
``parallel_candidates`` and worker replicas; OpenEvolve ``parallel_evaluations``), and the
machine's CPUs for both.

Measured per run: candidates evaluated per minute of search wall time (launch to the last
candidate's end), time to the first evaluated candidate, CPU seconds of the whole process tree
(``RUSAGE_CHILDREN`` with this process a child subreaper, so Ray's daemons and the jails are
reaped here and counted), the driver's peak RSS (VmHWM) and the tree's sampled peak RSS, and
how the search wall splits between waiting on the model (the server's request log) and
evaluating (rsi: the rollout batches' own timestamps; OpenEvolve: the evaluator's log).

Run it in a fresh network namespace (Ray and the model bind loopback ports)::

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/peer_openevolve.py'

``--cluster`` adds an rsi run on a three-node local Ray cluster (head + 2 workers, started
with ``ray start`` on loopback ports, stopped by killing their process groups).
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the test suite's cluster and process helpers

from _cluster import descendants  # noqa: E402

from perf.peer.model import VARIANTS, FixedLatencyModel  # noqa: E402

PEER = REPO / "perf" / "peer"
BIN = Path(sys.executable).parent
MODEL = "fixed-latency-model"
KEY_ENV = "PEER_MODEL_KEY"


# ---- process accounting -------------------------------------------------------------------------
def become_subreaper() -> None:
    """Orphans of the measured tree (Ray workers whose raylet exited, jails) become our children,
    so their CPU time reaches RUSAGE_CHILDREN when we reap them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        print("warning: PR_SET_CHILD_SUBREAPER failed; CPU of orphaned processes may be missed", file=sys.stderr)


def _kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def reap_all(timeout: float = 30.0, keep_roots: tuple[int, ...] = (), grace: float = 5.0) -> int:
    """Wait for every descendant of this process (but ``keep_roots`` and theirs) to end, then
    SIGTERM and at last SIGKILL the stragglers, reaping all; returns how many were killed."""
    start = time.monotonic()
    deadline, killed, signalled = start + timeout, 0, dict[int, signal.Signals]()
    while True:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
        exclude = set(keep_roots).union(*(descendants(r) for r in keep_roots))
        left = [p for p in descendants(os.getpid()) if p not in exclude]
        if not left:
            return killed
        now = time.monotonic()
        if now - start < grace:
            time.sleep(0.2)
            continue
        for p in left:
            sig = signal.SIGKILL if now > deadline - timeout / 2 else signal.SIGTERM
            if signalled.get(p) == sig:
                continue
            try:
                os.kill(p, sig)
                signalled[p] = sig
                killed += sig == signal.SIGKILL
            except ProcessLookupError:
                pass
        if now > deadline:
            return killed
        time.sleep(0.2)


class Sampler(threading.Thread):
    """Every 0.2 s: the driver's VmHWM, the tree's summed RSS and its process count."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.stop = pid, threading.Event()
        self.driver_hwm_kib = self.tree_rss_peak_kib = self.procs_peak = 0

    def run(self) -> None:
        while not self.stop.is_set():
            self.driver_hwm_kib = max(self.driver_hwm_kib, _kib(self.pid, "VmHWM"))
            tree = [p for p in descendants(os.getpid()) if p != os.getpid()]
            self.tree_rss_peak_kib = max(self.tree_rss_peak_kib, sum(_kib(p, "VmRSS") for p in tree))
            self.procs_peak = max(self.procs_peak, len(tree))
            self.stop.wait(0.2)


# ---- interval arithmetic ------------------------------------------------------------------------
def union(intervals: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def intersect(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> float:
    total, i, j = 0.0, 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        total += max(0.0, b - a)
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


# ---- the two systems ----------------------------------------------------------------------------
def rsi_config(base_url: str, args, run_dir: Path, address: str = "local") -> dict:
    """configs/quickstart.yaml with the agent worker on the fixed-latency model; every candidate
    is screened on all five train instances (the same evaluation OpenEvolve's evaluator does)."""
    return {
        "name": "peer-openevolve",
        "seed": 42,
        "storage": str(run_dir.parent),
        "ray": {"address": address},
        "target": {
            "path": str(REPO / "targets" / "binpack_bestfit"),
            "kind": "program",
            "deterministic": True,
            "limits": {"timeout_s": 60, "memory_mb": 2048},
        },
        # The promoted heuristic is measured on a test set after the search; the smallest keeps
        # that out of the way (it is outside the search wall either way).
        "benchmark": {"name": "binpack", "train": "weibull", "test": ["Weibull 5k"]},
        "algorithm": {
            "name": "darwinx",
            "worker": {
                "type": "agent",
                "replicas": args.workers,
                "max_turns": 4,
                "llm": {
                    "provider": "openai",
                    "model": MODEL,
                    "base_url": base_url,
                    "api_key_env": KEY_ENV,
                    "timeout_s": 120,
                    "max_retries": 2,
                },
            },
            "max_steps": args.candidates,
            "parallel_candidates": args.workers,
            "screen_size": args.screen_size,
            "screen_samples": 1,
            "confirm_samples": 1,
            "screen_regression_tolerance": 1.0,
            "regression_tolerance": 0.0,
            "solved_threshold": 1.0,
            "exploration_probability": 0.3,
            "merge_every": 6,
        },
    }


def openevolve_config(base_url: str, args) -> dict:
    return {
        "max_iterations": args.candidates,
        "checkpoint_interval": 10_000,
        "log_level": "INFO",
        "random_seed": 42,
        "language": "python",
        "diff_based_evolution": False,  # the model answers with the whole program
        "max_code_length": 10_000,
        "llm": {
            "api_base": base_url,
            "api_key": "not-a-key",
            "models": [{"name": MODEL, "weight": 1.0}],
            "temperature": 0.7,
            "max_tokens": 4096,
            "timeout": 120,
            "retries": 2,
            "retry_delay": 1,
        },
        "prompt": {"num_top_programs": 3, "num_diverse_programs": 2},
        "database": {"population_size": 100, "num_islands": args.workers, "random_seed": 42},
        "evaluator": {
            "timeout": 60,
            "max_retries": 0,
            "cascade_evaluation": False,
            "parallel_evaluations": args.workers,
        },
        "evolution_trace": {"enabled": False},
    }


def rsi_records(run_dir: Path) -> dict:
    """Candidates (screen decisions), evaluation batches and the first candidate's end time."""
    import pyarrow.parquet as pq

    decisions = [json.loads(line) for line in (run_dir / "decisions.jsonl").read_text().splitlines() if line]
    screened = [d for d in decisions if d["kind"] == "screen"]
    confirmed = [d for d in decisions if d["kind"] == "confirm"]
    declined = [d for d in decisions if d["kind"] not in ("seed", "screen", "confirm", "merge", "promote", "test")]
    promote: dict = next((d for d in decisions if d["kind"] == "promote"), {})
    calls = []  # one per evaluate() call: (index, end time from the file name, rollout seconds)
    for f in sorted((run_dir / "rollouts").glob("*-train-*.parquet")):
        ts, _, n = f.stem.split("-")
        t = pq.read_table(f, columns=["duration_s"])
        calls.append((int(n), int(ts) / 1e9, sum(t.column("duration_s").to_pylist()), t.num_rows))
    calls.sort()
    batches, nodes = [], dict[str, int]()
    for f in (run_dir / "traces").glob("*-train-*.jsonl.gz"):
        with gzip.open(f, "rt") as fh:
            for line in fh:
                row = json.loads(line)
                nodes[row.get("node_id")] = nodes.get(row.get("node_id"), 0) + 1
                b = row.get("batch") or {}
                if "sized_at" in b and "returned_at" in b:
                    batches.append((b["sized_at"], b["returned_at"]))
    return {
        "candidates": len(screened),
        "confirmed": len(confirmed),
        "declined_edits": len(declined),
        "eval_intervals": batches,
        "rollout_s": sum(c[2] for c in calls[1:]),
        "rollouts": sum(c[3] for c in calls[1:]),
        "first_candidate_end": calls[1][1] if len(calls) > 1 else None,
        "last_eval_end": calls[-1][1] if calls else None,
        "best": promote.get("train_mean"),
        "rollouts_per_node": sorted(nodes.values(), reverse=True),
    }


def openevolve_records(eval_log: Path) -> dict:
    rows = sorted((json.loads(line) for line in eval_log.read_text().splitlines() if line), key=lambda r: r["end"])
    cands = rows[1:]  # the first evaluation is the initial program
    return {
        "candidates": len(cands),
        "eval_intervals": [(r["start"], r["end"]) for r in rows],
        "rollout_s": sum(r["end"] - r["start"] for r in cands),
        "rollouts": 5 * len(cands),
        "first_candidate_end": cands[0]["end"] if cands else None,
        "last_eval_end": rows[-1]["end"] if rows else None,
        "best": max((r["score"] for r in rows), default=None),
    }


def run_one(system: str, latency: float, args, out: Path, cluster: bool = False) -> dict:
    label = f"{system}{'-3node' if cluster else ''}-{latency:g}s"
    work = out / label
    work.mkdir(parents=True, exist_ok=True)
    model = FixedLatencyModel(latency).start()
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    nodes = None
    try:
        if system == "rsi":
            address = "local"
            if cluster:
                # The agent replicas run on the nodes, in the nodes' environment: the variable
                # named by api_key_env has to be there (it is not forwarded from the driver).
                os.environ[KEY_ENV] = "fixed-latency"
                from _cluster import LocalCluster  # the test suite's loopback cluster

                nodes = LocalCluster(head_cpus=args.cluster_cpus)
                nodes.add_nodes(("w1", args.cluster_cpus, {}), ("w2", args.cluster_cpus, {}))
                nodes.wait_ready()
                address, env = nodes.gcs_address, dict(nodes.env)
            run_dir = work / "run"
            cfg = rsi_config(model.base_url, args, run_dir, address)
            (work / "rsi.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
            cmd = [str(BIN / "rsi"), "run", str(work / "rsi.yaml"), "--run-dir", str(run_dir)]
            env[KEY_ENV] = "fixed-latency"
        else:
            cfg = openevolve_config(model.base_url, args)
            (work / "openevolve.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
            eval_log = work / "evaluations.jsonl"
            eval_log.unlink(missing_ok=True)
            env["PEER_EVAL_LOG"] = str(eval_log)
            cmd = [
                str(BIN / "openevolve-run"),
                str(PEER / "initial_program.py"),
                str(PEER / "evaluator.py"),
                "--config",
                str(work / "openevolve.yaml"),
                "--output",
                str(work / "output"),
                "--iterations",
                str(args.candidates),
            ]
        keep = tuple(n.proc.pid for n in nodes.nodes) if nodes else ()  # counted after teardown
        load_before = os.getloadavg()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        with open(work / "stdout.log", "wb") as log:
            proc = subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        sampler = Sampler(proc.pid)
        sampler.start()
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        t_exit = time.time()
        sampler.stop.set()
        sampler.join()
        killed = reap_all(keep_roots=keep)
    finally:
        if nodes is not None:
            nodes.shutdown()
            reap_all()
        model.stop()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_after = os.getloadavg()
    cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    if rc != 0:
        tail = (work / "stdout.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"{label}: exit {rc}\n{tail}")
    rec = rsi_records(run_dir) if system == "rsi" else openevolve_records(eval_log)
    requests = [r for r in model.log if r["system"] == system]
    (work / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in model.log))
    model_iv = [(r["start"], r["end"]) for r in requests]
    search_end = max([rec["last_eval_end"] or t0] + [b for _, b in model_iv])
    wall = search_end - t0
    m, e = union(model_iv, t0, search_end), union(rec["eval_intervals"], t0, search_end)
    both = intersect(m, e)
    first_request = min((a for a, _ in model_iv), default=t0) - t0
    return {
        "label": label,
        "system": system,
        "latency_s": latency,
        "nodes": 3 if cluster else 1,
        "command": " ".join(cmd),
        "config": str(work / ("rsi.yaml" if system == "rsi" else "openevolve.yaml")),
        "exit": rc,
        "candidates": rec["candidates"],
        "best_train_score": rec["best"],
        "declined_edits": rec.get("declined_edits", 0),
        "confirmed": rec.get("confirmed"),
        "rollouts_per_node": rec.get("rollouts_per_node"),
        "search_wall_s": wall,
        "process_wall_s": t_exit - t0,
        "per_min": 60 * rec["candidates"] / wall if wall > 0 else 0.0,
        "first_candidate_s": (rec["first_candidate_end"] - t0) if rec["first_candidate_end"] else None,
        "first_request_s": first_request,
        "cpu_s": cpu_s,
        "cpu_util": cpu_s / ((t_exit - t0) * (os.cpu_count() or 1)),
        "driver_peak_mib": sampler.driver_hwm_kib / 1024,
        "tree_peak_mib": sampler.tree_rss_peak_kib / 1024,
        "procs_peak": sampler.procs_peak,
        "model_requests": len(requests),
        "model_kinds": {k: sum(r["kind"] == k for r in requests) for k in sorted({r["kind"] for r in requests})},
        "model_busy": length(m) / wall,
        "eval_busy": length(e) / wall,
        "model_only": (length(m) - both) / wall,
        "eval_only": (length(e) - both) / wall,
        "both": both / wall,
        "neither": 1 - (length(m) + length(e) - both) / wall,
        "eval_s_per_candidate": rec["rollout_s"] / max(1, rec["candidates"]),
        "killed_after_exit": killed,
        "load_before": load_before,
        "load_after": load_after,
    }


# ---- report -------------------------------------------------------------------------------------
ROWS = [
    ("candidates evaluated", "candidates", "{:d}"),
    ("candidates / min (search wall)", "per_min", "{:.2f}"),
    ("search wall s (launch to last candidate)", "search_wall_s", "{:.1f}"),
    ("process wall s (launch to exit)", "process_wall_s", "{:.1f}"),
    ("time to first model request s", "first_request_s", "{:.1f}"),
    ("time to first evaluated candidate s", "first_candidate_s", "{:.1f}"),
    ("CPU s (whole process tree)", "cpu_s", "{:.1f}"),
    ("CPU s per candidate", "cpu_per_candidate", "{:.2f}"),
    ("CPU utilisation (CPU s / process wall / cores)", "cpu_util", "{:.0%}"),
    ("driver peak RSS MiB", "driver_peak_mib", "{:.0f}"),
    ("process tree peak RSS MiB (sampled)", "tree_peak_mib", "{:.0f}"),
    ("processes, peak", "procs_peak", "{:d}"),
    ("model requests", "model_requests", "{:d}"),
    ("search wall: model in flight", "model_busy", "{:.0%}"),
    ("search wall: evaluating", "eval_busy", "{:.0%}"),
    ("search wall: model only / both / eval only / neither", None, None),
    ("evaluation s per candidate (summed)", "eval_s_per_candidate", "{:.2f}"),
    ("best train score", "best_train_score", "{:.4f}"),
    ("train rollouts per Ray node", "rollouts_per_node", "list"),
]


def fmt(r: dict, key: str | None, spec: str | None) -> str:
    if key is None:
        return " / ".join(f"{r[k]:.0%}" for k in ("model_only", "both", "eval_only", "neither"))
    v = r.get(key)
    if v is None:
        return "n/a"
    return " + ".join(str(x) for x in v) if spec == "list" else (spec or "{}").format(v)


def ratio(a: dict, b: dict, key: str | None) -> str:
    if (
        key is None
        or not isinstance(a.get(key), (int, float))
        or not isinstance(b.get(key), (int, float))
        or not b[key]
    ):
        return ""
    if key in ("model_busy", "eval_busy", "best_train_score", "candidates", "model_requests"):
        return ""
    return f"x{a[key] / b[key]:.2f}"


def table(results: list[dict]) -> str:
    lines = []
    for r in results:
        r.setdefault("cpu_per_candidate", r["cpu_s"] / max(1, r["candidates"]))
    for lat in sorted({r["latency_s"] for r in results}):
        group = [r for r in results if r["latency_s"] == lat]
        names = [r["label"] for r in group]
        base = next((r for r in group if r["system"] == "openevolve"), None)
        lines.append(f"\n### model latency {lat:g} s\n")
        lines.append("| metric | " + " | ".join(names) + (" | rsi / OpenEvolve |" if base else " |"))
        lines.append("| --- |" + " --- |" * (len(group) + (1 if base else 0)))
        rsi = next((r for r in group if r["system"] == "rsi" and r["nodes"] == 1), None)
        for title, key, spec in ROWS:
            row = f"| {title} | " + " | ".join(fmt(r, key, spec) for r in group)
            if base:
                row += " | " + (ratio(rsi, base, key) if rsi else "")
            lines.append(row + " |")
        loads = "; ".join(
            f"{r['label']}: {' '.join(f'{x:.2f}' for x in r['load_before'])} -> "
            f"{' '.join(f'{x:.2f}' for x in r['load_after'])}"
            for r in group
        )
        lines.append(f"\nload averages (1/5/15 min) before -> after: {loads}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--latency", type=float, nargs="*", default=[0.5, 5.0], help="model latencies, seconds (none: --cluster only)"
    )
    ap.add_argument("--candidates", type=int, default=48, help="candidates per system (rsi max_steps)")
    ap.add_argument("--workers", type=int, default=4, help="proposals in flight")
    ap.add_argument("--screen-size", type=int, default=5, help="rsi screen subset (5: every train instance)")
    ap.add_argument("--systems", nargs="+", default=["rsi", "openevolve"], choices=["rsi", "openevolve"])
    ap.add_argument("--cluster", action="store_true", help="also rsi on a 3-node local Ray cluster")
    ap.add_argument("--cluster-latency", type=float, default=5.0)
    ap.add_argument("--cluster-cpus", type=int, default=1, help="CPUs each cluster node advertises")
    ap.add_argument("--timeout", type=float, default=1800, help="per run, seconds")
    ap.add_argument("--out", type=Path, default=None, help="default runs/peer-openevolve-<utc time>")
    ap.add_argument("--table", type=Path, default=None, help="only print the table of an earlier results.json")
    args = ap.parse_args(argv)
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    out = args.out or REPO / "runs" / f"peer-openevolve-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}"
    out.mkdir(parents=True, exist_ok=True)
    become_subreaper()
    print(f"output: {out}; cores: {os.cpu_count()}; load: {os.getloadavg()}; variants: {len(VARIANTS)}", flush=True)
    results = []
    for lat in args.latency:
        for system in args.systems:
            r = run_one(system, lat, args, out)
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "command"}), flush=True)
    if args.cluster:
        r = run_one("rsi", args.cluster_latency, args, out, cluster=True)
        results.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "command"}), flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    print("\ncommands:")
    for r in results:
        print(f"- {r['label']}: {r['command']}")


if __name__ == "__main__":
    main()
