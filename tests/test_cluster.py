"""Cluster entry points on a real multi-node Ray cluster on this machine.

A head (job server on, no CPUs) and two worker nodes with different custom resources, every
node a real ``ray start`` with token auth. Runs go in through ``rsi submit`` (real job
submission with the config's directory as working directory); a node is SIGKILLed mid-run.
The launcher YAMLs and the KubeRay manifest are checked offline with Ray's own validation.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from _cluster import REPO, LocalCluster, comparable, decisions, rollout_keys, slow_table_scenario
from _procs import cmdline, descendants

LAUNCHERS = sorted((REPO / "cluster" / "launcher").glob("*.yaml"))
RAYJOB = REPO / "cluster" / "kuberay" / "rayjob.yaml"


# ---- offline: cluster definitions --------------------------------------------------------------
def _asked_resources() -> set[str]:
    """Custom resources any shipped config's rollouts ask for, plus the container pool."""
    names = {"docker"}
    for path in (REPO / "configs").glob("*.yaml"):
        names |= set((yaml.safe_load(path.read_text()).get("evaluator") or {}).get("resources") or {})
    return names


@pytest.mark.parametrize("path", LAUNCHERS, ids=lambda p: p.stem)
def test_launcher_yaml_is_what_ray_up_accepts(path):
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = yaml.safe_load(path.read_text())
    assert raw["cluster_name"] and raw["provider"]["type"] in ("local", "aws", "gcp")
    cfg = prepare_config(raw)  # Ray's own defaults filling; no cloud call
    validate_config(cfg)       # Ray's JSON schema
    assert cfg["head_node_type"] in cfg["available_node_types"]
    assert cfg["max_workers"] >= 1
    commands = " ".join(cfg["setup_commands"])
    assert "pip install" in commands and "~/rsi" in commands, "nodes install the repository"
    assert cfg["file_mounts"]["~/rsi"] == "."
    for cmd in ("head_start_ray_commands", "worker_start_ray_commands"):
        assert "RAY_AUTH_MODE=token" in " ".join(cfg[cmd]), f"{cmd} must start Ray with token auth"
    assert "~/.ray/auth_token" in cfg["file_mounts"]
    if raw["provider"]["type"] == "local":
        # Ray refuses node types on-prem; each machine advertises docker itself.
        assert "available_node_types" not in raw
        assert '\\"docker\\"' in cfg["worker_start_ray_commands"][-1]
        return
    types = cfg["available_node_types"]
    assert types[cfg["head_node_type"]]["resources"] == {"CPU": 0}, "no rollouts on the head"
    workers = {k: v for k, v in types.items() if k != cfg["head_node_type"]}
    assert all(v["min_workers"] == 0 and v["max_workers"] >= 1 for v in workers.values()), "autoscale from zero"
    assert sum(v["max_workers"] for v in workers.values()) <= cfg["max_workers"]
    offered = {r for v in workers.values() for r in v["resources"]}
    assert _asked_resources() <= offered
    assert any(v["resources"].get("CPU", 0) >= 1 and "docker" not in v["resources"] for v in workers.values())


