"""Resume after SIGKILL: a driver killed at any point and resumed decides exactly what an
uninterrupted run decides, and no stored rollout runs again.

Each ``rsi run`` / ``rsi resume`` is a real process with its own local Ray, started in its own
session; the kill takes the whole process group and every descendant (raylet, GCS, workers), as
a lost laptop or a killed job would. One run is killed three times at three different points and
resumed each time (a resumed run is itself killed and resumed), then compared with an
uninterrupted run of the same config and seed (a command of its own in the first test; in the
others, this process on the session's Ray).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from _cluster import REPO, cluster_env, comparable, decisions, kill_tree, rollout_keys, slow_table_scenario
from _procs import descendants, process
from _runs import run as uninterrupted  # in this process, on the session's Ray: where it runs changes no decision

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env():
    return cluster_env(secrets.token_hex(32))


# What Ray prints when a local raylet misses its fixed 30 s registration window, which can
# happen on a machine shared with other jobs. Nothing under test has started by then.
RAY_DID_NOT_START = "The current node timed out during startup"


class Driver:
    """One ``rsi`` command in its own session, launched again (twice at most) only when Ray
    itself failed to come up. A ``run`` that failed so has already made its run directory,
    which a second ``run`` would refuse: it is launched again as ``resume`` of that directory,
    which starts from the beginning since nothing was decided."""

    def __init__(self, env: dict, logs: Path, *args: str):
        self.env, self.logs, self.args, self.restarts = env, logs, args, 0
        self._launch()

    def _again(self) -> None:
        if self.args[0] == "run" and "--run-dir" in self.args:
            self.args = ("resume", self.args[self.args.index("--run-dir") + 1])
        self._launch()

    def _launch(self) -> None:
        self.log = self.logs / f"rsi-{self.args[0]}-{time.monotonic_ns()}.log"  # a file: a pipe could fill up
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "rsi.driver.cli", *self.args], cwd=REPO, env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def ended(self) -> str | None:
        """None while running (or relaunched); the output once it ended for good."""
        if self.proc.poll() is None:
            return None
        out = self.log.read_text(errors="replace")
        if RAY_DID_NOT_START in out and self.restarts < 2:
            self.restarts += 1
            self._again()
            return None
        return out

    def finish(self, timeout: float = 240) -> str:
        deadline = time.monotonic() + timeout
        while (out := self.ended()) is None:
            assert time.monotonic() < deadline, f"rsi {self.args[0]} did not finish in {timeout} s"
            time.sleep(0.1)
        assert self.proc.returncode == 0, out[-4000:]
        return out

    def kill_at(self, run_dir: Path, point, timeout: float = 240) -> list[dict]:
        """SIGKILL the driver, its local Ray and every process below it as soon as
        ``point(kinds)`` holds for the decisions on disk; returns those decisions."""
        deadline = time.monotonic() + timeout
        while not point(kinds := [d["kind"] for d in decisions(run_dir)]):
            out = self.ended()
            if out is not None:
                pytest.fail(f"the run ended before the kill point (decisions {kinds}):\n{out[-3000:]}")
            assert time.monotonic() < deadline, f"kill point never reached; decisions {kinds}"
            time.sleep(0.02)
        tree = descendants(self.proc.pid)
        kill_tree(self.proc, tree)
        give_up = time.monotonic() + 10  # SIGKILL is delivered asynchronously
        while (survivors := [p for p in tree if _alive(p)]) and time.monotonic() < give_up:
            time.sleep(0.05)
        assert not survivors, f"processes of the killed driver still run: {survivors}"
        return decisions(run_dir)


def _alive(pid: int) -> bool:
    p = process(pid)
    return p is not None and p.state not in ("Z", "X")


def test_killed_three_times_resumes_to_identical_decisions(tmp_path, env):
    config = slow_table_scenario(tmp_path, train=4, edits=("v2", "v1", "v3"))
    base_dir, run_dir = tmp_path / "runs" / "base", tmp_path / "runs" / "killed"
    out = Driver(env, tmp_path, "run", str(config), "--run-dir", str(base_dir)).finish()
    # Ray's own start-up notices (written by its core library straight to stderr) are kept in the
    # run directory; the console holds the run's own lines only.
    log = base_dir / "logs" / "ray-startup.log"
    said = log.read_text().splitlines() if log.exists() else []  # none where the IP lookup works
    assert not [line for line in said if line in out.splitlines()]
    assert not [line for line in out.splitlines() if "Token authentication" in line or "network_util" in line]
    expected = decisions(base_dir)
    kinds = [d["kind"] for d in expected]
    assert kinds == ["seed", "screen", "screen", "confirm", "screen", "confirm", "promote", "test"], kinds
    base_keys = rollout_keys(base_dir)

    points = [
        ("after the seed", lambda k: "seed" in k),
        ("after the first confirm", lambda k: "confirm" in k),
        ("after promotion, during the test measurement", lambda k: "promote" in k),
    ]
    driver = Driver(env, tmp_path, "run", str(config), "--run-dir", str(run_dir))
    stored_before = 0
    for i, (where, point) in enumerate(points):
        at_kill = driver.kill_at(run_dir, point)
        assert "test" not in [d["kind"] for d in at_kill], f"kill {where} came too late"
        assert not (run_dir / "summary.json").exists()
        keys = rollout_keys(run_dir)
        assert len(keys) == len(set(keys)), f"duplicate rollout rows before resume {i + 1}"
        assert len(keys) >= stored_before, "stored rollouts disappeared"
        stored_before = len(keys)
        driver = Driver(env, tmp_path, "resume", str(run_dir))
    out = driver.finish()
    assert "stored rollouts reusable" in out

    assert comparable(decisions(run_dir)) == comparable(expected)
    keys = rollout_keys(run_dir)
    dupes = [k for k, n in Counter(keys).items() if n > 1]
    assert not dupes, f"rollouts stored twice (re-executed after resume): {dupes[:3]}"
    assert sorted(keys) == sorted(base_keys), "every rollout of the uninterrupted run, exactly once"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rollouts"]["executed"] == len(keys) - stored_before, \
        "the last resume executed only what had not been stored"
    assert summary["snapshot_id"] == json.loads((base_dir / "summary.json").read_text())["snapshot_id"]


def meta_scenario(root: Path) -> Path:
    """meta-evolve on stage 0, sized so one round takes seconds (a kill lands inside a gate)."""
    import shutil

    import yaml

    shutil.copytree(REPO / "targets" / "meta_policy", root / "target")
    cfg = {"name": "meta-resume", "seed": 5, "storage": str(root / "runs"),
           "target": {"path": "target", "kind": "policy", "deterministic": True},
           "evaluator": {"batch_size": 25},
           "benchmark": {"name": "meta_landscape", "holdout": 120, "oracle": 120, "validation": 20, "budget": 60},
           "algorithm": {"name": "meta", "max_rounds": 4, "candidates_per_round": 3, "plot": False}}
    path = root / "meta.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _without_clock(records: list[dict]) -> list[dict]:
    """A round's reason ends with its wall time; everything else must match exactly."""
    import re

    return [{**d, "reason": re.sub(r"; [0-9.]+s$", "", d.get("reason") or "")} for d in comparable(records)]


