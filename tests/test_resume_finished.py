"""``rsi resume`` on a run that has finished (its ``summary.json`` exists).

A finished run has nothing to resume, and that is not an error: the command prints one line
saying so, prints the stored summary as ``rsi run`` did at its end, and exits 0. Nothing runs:
no Ray, no rollout, no decision; every file of the run directory is left as it was.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from rsi.driver.runner import start_run
from rsi.records import RunRecords

REPO = Path(__file__).resolve().parents[1]


def files_of(run_dir: Path) -> dict[str, tuple[str, int]]:
    """Every file of a run directory -> (content digest, mtime in ns)."""
    return {str(p.relative_to(run_dir)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_resume_of_a_finished_run_says_so_exits_0_and_changes_nothing(tmp_path, ray_session):
    shutil.copytree(REPO / "targets" / "table_demo", tmp_path / "target")
    (tmp_path / "table.yaml").write_text(yaml.safe_dump({
        "splits": {"train": ["t1", "t2"], "dev": [], "test": ["x1"]},
        "scores": {"v0": {"t1": 0.5, "t2": 0.5, "x1": 0.5}, "v1": {"t1": 1.0, "t2": 0.5, "x1": 0.25}}}))
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(
        {"edits": [{"files": {"VERSION": "v1\n"}, "reply": "switch to v1"}], "ask_reply": "learned"}))
    cfg = {"name": "done", "seed": 3, "storage": str(tmp_path / "runs"),
           "target": {"path": "target", "kind": "program", "entry": "solve.py"},
           "benchmark": {"name": "table", "path": "table.yaml"},
           "algorithm": {"name": "darwinx", "worker": {"type": "scripted", "script": "script.yaml"},
                         "max_steps": 1, "merge_every": 0, "screen_size": 2}}
    (tmp_path / "darwinx.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    run_dir = tmp_path / "runs" / "done-1"
    summary = start_run(str(tmp_path / "darwinx.yaml"), (), str(run_dir)).execute()
    decisions = RunRecords.open(str(run_dir)).decisions()
    assert [d["kind"] for d in decisions] == ["seed", "screen", "confirm", "promote", "test"]
    before = files_of(run_dir)

    for _ in range(2):  # and a second time: still nothing to do
        done = subprocess.run([sys.executable, "-m", "rsi.driver.cli", "resume", str(run_dir)], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[:3] == [f"{run_dir} has finished; nothing to resume",
                             f"run directory: {summary['run_dir']}",
                             f"promoted snapshot: {summary['snapshot_id']}"], done.stdout
        assert "Ray" not in done.stdout + done.stderr, "no Ray was started"
        assert files_of(run_dir) == before, "no file of the run was written or touched"
    assert RunRecords.open(str(run_dir)).decisions() == decisions
