"""The docker jail's own guarantees, beyond the attacks every jail is put through (those run
against both jails in ``test_jail_attacks``, ``test_model_proxy``, ``test_meta_jail`` and
``test_sandbox``): nothing a rollout made stays on the engine, a rollout whose caller is killed
ends by itself, and a machine without an engine gets one clear line before anything runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import yaml
from _procs import args_are, pids

from rsi import jail_docker, sandbox
from rsi.jail import JailUnavailable
from rsi.sandbox import Limits, run_program

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(180)


def leftovers() -> tuple[list, list]:
    engine = jail_docker.client()
    label = {"label": jail_docker.LABEL}
    return engine.containers.list(all=True, filters=label), engine.volumes.list(filters=label)


def test_nothing_a_rollout_made_stays_on_the_engine(tmp_path, docker_host):
    """Every way a rollout ends (ok, timeout, stdout overflow, a crash, a lockstep protocol
    break) removes its container and its checkout volume, and the checkout on the host is
    untouched by what the candidate wrote in its copy."""
    (tmp_path / "main.py").write_text(textwrap.dedent("""
        import json, sys, time
        mode = json.load(sys.stdin)["mode"]
        open("written-inside", "w").write("x")
        if mode == "sleep":
            time.sleep(60)
        if mode == "flood":
            sys.stdout.write("x" * (1 << 22))
        if mode == "crash":
            raise SystemExit(3)
        print(json.dumps({"mode": mode}))
    """))
    before = leftovers()
    argv = [sys.executable, "main.py"]
    ends = {}
    for mode in ("ok", "sleep", "flood", "crash"):
        out = run_program(argv, tmp_path, {"mode": mode}, Limits(timeout_s=3, stdout_max_bytes=1 << 16))
        ends[mode] = (out.status, out.reason)
    assert ends == {"ok": ("ok", ""), "sleep": ("timeout", "wall-clock limit of 3 s reached"),
                    "flood": ("protocol_error", f"stdout exceeded {1 << 16} bytes"),
                    "crash": ("error", "exit code 3")}
    assert leftovers() == before == ([], [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["main.py"]


# A holder as a Ray worker is one: it starts a rollout and waits; the test kills it mid-rollout,
# well before the holder's own wall-clock limit would stop the container. The holder shortens the
# container's grace past that limit (30 s in use) so the test waits seconds, not half a minute:
# the deadline is the same code path, read when the container is made.
LIMIT_S = 10
GRACE_S = 5
HOLDER = f"""
import sys
from pathlib import Path
import rsi.jail_docker
from rsi.sandbox import Limits, run_program
rsi.jail_docker.ORPHAN_GRACE_S = {GRACE_S}
print(run_program([sys.executable, "main.py", sys.argv[2]], Path(sys.argv[1]), {{}}, Limits(timeout_s={LIMIT_S}, backend="docker")), file=sys.stderr)
"""


SLEEP = "import time; time.sleep(600)"
# The candidate: leaves a process of its own in a new session, then sleeps; it never answers.
ORPHAN = f"""
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", {SLEEP!r}, sys.argv[1]], start_new_session=True)
time.sleep(600)
"""


def _candidates(marker: str) -> list[int]:
    """The candidate's two processes, seen from the host: a container's processes are the host's
    too, in a PID namespace of their own. By their exact arguments: the holder, ``timeout`` and
    the container's init carry the marker on their command lines too."""
    return pids(args_are(["main.py", marker], ["-c", SLEEP, marker]))


def test_a_rollout_whose_caller_is_killed_ends_by_itself(tmp_path, docker_host, monkeypatch):
    """A killed Ray worker or node never stops its rollouts' containers. The candidate sleeps
    far past its limit and leaves a process in a session of its own; once its caller is
    SIGKILLed, the container still ends by its own deadline, ``ORPHAN_GRACE_S`` after the limit,
    and nothing in it runs on; what it leaves, the next process to start rollouts removes."""
    marker = f"rsi-orphan-{uuid.uuid4().hex}"
    (tmp_path / "main.py").write_text(ORPHAN)
    engine = jail_docker.client()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), marker], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    container = None
    try:
        deadline = time.monotonic() + 90
        while True:  # until the candidate and the process it left both run in the container
            assert holder.poll() is None, f"the holder ended early: {holder.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "the candidate never started its background process"
            mine = [c for c in engine.containers.list(filters={"label": jail_docker.LABEL, "status": "running"})
                    if marker in c.attrs["Config"]["Cmd"]]
            if mine and len(_candidates(marker)) == 2:
                container, = mine
                break
            time.sleep(0.2)
        started = time.monotonic()
        holder.kill()
        holder.wait(timeout=30)
        container.reload()
        assert container.status == "running", "the engine does not know the caller is gone"
        assert container.name not in jail_docker.sweep_leftovers(engine, min_age_s=0), "a running one is kept"

        limit = LIMIT_S + GRACE_S
        assert container.attrs["Config"]["Cmd"][:4] == ["/usr/bin/timeout", "-s", "KILL", str(limit)]
        while container.status == "running":
            assert time.monotonic() - started < limit + 30, "the container outlived its rollout"
            time.sleep(0.5)
            container.reload()
        assert container.attrs["State"]["ExitCode"] == 128 + 9, "ended by its own deadline's SIGKILL"
        assert not _candidates(marker), "a process of the rollout runs on"

        # What the dead caller leaves, the next process to start rollouts removes once it is old
        volume = next(m["Name"] for m in container.attrs["Mounts"] if m.get("Type") == "volume")
        assert container.name not in jail_docker.sweep_leftovers(engine), "just ended: kept for a live caller"
        monkeypatch.setattr(jail_docker, "LEFTOVER_AGE_S", 2)
        time.sleep(3)  # engine times are read to the second; other tests' fresh leftovers stay
        jail_docker.client.cache_clear()
        jail_docker.client()  # a process about to start rollouts sweeps first
        assert not engine.containers.list(all=True, filters={"name": container.name})
        assert volume not in [v.name for v in engine.volumes.list(filters={"label": jail_docker.LABEL})]
        container = None
    finally:
        if holder.poll() is None:
            holder.kill()
        if container is not None:  # what the dead caller would have removed
            container.remove(force=True)
            for volume in engine.volumes.list(filters={"label": jail_docker.LABEL}):
                if any(m.get("Name") == volume.name for m in container.attrs["Mounts"]):
                    volume.remove(force=True)


def test_without_an_engine_the_backend_says_so_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    jail_docker.client.cache_clear()
    sandbox._probe_docker.cache_clear()
    try:
        with pytest.raises(JailUnavailable, match="docker backend needs a Docker engine that answers"):
            sandbox.check_backend("docker")
    finally:
        jail_docker.client.cache_clear()
        sandbox._probe_docker.cache_clear()


def test_rsi_run_without_an_engine_is_one_line_and_exit_2(tmp_path):
    shutil.copytree(REPO / "targets" / "table_demo", tmp_path / "target")
    (tmp_path / "table.yaml").write_text("splits: {train: [t1]}\nscores: {v0: {t1: 1.0}}\n")
    cfg = {"name": "no-engine", "seed": 1, "storage": str(tmp_path / "runs"),
           "target": {"path": "target", "kind": "program", "entry": "solve.py", "limits": {"backend": "docker"}},
           "benchmark": {"name": "table", "path": "table.yaml"}, "algorithm": {"name": "evaluate"}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    proc = subprocess.run([sys.executable, "-m", "rsi.driver.cli", "run", str(tmp_path / "run.yaml")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "docker backend needs a Docker engine that answers" in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
