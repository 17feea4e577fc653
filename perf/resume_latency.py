"""Study: how long a run is stalled when its driver is SIGKILLed and resumed at once.

A DarwinX run on the table benchmark (scripted worker, rollouts that sleep a little so the run
is mid-step when killed) is started with its own local Ray, SIGKILLed with all its processes
(driver, raylet, GCS, Ray worker processes) right after its first confirm decision, and ``rsi resume`` is
started immediately. Measured from the SIGKILL: until the resumed driver reports it has its
state back (Ray up, state and stored rollouts loaded), and until it stores its first new
measurement. For scale, a cold ``rsi run`` of the same config, from its launch until it stores
its first measurement: most of either is starting Python and Ray, which a resume pays again.

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/resume_latency.py --rounds 3'
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def scenario(root: Path, sleep_s: float) -> Path:
    shutil.copytree(REPO / "targets" / "table_demo", root / "target")
    solve = root / "target" / "solve.py"
    solve.write_text(
        solve.read_text().replace(
            "    sys.stdin.read()", f"    __import__('time').sleep({sleep_s})\n    sys.stdin.read()"
        )
    )
    train = [f"t{i}" for i in range(4)]
    levels = {"v0": 0.5, "v1": 0.75, "v2": 0.0, "v3": 1.0}
    (root / "table.yaml").write_text(
        yaml.safe_dump(
            {
                "splits": {"train": train, "test": ["x0"]},
                "scores": {v: {t: s for t in train + ["x0"]} for v, s in levels.items()},
            }
        )
    )
    (root / "script.yaml").write_text(
        yaml.safe_dump(
            {"edits": [{"files": {"VERSION": f"{v}\n"}, "reply": v} for v in ("v2", "v1", "v3")], "ask_reply": "noted"}
        )
    )
    cfg = {
        "name": "resume",
        "seed": 3,
        "storage": str(root / "runs"),
        "target": {"path": "target", "kind": "program", "entry": "solve.py"},
        "benchmark": {"name": "table", "path": "table.yaml"},
        "algorithm": {
            "name": "darwinx",
            "worker": {"type": "scripted", "script": "script.yaml"},
            "screen_size": 2,
            "screen_samples": 1,
            "confirm_samples": 2,
            "max_steps": 3,
            "merge_every": 0,
        },
    }
    path = root / "darwinx.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


# What Ray prints when a local raylet misses its fixed 30 s registration window (a machine
# shared with other jobs); such a round measures the machine, not resume, and is run again.
RAY_DID_NOT_START = "The current node timed out during startup"


class RayDidNotStart(RuntimeError):
    pass


class Driver:
    """An ``rsi`` process in its own session; records when each stdout line arrived."""

    def __init__(self, env: dict, *args: str):
        self.command = args[0]
        self.lines: list[tuple[float, str]] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rsi.driver.cli", *args],
            cwd=REPO,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None  # opened with stdout=PIPE
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line))

    def line_time(self, needle: str) -> float | None:
        return next((t for t, line in list(self.lines) if needle in line), None)

    def kill(self) -> None:
        """SIGKILL the session and everything below it (Ray moves its worker processes to their own groups)."""
        pids = _descendants(self.proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def wait_for(cond, driver: Driver, timeout: float = 300, poll: float = 0.01) -> float:
    deadline = time.monotonic() + timeout
    while not cond():
        if driver.proc.poll() is not None or time.monotonic() > deadline:
            out = "".join(line for _, line in driver.lines)[-4000:]
            driver.kill()
            if RAY_DID_NOT_START in out:
                raise RayDidNotStart(out)
            raise RuntimeError(f"{driver.command} stopped before the mark (exit {driver.proc.returncode}):\n{out}")
        time.sleep(poll)
    return time.monotonic()


def kinds(run_dir: Path) -> list[str]:
    path = run_dir / "decisions.jsonl"
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line)["kind"])
        except json.JSONDecodeError:
            break
    return out


def parquet_files(run_dir: Path) -> set[str]:
    return {p.name for p in (run_dir / "rollouts").glob("*.parquet")} if (run_dir / "rollouts").exists() else set()


def one_round(config: Path, root: Path, env: dict, r: int) -> dict:
    run_dir = root / "runs" / f"round{r}"
    t_launch = time.monotonic()
    run = Driver(env, "run", str(config), "--run-dir", str(run_dir))
    t_cold_first = wait_for(lambda: parquet_files(run_dir), run)
    wait_for(lambda: "confirm" in kinds(run_dir), run)
    run.kill()
    t_kill = time.monotonic()
    stored = parquet_files(run_dir)
    resume = Driver(env, "resume", str(run_dir))
    t_resumed_first = wait_for(lambda: parquet_files(run_dir) - stored, resume)
    wait_for(lambda: resume.line_time("resume: continuing") is not None, resume)
    t_resumed_ready = resume.line_time("resume: continuing")
    assert t_resumed_ready is not None  # wait_for returned only once the line was there
    resume.kill()
    return {
        "resume_ready": t_resumed_ready - t_kill,
        "resume_first": t_resumed_first - t_kill,
        "cold_first": t_cold_first - t_launch,
        "stored_at_kill": len(stored),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sleep", type=float, default=0.1, help="seconds each rollout sleeps")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rsi-perf-resume-"))
    # A token made for these runs: nothing is read from or written to ~/.ray.
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    load0 = os.getloadavg()[0]
    try:
        config = scenario(root, args.sleep)
        rounds: list[dict] = []
        discarded = 0
        while len(rounds) < args.rounds:
            try:
                rounds.append(one_round(config, root, env, len(rounds) + discarded))
            except RayDidNotStart:
                discarded += 1
                if discarded > 2 * args.rounds:
                    raise
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    ratio = statistics.median(r["resume_first"] / r["cold_first"] for r in rounds)
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load0:.1f} before / {os.getloadavg()[0]:.1f} after; "
        f"{args.rounds} rounds (+{discarded} discarded: Ray did not start), rollouts sleep {args.sleep}s"
    )
    print()
    print("| mark | seconds (median) |")
    print("| --- | --- |")
    print(
        f"| SIGKILL -> resumed driver has its state back (Ray up, state and stored rollouts loaded) | "
        f"{med['resume_ready']:.2f} |"
    )
    print(f"| SIGKILL -> first new measurement stored by the resumed driver | {med['resume_first']:.2f} |")
    print(f"| cold `rsi run`: launch -> first measurement stored | {med['cold_first']:.2f} |")
    print(f"| ratio: resumed progress / cold first progress (median of per-round ratios) | x{ratio:.2f} |")
    print()
    print("per round (s):", json.dumps([{k: round(v, 2) for k, v in r.items()} for r in rounds]))


if __name__ == "__main__":
    main()
