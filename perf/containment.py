"""What the rollout jail costs, measured side by side in one run.

1. Per rollout: the same trivial program (JSON in, JSON out) and the same numpy-importing one,
   run (a) as a bare subprocess, (b) through the ``process`` backend (the sandbox before the
   jail: rlimits, its own uid, a scrubbed environment), (c) in the bubblewrap jail and, where a
   Docker engine answers, (d) in the docker jail (a container per rollout).
   Target: the bubblewrap jail adds at most 20 ms per rollout over (b).
2. Bin packing on Weibull 5k (5 instances of 5,000 items): the one-shot skeleton as it ran before
   the jail (the whole instance on stdin, ``process`` backend) against the online lockstep harness
   in the jail (one item revealed per decision). Target: within 3x; the cost per item is printed.

Rounds interleave the variants so a busy machine slows all of them alike; the table reports the
median over rounds. Run: ``python perf/containment.py [--rounds N]`` (``DOCKER_HOST`` names the
engine for the docker rows; without one they are left out).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.binpack import BinPack, BinPackParams  # noqa: E402
from benchmarks.binpack.instances import load_test_set  # noqa: E402
from benchmarks.binpack.lockstep import PackingDialogue  # noqa: E402
from rsi.errors import ConfigError  # noqa: E402
from rsi.sandbox import Limits, check_backend, run_program  # noqa: E402

TRIVIAL = "import json, sys\njson.load(sys.stdin)\nprint('{}')\n"
NUMPY = (
    "import json, sys\nimport numpy as np\njson.load(sys.stdin)\nprint(json.dumps({'s': int(np.arange(10).sum())}))\n"
)

# The skeleton as it ran before the jail: the whole instance on stdin, one answer on stdout.
ONE_SHOT_SKELETON = """
import contextlib, importlib.util, json, os, sys
from pathlib import Path
sys.dont_write_bytecode = True
spec = importlib.util.spec_from_file_location("_online", Path(__file__).resolve().parent / "online.py")
online = importlib.util.module_from_spec(spec)
spec.loader.exec_module(online)
task = json.load(sys.stdin)
sys.path[0] = os.getcwd()
with contextlib.redirect_stdout(sys.stderr):
    from heuristic import priority
    assignment = online.pack(task["items"], task["capacity"], priority)
sys.stdout.write(json.dumps({"assignment": assignment.tolist()}) + "\\n")
"""


def checkout(body: str, name: str = "main.py") -> Path:
    d = Path(tempfile.mkdtemp(prefix="rsi-perf-"))
    (d / name).write_text(body)
    return d


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def docker_answers() -> bool:
    try:
        check_backend("docker")
        return True
    except ConfigError as exc:
        print(f"docker rows left out: {exc}")
        return False


def per_rollout(rounds: int, docker: bool) -> list[tuple[str, dict[str, float]]]:
    rows = []
    for label, body in (("trivial program", TRIVIAL), ("numpy import", NUMPY)):
        work = checkout(body)
        argv = [sys.executable, "main.py"]

        def bare():
            subprocess.run(argv, cwd=work, input=b"{}", capture_output=True, check=True)

        def boxed(backend):
            out = run_program(argv, work, {}, Limits(backend=backend))
            assert out.status == "ok", out.reason

        times: dict[str, list[float]] = {"bare": [], "process": [], "bwrap": [], "docker": []}
        for _ in range(rounds):
            times["bare"].append(timed(bare))
            for backend in ("process", "bwrap", "docker") if docker else ("process", "bwrap"):
                times[backend].append(timed(lambda: boxed(backend)))
        rows.append((label, {k: statistics.median(v) * 1000 for k, v in times.items() if v}))
        shutil.rmtree(work, ignore_errors=True)
    return rows


def binpack(rounds: int, instances: int, docker: bool) -> tuple[float, dict[str, float], int]:
    bench = BinPack(BinPackParams(name="binpack"))
    tasks = load_test_set("Weibull 5k")[:instances]
    heuristic = (REPO / "targets" / "binpack_bestfit" / "heuristic.py").read_text()
    old = checkout(ONE_SHOT_SKELETON, "skeleton.py")
    shutil.copy(REPO / "benchmarks" / "binpack" / "online.py", old / "online.py")
    work = checkout(heuristic, "heuristic.py")
    old_t: list[float] = []
    new_t: dict[str, list[float]] = {"bwrap": [], "docker": []}
    for _ in range(rounds):
        for task in tasks:

            def one_shot():
                out = run_program(
                    [sys.executable, str(old / "skeleton.py")],
                    work,
                    task.input,
                    Limits(backend="process", timeout_s=300),
                )
                assert out.status == "ok", out.reason

            def lockstep(backend):
                out = run_program(
                    [sys.executable, str(bench.harness.resolve())],
                    work,
                    None,
                    Limits(backend=backend, timeout_s=300),
                    harness=bench.harness_mounts(),
                    dialogue=PackingDialogue(task.input["items"], task.input["capacity"]),
                )
                assert out.status == "ok", out.reason + out.stderr_tail

            old_t.append(timed(one_shot))
            for backend in ("bwrap", "docker") if docker else ("bwrap",):
                new_t[backend].append(timed(lambda: lockstep(backend)))
    items = len(tasks[0].input["items"])
    return statistics.median(old_t), {k: statistics.median(v) for k, v in new_t.items() if v}, items


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--instances", type=int, default=5)
    args = ap.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"root={os.geteuid() == 0}, load {os.getloadavg()[0]:.2f}"
    )
    docker = docker_answers()
    print(
        "\n| rollout | bare subprocess ms | process backend ms | bwrap jail ms | jail - process ms | jail / process |"
        + (" docker jail ms | docker - process ms |" if docker else "")
    )
    print("| --- | --- | --- | --- | --- | --- |" + (" --- | --- |" if docker else ""))
    for label, ms in per_rollout(args.rounds, docker):
        proc, jail = ms["process"], ms["bwrap"]
        extra = f" {ms['docker']:.1f} | {ms['docker'] - proc:+.1f} |" if docker else ""
        print(
            f"| {label} | {ms['bare']:.1f} | {proc:.1f} | {jail:.1f} | {jail - proc:+.1f} | x{jail / proc:.2f} |{extra}"
        )
    old, new, items = binpack(max(1, args.rounds // 5), args.instances, docker)
    print("\n| Weibull 5k instance | seconds | per item µs | / one-shot |")
    print("| --- | --- | --- | --- |")
    print(f"| one-shot skeleton, process backend (before) | {old:.3f} | {old / items * 1e6:.1f} | x1.00 |")
    for backend, t in new.items():
        print(f"| online lockstep, {backend} jail (now) | {t:.3f} | {t / items * 1e6:.1f} | x{t / old:.2f} |")
    print(f"\nload after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