def test_meta_evolve_killed_mid_gate_resumes_to_identical_rounds(tmp_path, env, ray_session):
    config = meta_scenario(tmp_path)
    base_dir, run_dir = tmp_path / "runs" / "base", tmp_path / "runs" / "killed"
    uninterrupted(config, base_dir)
    expected = decisions(base_dir)
    assert [d["round"] for d in expected if d["kind"] == "round"] == [1, 2, 3, 4]
    driver = Driver(env, tmp_path, "run", str(config), "--run-dir", str(run_dir))
    stored_before = 0
    for point in (lambda k: "seed" in k, lambda k: k.count("round") >= 2):
        at_kill = driver.kill_at(run_dir, point)
        assert "promote" not in [d["kind"] for d in at_kill], "the kill came after the outer loop ended"
        stored_before = len(rollout_keys(run_dir))
        driver = Driver(env, tmp_path, "resume", str(run_dir))
    driver.finish()

    assert _without_clock(decisions(run_dir)) == _without_clock(expected)
    keys = rollout_keys(run_dir)
    assert len(keys) == len(set(keys)), "an inner search stored twice: re-executed after resume"
    assert sorted(keys) == sorted(rollout_keys(base_dir))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rollouts"]["executed"] == len(keys) - stored_before
    report, base_report = (json.loads((d / "meta_report.json").read_text()) for d in (run_dir, base_dir))
    assert report["validation"] == base_report["validation"] and report["evolved"] == base_report["evolved"]


def problem_scenario(root: Path) -> Path:
    """A user's problem file, evolved by DarwinX with the offline mutator; each rollout sleeps a
    little so a kill lands mid-run."""
    import yaml

    (root / "seed").mkdir()
    (root / "problem.py").write_text(
        "def tasks(split):\n"
        "    n = {'train': 6, 'dev': 0, 'test': 2}[split]\n"
        "    return [{'id': f'{split}-{i}', 'x': i, 'private': {'y': 3 * i + 1}} for i in range(n)]\n"
        "def score(task, output):\n"
        "    err = abs(output.get('y', 0) - task['private']['y'])\n"
        "    return {'score': 1 / (1 + err), 'err': err}\n")
    (root / "seed" / "main.py").write_text(
        "import json, sys, time\n\n\n# rsi: evolve\ndef f(x):\n    return 1.0 * x + 0.0\n\n\n"
        "task = json.load(sys.stdin)\ntime.sleep(0.2)\nprint(json.dumps({'y': f(task['x'])}))\n")
    (root / "seed" / "components.yaml").write_text("- {name: program, glob: main.py}\n")
    cfg = {"name": "byop", "seed": 11, "storage": str(root / "runs"),
           "target": {"path": "seed", "entry": "main.py", "deterministic": True},
           "benchmark": {"problem": "problem.py"},
           "algorithm": {"name": "darwinx", "worker": {"type": "mutator", "max_ops": 2}, "max_steps": 6,
                         "screen_size": 3, "confirm_samples": 1, "regression_tolerance": 0.5,
                         "screen_regression_tolerance": 1.0, "merge_every": 0}}
    path = root / "byop.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_a_problem_run_killed_mid_run_resumes_to_identical_decisions(tmp_path, env, ray_session):
    config = problem_scenario(tmp_path)
    base_dir, run_dir = tmp_path / "runs" / "base", tmp_path / "runs" / "killed"
    uninterrupted(config, base_dir)
    expected = decisions(base_dir)
    driver = Driver(env, tmp_path, "run", str(config), "--run-dir", str(run_dir))
    driver.kill_at(run_dir, lambda k: k.count("screen") >= 2)
    stored_before = len(rollout_keys(run_dir))
    out = Driver(env, tmp_path, "resume", str(run_dir)).finish()
    assert "stored rollouts reusable" in out
    assert comparable(decisions(run_dir)) == comparable(expected)
    keys = rollout_keys(run_dir)
    assert len(keys) == len(set(keys)) and sorted(keys) == sorted(rollout_keys(base_dir))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rollouts"]["executed"] == len(keys) - stored_before
    assert summary["metrics"] == json.loads((base_dir / "summary.json").read_text())["metrics"]
