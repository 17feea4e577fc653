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
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from _procs import cmdline, descendants

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


# ---- an autoscaling cluster on one machine ---------------------------------------------------
FAKE_MULTINODE = REPO / "cluster" / "fake_multinode.yaml"


class FakeAutoscalingCluster(LocalCluster):
    """A head (0 CPUs, job server on) whose autoscaler runs Ray's fake multi-node provider with
    ``cluster/fake_multinode.yaml``: pending rollouts make it start worker nodes (real raylets on
    this machine, node ids ``fff…00001``, ``fff…00002``, …) and it removes idle ones. The head is
    started the way ``ray.cluster_utils.AutoscalingCluster`` starts one (``RAY_FAKE_CLUSTER=1``,
    ``--autoscaling-config``) but without its ``ray stop --force``. The autoscaler starts worker
    nodes as its own descendants, in the head's process group: ``shutdown`` stops them with the
    head, and ``kill_worker`` SIGKILLs one node's processes the way a lost machine dies.
    ``overrides`` replace top-level keys of the YAML (``idle_timeout_minutes``, ``max_workers``);
    ``worker`` updates its ``cpu`` node type (``{"max_workers": 2}``)."""

    def __init__(self, worker: dict | None = None, **overrides):
        import yaml

        config = yaml.safe_load(FAKE_MULTINODE.read_text())
        config.update(overrides)
        config["available_node_types"]["cpu"].update(worker or {})
        self.autoscaling = config
        super().__init__(head_cpus=0)

    @property
    def idle_timeout_s(self) -> float:
        return 60.0 * self.autoscaling["idle_timeout_minutes"]

    def _spawn(self, name: str, num_cpus: int, resources: dict, head: bool) -> Node:
        if not head:
            return super()._spawn(name, num_cpus, resources, head)
        import yaml

        self.autoscaling["provider"]["gcs_address"] = self.gcs_address
        config = self.temp_dir / "autoscaling.yaml"
        config.write_text(yaml.safe_dump(self.autoscaling, sort_keys=False))
        args = [str(BIN / "ray"), "start", "--block", "--head", "--disable-usage-stats",
                "--node-ip-address=127.0.0.1", f"--num-cpus={num_cpus}", f"--autoscaling-config={config}",
                f"--object-store-memory={100 * 1024 * 1024}", f"--port={self.port}", f"--temp-dir={self.temp_dir}",
                "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard_port}",
                f"--ray-client-server-port={free_port()}", f"--node-manager-port={free_port()}",
                f"--object-manager-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
                f"--dashboard-agent-grpc-port={free_port()}", f"--metrics-export-port={free_port()}",
                f"--runtime-env-agent-port={free_port()}",
                f"--resources={json.dumps({**resources, f'node_{name}': 1})}"]
        # The autoscaler (and through it every worker node) inherits this environment: the
        # cluster's token and health-check settings, and the fake provider's switch.
        env = {**self.env, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"}
        with open(self.temp_dir / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return Node(name, proc, resources)

    def workers(self) -> dict[str, float]:
        """Alive worker nodes now: ``{node_id: CPUs}`` (one Ray client call)."""
        code = ("import json, ray\nray.init(address='auto', log_to_driver=False, configure_logging=False)\n"
                "print(json.dumps({n['NodeID']: n['Resources'].get('CPU', 0) for n in ray.nodes()\n"
                "                  if n['Alive'] and 'node_head' not in n['Resources']}))\n")
        return json.loads(self.python(code).strip().splitlines()[-1])

    def watch(self, interval: float = 0.5) -> NodeWatch:
        return NodeWatch(self, interval)

    def _raylets(self) -> dict[str, int]:
        """``{node_id: pid}`` of every worker node's raylet process alive now."""
        out = {}
        for pid in descendants(self.head.proc.pid):
            argv = cmdline(pid).split()
            if argv and argv[0].endswith("/raylet") and "--head" not in argv:
                ids = [a.split("=", 1)[1] for a in argv if a.startswith("--node_id=")]
                if ids:
                    out[ids[0]] = pid
        return out

    def busy_workers(self, marker: str) -> list[str]:
        """Worker nodes on which a process whose command line contains ``marker`` runs now."""
        return [nid for nid, pid in self._raylets().items() if any(marker in cmdline(p) for p in descendants(pid))]

    def kill_worker(self, node_id: str) -> list[int]:
        """SIGKILL one worker node: its raylet, everything under it (agents, workers, rollouts)
        and its log monitor. The node's processes share the head's process group, so they are
        killed by pid, never by group. -> the pids killed."""
        raylet = self._raylets()[node_id]
        argv = cmdline(raylet).split()
        socket_name = next(a.split("=", 1)[1] for a in argv if a.startswith("--raylet_socket_name="))
        suffix = socket_name.rsplit("/raylet", 1)[1]  # ".3" for the third node started
        monitors = [p for p in descendants(self.head.proc.pid)
                    if "log_monitor.py" in cmdline(p) and f"log_monitor{suffix}.out" in cmdline(p)]
        pids = [raylet, *descendants(raylet), *monitors]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def wait_scaled_down(self, timeout: float) -> float:
        """Seconds until no worker node is alive; raises after ``timeout``."""
        t0 = time.monotonic()
        while self.workers():
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"worker nodes still alive after {timeout:.0f} s: {self.workers()}")
            time.sleep(1)
        return time.monotonic() - t0


class NodeWatch:
    """The cluster's alive worker nodes and CPUs sampled every ``interval`` seconds by one Ray
    client process: ``samples`` holds ``{"t": epoch, "workers": [node ids], "cpus": n}``."""

    CODE = ("import json, sys, time, ray\n"
            "ray.init(address='auto', log_to_driver=False, configure_logging=False)\n"
            "while True:\n"
            "    alive = [n for n in ray.nodes() if n['Alive'] and 'node_head' not in n['Resources']]\n"
            "    print(json.dumps({'t': time.time(), 'workers': sorted(n['NodeID'] for n in alive),\n"
            "                      'cpus': sum(n['Resources'].get('CPU', 0) for n in alive)}), flush=True)\n"
            "    time.sleep(float(sys.argv[1]))\n")

    def __init__(self, cluster: LocalCluster, interval: float):
        import threading

        self.samples: list[dict] = []
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, str(interval)], cwd=REPO, text=True,
                                     env={**cluster.env, "RAY_ADDRESS": cluster.gcs_address},
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.samples.append(json.loads(line))
            except json.JSONDecodeError:
                pass

    def wait_first(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not self.samples:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the node watcher never reported")
            time.sleep(0.1)

    def stop(self) -> list[dict]:
        kill_tree(self.proc)
        self.thread.join(timeout=5)
        return list(self.samples)


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