def test_kuberay_rayjob_runs_rsi_on_an_autoscaling_cluster():
    job = yaml.safe_load(RAYJOB.read_text())
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    spec = job["spec"]
    argv = spec["entrypoint"].split()
    assert argv[:4] == ["python", "-m", "rsi.driver.cli", "run"]
    assert (REPO / argv[4]).is_file(), "the entrypoint's config is in the repository"
    assert argv[argv.index("--ray.address") + 1] == "auto"
    assert argv[argv.index("--storage") + 1].startswith("s3://"), "results must outlive the cluster"
    env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert env["working_dir"].endswith(".zip")
    cluster = spec["rayClusterSpec"]
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    offered = set()
    for group in cluster["workerGroupSpecs"]:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        params = group["rayStartParams"]
        if "resources" in params:  # KubeRay's quoting: a JSON string inside a string
            offered |= set(json.loads(json.loads(params["resources"])))
    assert _asked_resources() <= offered
    pods = [cluster["headGroupSpec"]["template"], spec["submitterPodTemplate"],
            *[g["template"] for g in cluster["workerGroupSpecs"]]]
    for pod in pods:
        ray_container = pod["spec"]["containers"][0]
        env_vars = {e["name"]: e for e in ray_container["env"]}
        assert env_vars["RAY_AUTH_MODE"]["value"] == "token"
        assert env_vars["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "rsi-ray-token"


# ---- offline: submit's own checks --------------------------------------------------------------
def _submit(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rsi.driver.cli", "submit", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_bad_config_exits_2_before_contacting_the_cluster(tmp_path):
    config = slow_table_scenario(tmp_path)
    dead = "http://127.0.0.1:9"  # nothing listens: contacting it would fail differently
    out = _submit(dict(os.environ), str(config), "--address", dead, "--algorithm.max_stepz", "2")
    assert out.returncode == 2 and "unknown key 'algorithm.max_stepz'" in out.stderr, out.stderr
    out = _submit(dict(os.environ), str(config), "--address", "http://cluster.example:8265",
                  "--storage", "runs")
    assert out.returncode == 2 and "relative" in out.stderr and "s3://" in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists()


def test_a_problem_file_outside_the_shipped_directory_exits_2(tmp_path):
    (tmp_path / "problems").mkdir()
    (tmp_path / "problems" / "p.py").write_text(
        "def tasks(split):\n    return [{'id': 'a'}]\ndef score(task, output):\n    return 1.0\n")
    job = tmp_path / "job"
    (job / "seed").mkdir(parents=True)
    (job / "seed" / "main.py").write_text("print('{}')\n")
    (job / "seed" / "components.yaml").write_text("- {name: program, glob: main.py}\n")
    (job / "c.yaml").write_text(yaml.safe_dump({
        "name": "x", "storage": "/tmp/unused", "target": {"path": "seed", "entry": "main.py"},
        "benchmark": {"problem": "../problems/p.py"}, "algorithm": {"name": "evaluate"}}))
    out = _submit(dict(os.environ), str(job / "c.yaml"), "--address", "http://127.0.0.1:9")
    assert out.returncode == 2 and "outside" in out.stderr and "p.py" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_auth_token_is_found_where_ray_looks(tmp_path, monkeypatch):
    from cluster.submit import auth_token
    from rsi.errors import ClusterError

    for var in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert auth_token() is None
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("from-home\n")
    assert auth_token() == "from-home"
    (tmp_path / "tok").write_text("from-path")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "tok"))
    assert auth_token() == "from-path"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    assert auth_token() == "from-env"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert auth_token() is None
    monkeypatch.delenv("RAY_AUTH_MODE")
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    with pytest.raises(ClusterError, match="RAY_AUTH_TOKEN_PATH"):
        auth_token()


# ---- a real cluster ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster(head_cpus=0)
    try:
        # The last test kills "a"; the others need only "b".
        c.add_nodes(("a", 1, {"pool_a": 2}), ("b", 1, {"pool_b": 2}))
        c.wait_ready()
        yield c
    finally:
        c.shutdown()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    root = tmp_path_factory.mktemp("scenario")
    config = slow_table_scenario(root, train=4, edits=("v2", "v1"))
    (root / "evaluate.yaml").write_text(yaml.safe_dump({
        "name": "placed", "seed": 5, "storage": str(root / "runs"),
        "target": {"path": "target", "kind": "program", "entry": "solve.py"},
        "benchmark": {"name": "table", "path": "table.yaml"},
        "algorithm": {"name": "evaluate", "trials": 2}}))
    return root, config


@pytest.fixture(scope="module")
def undisturbed(cluster, scenario):
    """The reference: one submitted run that nothing interrupts."""
    root, config = scenario
    run_dir = root / "runs" / "undisturbed"
    out = _submit(cluster.env, str(config), "--address", cluster.dashboard_url, "--run-dir", str(run_dir))
    return out, run_dir


def _traces(run_dir: Path) -> list[dict]:
    files = sorted((run_dir / "traces").glob("*.jsonl.gz"))
    return [json.loads(line) for f in files for line in gzip.decompress(f.read_bytes()).decode().splitlines()]


