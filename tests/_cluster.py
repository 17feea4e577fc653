"""A real multi-node Ray cluster on one machine, for cluster and fault-tolerance tests.

Every node is its own ``ray start --block`` process in its own session (process group), so a
test can SIGKILL one node the way a lost machine dies, and teardown stops exactly the nodes it
started (``ray stop`` would kill every Ray process on the machine, other people's included).
Token authentication is on for every node and client, with a token made for this cluster and
passed by environment, so nothing is read from or written to ``~/.ray``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_env(token: str) -> dict[str, str]:
    """What every node and client of the test cluster runs with."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env.update({
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",  # entrypoints' `python` is this venv's
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_USAGE_STATS_ENABLED": "0",
        # A killed node is noticed in about a second instead of the default ~30 s.
        "RAY_health_check_period_ms": "500",
        "RAY_health_check_timeout_ms": "500",
        "RAY_health_check_failure_threshold": "3",
    })
    return env


@dataclass
class Node:
    name: str
    proc: subprocess.Popen
    resources: dict = field(default_factory=dict)
    node_id: str | None = None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


def descendants(pid: int) -> list[int]:
    """All processes below ``pid`` (Ray may move workers to their own process groups)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kill_tree(proc: subprocess.Popen, known: Iterable[int] = ()) -> None:
    """SIGKILL a process started with ``start_new_session=True``, its group and every
    descendant (plus ``known`` pids found earlier), then reap it."""
    pids = set(descendants(proc.pid)) | set(known)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


class LocalCluster:
    """Head (job server on) plus worker nodes on free loopback ports."""

    def __init__(self, head_cpus: int = 0):
        # Short: Ray's Unix socket paths must fit in 107 bytes.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="rsi-ray-", dir="/tmp"))
        self.token = secrets.token_hex(32)
        self.env = cluster_env(self.token)
        self.port = free_port()
        self.dashboard_port = free_port()
        self.gcs_address = f"127.0.0.1:{self.port}"
        self.dashboard_url = f"http://127.0.0.1:{self.dashboard_port}"
        self.nodes: list[Node] = []
        self.head = self._start("head", head_cpus, {}, head=True)

    def _start(self, name: str, num_cpus: int, resources: dict, head: bool = False) -> Node:
        return self._start_all([(name, num_cpus, resources)], head=head)[0]

    def _start_all(self, specs: list[tuple[str, int, dict]], head: bool = False, tries: int = 3) -> list[Node]:
        """Start nodes together and wait until each has registered. Ray gives a starting raylet
        a fixed 30 s to register, which concurrent starts on a loaded 2-core machine can miss;
        a node that missed it is started again, alone."""
        spawned = [self._spawn(name, cpus, res, head) for name, cpus, res in specs]
        started = []
        for node, spec in zip(spawned, specs):
            if self._registered(node):
                self.nodes.append(node)
                started.append(node)
                continue
            kill_tree(node.proc)
            if tries <= 1:
                raise RuntimeError(f"ray start {node.name} failed:\n{self.log(node)[-3000:]}")
            started += self._start_all([spec], head, tries - 1)
        return started

    def _registered(self, node: Node, timeout: float = 90) -> bool:
        deadline = time.monotonic() + timeout
        while node.alive and "Ray runtime started" not in self.log(node) and time.monotonic() < deadline:
            time.sleep(0.2)
        return node.alive and "Ray runtime started" in self.log(node)

    def _spawn(self, name: str, num_cpus: int, resources: dict, head: bool) -> Node:
        args = [str(BIN / "ray"), "start", "--block", "--disable-usage-stats",
                "--node-ip-address=127.0.0.1", f"--num-cpus={num_cpus}",
                f"--object-store-memory={100 * 1024 * 1024}",
                f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
                f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
                f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
                # A marker resource per node names it in ``ray.nodes()``.
                f"--resources={json.dumps({**resources, f'node_{name}': 1})}"]
        if head:
            args += ["--head", f"--port={self.port}", f"--temp-dir={self.temp_dir}",
                     "--include-dashboard=true", "--dashboard-host=127.0.0.1",
                     f"--dashboard-port={self.dashboard_port}", f"--ray-client-server-port={free_port()}"]
        else:
            args.append(f"--address={self.gcs_address}")
        with open(self.temp_dir / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return Node(name, proc, resources)

    def add_nodes(self, *specs: tuple[str, int, dict]) -> list[Node]:
        """Worker nodes started together: ``("a", 1, {"pool_a": 2}), ...``."""
        return self._start_all(list(specs))

    def log(self, node: Node) -> str:
        return (self.temp_dir / f"{node.name}.log").read_text(errors="replace")

    def python(self, code: str, timeout: float = 120) -> str:
        """Run ``code`` as a separate Ray client of this cluster (the pytest process may hold
        its own local Ray); returns stdout."""
        out = subprocess.run([sys.executable, "-c", code], env={**self.env, "RAY_ADDRESS": self.gcs_address},
                             capture_output=True, text=True, timeout=timeout, cwd=REPO)
        if out.returncode != 0:
            raise RuntimeError(f"cluster client failed:\n{out.stdout}\n{out.stderr[-4000:]}")
        return out.stdout

    def wait_ready(self, timeout: float = 240) -> None:
        """Block until every live node has joined and the job server answers; record node ids.
        Generous: on a machine shared with other jobs, a raylet can take a minute to register."""
        want = {f"node_{n.name}" for n in self.nodes if n.alive}
        code = (
            "import json, sys, time, ray\n"
            "ray.init(address='auto', log_to_driver=False, configure_logging=False)\n"
            f"want, deadline = {sorted(want)!r}, time.time() + 60\n"
            "while True:\n"
            "    ids = {k: n['NodeID'] for n in ray.nodes() if n['Alive'] for k in n['Resources'] if k.startswith('node_')}\n"
            "    if set(want) <= set(ids) or time.time() > deadline: break\n"
            "    time.sleep(0.25)\n"
            "print(json.dumps(ids))\n"
        )
        deadline = time.monotonic() + timeout
        while True:
            dead = [n.name for n in self.nodes if f"node_{n.name}" in want and not n.alive]
            if dead:
                raise RuntimeError(f"ray start failed for {dead}:\n" + "\n".join(self.log(n)[-3000:] for n in self.nodes))
            try:
                ids = json.loads(self.python(code, timeout=90).strip().splitlines()[-1])
                if want <= set(ids):
                    break
                problem = f"nodes {sorted(want - set(ids))} have not joined"
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                problem = str(exc)[-3000:]
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster not ready after {timeout:.0f} s: {problem}")
            time.sleep(1)
        for n in self.nodes:
            n.node_id = ids.get(f"node_{n.name}", n.node_id)
        self._wait_job_server(deadline)

    def _wait_job_server(self, deadline: float) -> None:
        import urllib.request

        while True:
            try:
                req = urllib.request.Request(f"{self.dashboard_url}/api/version",
                                             headers={"Authorization": f"Bearer {self.token}"})
                with urllib.request.urlopen(req, timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.5)

    def kill(self, node: Node) -> None:
        kill_tree(node.proc)

    def shutdown(self) -> None:
        """Workers first, head last; whatever a node leaves behind is killed by pid."""
        for node in reversed(self.nodes):
            pids = descendants(node.proc.pid)
            if node.alive:
                node.proc.send_signal(signal.SIGTERM)
                try:
                    node.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    pass
            kill_tree(node.proc, pids)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


# ---- a search whose every outcome is known, slow enough to be interrupted -------------------
def slow_table_scenario(root: Path, train: int = 6, test: int = 2, edits: tuple[str, ...] = ("v2", "v1"),
                        sleep_s: float = 0.2, **algorithm) -> Path:
    """DarwinX on the table benchmark with the scripted worker, in ``root``; each rollout sleeps
    ``sleep_s`` so a kill lands inside an evaluation. ``v1`` beats ``v0`` everywhere, ``v2``
    loses everywhere, ``v3`` beats ``v1``. Returns the config's path."""
    import yaml

    shutil.copytree(REPO / "targets" / "table_demo", root / "target")
    solve = root / "target" / "solve.py"
    solve.write_text(solve.read_text().replace("    sys.stdin.read()", f"    __import__('time').sleep({sleep_s})\n"
                                                                       "    sys.stdin.read()"))
    train_ids = [f"t{i}" for i in range(train)]
    test_ids = [f"x{i}" for i in range(test)]
    level = {"v0": 0.5, "v1": 0.75, "v2": 0.0, "v3": 1.0}
    table = {"splits": {"train": train_ids, "dev": [], "test": test_ids},
             "scores": {v: {t: s for t in train_ids + test_ids} for v, s in level.items()}}
    (root / "table.yaml").write_text(yaml.safe_dump(table))
    script = {"edits": [{"files": {"VERSION": f"{v}\n"}, "reply": f"switch to {v}"} for v in edits],
              "ask_reply": "noted"}
    (root / "script.yaml").write_text(yaml.safe_dump(script))
    params = {"screen_size": max(1, train // 2), "screen_samples": 1, "confirm_samples": 2,
              "max_steps": len(edits), "merge_every": 0, **algorithm}
    cfg = {"name": "slow", "seed": 11, "storage": str(root / "runs"),
           "target": {"path": "target", "kind": "program", "entry": "solve.py"},
           "benchmark": {"name": "table", "path": "table.yaml"},
           "algorithm": {"name": "darwinx", "worker": {"type": "scripted", "script": "script.yaml"}, **params}}
    path = root / "darwinx.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def decisions(run_dir: Path) -> list[dict]:
    path = run_dir / "decisions.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return out


def comparable(records: list[dict]) -> list[dict]:
    """Decisions without what differs between two correct runs: where traces were filed
    (file names carry a clock) and wall-clock figures."""
    def strip(node):
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in ("trace_refs", "elapsed_s", "duration_s")}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(records)


def rollout_keys(run_dir: Path) -> list[tuple]:
    """One key per stored rollout row: (snapshot_id, split, task_id, trial, sample_seed)."""
    import pyarrow.parquet as pq

    files = sorted((run_dir / "rollouts").glob("*.parquet"))
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    return [(r["snapshot_id"], r["split"], r["task_id"], r["trial"], r["sample_seed"]) for r in rows]
