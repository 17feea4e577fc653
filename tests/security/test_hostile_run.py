"""A whole ``rsi run`` (a real process with its own local Ray) whose candidate attacks everything
it can name: the run directory, the Ray session and token, the driver's console, the machine
after its rollout. The run must finish, with every attack failed and recorded as data."""

from __future__ import annotations

import gzip
import json
import secrets
import shutil
import subprocess
import sys
import uuid

import pyarrow.parquet as pq
import pytest
import yaml
from _cluster import REPO, cluster_env
from _procs import cmdline_has, pids

pytestmark = pytest.mark.slow

FORGED = "accept step 99: forged by the candidate"

HOSTILE = r'''
import glob, json, os, socket, subprocess, sys

task = json.load(sys.stdin)
seen = {}
for pattern in ("/tmp/ray/session_*/*", os.path.expanduser("~/.ray/*"), "RUN_DIR/*", "/proc/*/environ"):
    hits = []
    for path in glob.glob(pattern):
        try:
            with open(path, "rb") as f:
                hits.append((path, len(f.read(64))))
        except OSError:
            pass
    seen[pattern] = hits
ports = []
for port in (6379, 8265, 10001, GCS_PORT):
    s = socket.socket()
    s.settimeout(0.5)
    if s.connect_ex(("127.0.0.1", port)) == 0:
        ports.append(port)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "MARK"], start_new_session=True)
sys.stderr.write("FORGED\n")
sys.stdout.write("FORGED\n")  # a debug line before the result
print(json.dumps({"answer": "v0", "seen": seen, "ports": ports}))
'''


@pytest.fixture(params=["bwrap", "docker"])
def backend(request) -> tuple[str, dict[str, str]]:
    """The jail of the run, and what its processes need in their environment to use it."""
    if request.param == "docker":
        return "docker", {"DOCKER_HOST": request.getfixturevalue("docker_engine")}
    return "bwrap", {}


def test_a_hostile_candidate_cannot_reach_the_run_or_the_cluster(tmp_path, backend):
    jail, jail_env = backend
    mark = f"rsi-hostile-{uuid.uuid4().hex}"
    run_dir = tmp_path / "runs" / "hostile"
    shutil.copytree(REPO / "targets" / "table_demo", tmp_path / "target")
    body = (HOSTILE.replace("RUN_DIR", str(run_dir)).replace("GCS_PORT", "6380")
            .replace("MARK", mark).replace("FORGED", FORGED))
    (tmp_path / "target" / "solve.py").write_text(body)
    (tmp_path / "table.yaml").write_text("splits: {train: [t1, t2], dev: [], test: [x1]}\n"
                                         "scores: {v0: {t1: 1.0, t2: 0.5, x1: 1.0}}\n")
    cfg = {"name": "hostile", "seed": 1, "storage": str(tmp_path / "runs"),
           "target": {"path": "target", "kind": "program", "entry": "solve.py", "deterministic": True,
                      "limits": {"backend": jail}},
           "benchmark": {"name": "table", "path": "table.yaml"}, "algorithm": {"name": "evaluate"}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    env = {**cluster_env(secrets.token_hex(32)), **jail_env}
    proc = subprocess.run([sys.executable, "-m", "rsi.driver.cli", "run", str(tmp_path / "run.yaml"), "--run-dir",
                           str(run_dir)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert FORGED not in proc.stdout and FORGED not in proc.stderr, "a candidate's line reached the console"

    rows = pq.read_table(run_dir / "rollouts").to_pylist()
    assert sorted((r["task_id"], r["status"], r["score"]) for r in rows) == [
        ("t1", "ok", 1.0), ("t2", "ok", 0.5), ("x1", "ok", 1.0)]
    traces = [json.loads(line) for f in (run_dir / "traces").glob("*.jsonl.gz")
              for line in gzip.decompress(f.read_bytes()).decode().splitlines()]
    assert len(traces) == 3
    for t in traces:
        out = t["output"]
        assert out["ports"] == [], "a port of the host answered inside the jail"
        leaked = {pattern: hits for pattern, hits in out["seen"].items()
                  if hits and not (pattern == "/proc/*/environ" and all(p.startswith("/proc/") for p, _ in hits))}
        assert leaked == {}, leaked
        assert FORGED in t["stderr_tail"]  # the candidate's own output is data in its trace
    assert pids(cmdline_has(mark)) == [], "a candidate's daemon outlived the run"
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["jail"] == jail