@pytest.mark.slow
def test_submitted_run_completes_with_a_complete_run_directory(undisturbed):
    out, run_dir = undisturbed
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "succeeded" in out.stdout and f"run directory: {run_dir}" in out.stdout
    assert "step   2  confirm" in out.stdout, "the job's own output is streamed back"
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["ray"]["address"] == "auto"
    kinds = [d["kind"] for d in decisions(run_dir)]
    assert kinds == ["seed", "screen", "screen", "confirm", "promote", "test"], kinds
    table = pq.read_table(run_dir / "rollouts")
    assert table.num_rows == len(rollout_keys(run_dir)) > 0
    assert set(table["status"].to_pylist()) == {"ok"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["snapshot_id"] == decisions(run_dir)[3]["snapshot_id"], "v1 is confirmed and promoted"
    assert summary["rollouts"]["executed"] == table.num_rows
    assert len(_traces(run_dir)) == table.num_rows


@pytest.mark.slow
def test_rollouts_needing_a_custom_resource_run_only_where_it_is(cluster, scenario):
    root, _ = scenario
    run_dir = root / "runs" / "placed"
    out = _submit(cluster.env, str(root / "evaluate.yaml"), "--address", cluster.dashboard_url,
                  "--run-dir", str(run_dir), "--evaluator.resources", "{pool_b: 1}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    b = next(n for n in cluster.nodes if n.name == "b")
    nodes = Counter(t["node_id"] for t in _traces(run_dir))
    assert nodes == {b.node_id: 4 * 2 + 2}, f"all 10 rollouts on pool_b's node {b.node_id}: {nodes}"


@pytest.mark.slow
def test_wrong_token_is_refused_with_a_clear_message(cluster, scenario, tmp_path):
    _, config = scenario
    out = _submit({**cluster.env, "RAY_AUTH_TOKEN": "0" * 64}, str(config), "--address", cluster.dashboard_url,
                  "--run-dir", str(tmp_path / "never"))
    assert out.returncode == 1
    assert "refused authentication (a token was sent and refused)" in out.stderr, out.stderr
    env = {k: v for k, v in cluster.env.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE")}
    out = _submit({**env, "HOME": str(tmp_path)}, str(config), "--address", cluster.dashboard_url,
                  "--run-dir", str(tmp_path / "never"))
    assert out.returncode == 1 and "no token was found here" in out.stderr, out.stderr
    assert not (tmp_path / "never").exists()


@pytest.mark.slow
def test_stopped_job_exits_1_and_resumes_as_a_job(cluster, scenario, undisturbed):
    """The documented way back from a lost driver on a cluster: ``rsi submit --resume RUN_DIR``
    from the config's directory (a wrong working directory is refused before submission)."""
    from ray.job_submission import JobSubmissionClient

    root, config = scenario
    _, base_dir = undisturbed
    run_dir = root / "runs" / "stopped"
    proc = subprocess.Popen([sys.executable, "-m", "rsi.driver.cli", "submit", str(config), "--address", cluster.dashboard_url,
                             "--run-dir", str(run_dir)], cwd=REPO, env=cluster.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    job_id = None
    for line in proc.stdout:
        if line.startswith("submitted job "):
            job_id = line.split()[2]
            break
    assert job_id, proc.stderr.read()[-3000:]
    client = JobSubmissionClient(cluster.dashboard_url, headers={"Authorization": f"Bearer {cluster.token}"})
    deadline = time.monotonic() + 240
    while not decisions(run_dir):
        assert proc.poll() is None and time.monotonic() < deadline, "the run never made its first decision"
        time.sleep(0.05)
    client.stop_job(job_id)
    rest, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, rest[-2000:] + err[-2000:]
    assert f"job {job_id} STOPPED" in err, err[-2000:]
    assert "promote" not in [d["kind"] for d in decisions(run_dir)], "stopped mid-run"

    wrong = _submit(cluster.env, "--resume", str(run_dir), "--address", cluster.dashboard_url,
                    "--working-dir", str(root / "runs"))
    assert wrong.returncode == 2 and "does not resolve there" in wrong.stderr, wrong.stderr[-2000:]
    resumed = subprocess.run([sys.executable, "-m", "rsi.driver.cli", "submit", "--resume", str(run_dir), "--address",
                              cluster.dashboard_url], cwd=root, env=cluster.env, capture_output=True, text=True,
                             timeout=360)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    resume_id = next(ln.split()[2] for ln in resumed.stdout.splitlines() if ln.startswith("submitted job "))
    assert str(client.get_job_status(resume_id)) == "SUCCEEDED"
    assert comparable(decisions(run_dir)) == comparable(decisions(base_dir))
    keys = rollout_keys(run_dir)
    assert len(keys) == len(set(keys)) and sorted(keys) == sorted(rollout_keys(base_dir))


@pytest.mark.slow
def test_node_killed_mid_evaluation_loses_and_repeats_nothing(cluster, scenario, undisturbed):
    root, config = scenario
    base_out, base_dir = undisturbed
    assert base_out.returncode == 0
    victim = next(n for n in cluster.nodes if n.name == "a")
    run_dir = root / "runs" / "disturbed"
    proc = subprocess.Popen([sys.executable, "-m", "rsi.driver.cli", "submit", str(config), "--address", cluster.dashboard_url,
                             "--run-dir", str(run_dir)], cwd=REPO, env=cluster.env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    busy, deadline = [], time.monotonic() + 240
    # Kill once the search is past its seed and a rollout is running on the victim right now.
    while not busy:
        assert proc.poll() is None, "the run ended before the victim got work:\n" + proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "the victim never ran a rollout"
        if decisions(run_dir):
            busy = [p for p in descendants(victim.proc.pid) if "solve.py" in cmdline(p)]
        time.sleep(0.02)
    cluster.kill(victim)
    at_kill = [d["kind"] for d in decisions(run_dir)]
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-4000:]
    assert "promote" not in at_kill, "the kill landed mid-run"

    keys = rollout_keys(run_dir)
    dupes = [k for k, n in Counter(keys).items() if n > 1]
    assert not dupes, f"rollouts stored twice: {dupes[:3]}"
    assert sorted(keys) == sorted(rollout_keys(base_dir)), "every rollout exactly once, none missing"
    assert comparable(decisions(run_dir)) == comparable(decisions(base_dir))
    assert len(_traces(run_dir)) == len(keys), "one trace per stored rollout"


@pytest.mark.slow
def test_a_users_problem_file_is_scored_on_the_worker_nodes(cluster, tmp_path):
    """Bring your own problem on a cluster: the problem file sits only in the submitted
    directory, the head has no CPUs, so every rollout is scored on another node."""
    (tmp_path / "seed").mkdir()
    (tmp_path / "problem.py").write_text(
        "import os, socket\n"
        "def tasks(split):\n    return [{'id': f'{split}-{i}', 'x': i, 'private': {'y': 2 * i}} for i in range(3)]\n"
        "def score(task, output):\n"
        "    return {'score': float(output.get('y') == task['private']['y']), 'pid': os.getpid()}\n")
    (tmp_path / "seed" / "main.py").write_text(
        "import json, sys\n\n\n# rsi: evolve\ndef f(x):\n    return 2 * x\n\n\n"
        "print(json.dumps({'y': f(json.load(sys.stdin)['x'])}))\n")
    (tmp_path / "seed" / "components.yaml").write_text("- {name: program, glob: main.py}\n")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({
        "name": "byop", "seed": 3, "storage": str(tmp_path / "runs"),
        "target": {"path": "seed", "entry": "main.py", "deterministic": True},
        "benchmark": {"problem": "problem.py"},
        "algorithm": {"name": "darwinx", "worker": {"type": "mutator"}, "max_steps": 2, "screen_size": 2,
                      "confirm_samples": 1}}))
    run_dir = tmp_path / "runs" / "byop"
    out = _submit(cluster.env, str(tmp_path / "p.yaml"), "--address", cluster.dashboard_url, "--run-dir", str(run_dir))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = pq.read_table(run_dir / "rollouts").to_pylist()
    seed_rows = [r for r in rows if r["split"] == "train" and r["snapshot_id"] == decisions(run_dir)[0]["snapshot_id"]]
    assert sorted((r["task_id"], r["status"], r["score"]) for r in seed_rows) == [
        ("train-0", "ok", 1.0), ("train-1", "ok", 1.0), ("train-2", "ok", 1.0)]
    nodes = {t["node_id"] for t in _traces(run_dir)}
    assert nodes and cluster.head.node_id not in nodes, "rollouts were scored on the worker nodes"
    assert all("pid" in dict(r["metrics"]) for r in rows if r["status"] == "ok")
