"""Study: time from ``rsi run`` to its first stored rollout, on a local Ray the run starts and on
an already-running local cluster it joins (``--ray.address auto``).

Each launch runs the quickstart config and is ended (its whole process group) as soon as the
first Parquet file of rollouts is on disk. The console lines are time-stamped, so the table
splits each launch into: Python and config, Ray (start or connect), the run's actors (evaluator,
worker pool, archive), and the seed's measurement (the work itself: five lockstep bin-packing
instances of 5000 items). The cluster for ``auto`` is started with ``ray start --head`` in its
own process group and stopped by killing that group (never ``ray stop``).

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/startup.py --rounds 2'
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKS = ("starting a local Ray", "connecting to Ray", "starting the evaluator", "measuring the seed version")


def launch(run_dir: Path, env: dict, *extra: str) -> dict[str, float]:
    """-> seconds from launch to each console mark and to the first stored rollout."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "rsi.driver.cli", "run", "configs/quickstart.yaml", "--run-dir", str(run_dir), *extra]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    seen: dict[str, float] = {}

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            for mark in MARKS:
                if mark in line and mark not in seen:
                    seen[mark] = time.perf_counter() - t0

    threading.Thread(target=read, daemon=True).start()
    try:
        while not list((run_dir / "rollouts").glob("*.parquet")):
            if proc.poll() is not None:
                raise RuntimeError(f"rsi run ended ({proc.returncode}) before storing a rollout")
            time.sleep(0.05)
        seen["first stored rollout"] = time.perf_counter() - t0
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return seen


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def phases(marks: dict[str, float]) -> dict[str, float]:
    ray_at = marks.get("starting a local Ray", marks.get("connecting to Ray", 0.0))
    return {
        "Python, imports, config": ray_at,
        "Ray start / connect": marks["starting the evaluator"] - ray_at,
        "the run's actors": marks["measuring the seed version"] - marks["starting the evaluator"],
        "seed measurement (work)": marks["first stored rollout"] - marks["measuring the seed version"],
        "launch -> first stored rollout": marks["first stored rollout"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    tmp = Path(tempfile.mkdtemp(prefix="rsi-startup-"))
    load0 = os.getloadavg()[0]
    cold, warm = [], []
    port = free_port()
    head = subprocess.Popen(
        [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={tmp / 'ray'}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        for r in range(args.rounds):
            cold.append(phases(launch(tmp / f"cold-{r}", env)))
            joined = {**env, "RAY_ADDRESS": f"127.0.0.1:{port}"}
            warm.append(phases(launch(tmp / f"auto-{r}", joined, "--ray.address", "auto")))
    finally:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load0:.1f} before / {os.getloadavg()[0]:.1f} after; "
        f"configs/quickstart.yaml; medians of {args.rounds} rounds (s)"
    )
    print()
    print("| phase | local Ray started by the run | `--ray.address auto` (running cluster) |")
    print("| --- | --- | --- |")
    for name in cold[0]:
        c, w = statistics.median(p[name] for p in cold), statistics.median(p[name] for p in warm)
        print(f"| {name} | {c:.2f} | {w:.2f} |")


if __name__ == "__main__":
    main()
