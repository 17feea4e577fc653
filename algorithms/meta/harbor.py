"""Stage 2: tasks in Harbor format as a tree-search domain.

A Harbor task is a directory: ``task.toml`` (timeouts, environment, metadata), ``instruction.md``
(what the agent is asked), ``environment/`` (the starting state; ``environment/Dockerfile`` for
containers) and ``tests/test.sh`` (the verifier, which may write a reward to
``$LOGS_DIR/verifier/reward.txt``). A node of the tree is a patch against the starting state;
its value is the verifier's reward after applying it.

Two runners:

- ``LocalRunner``: copies ``environment/workspace`` to a temporary directory, applies the patch
  with ``git apply``, runs ``bash tests/test.sh`` there with a timeout (the whole process group
  is killed on expiry). Honest for tasks whose environment is a repository plus an interpreter
  the host has; ``test.sh`` finds its files through ``TESTS_DIR``, ``LOGS_DIR`` and
  ``WORKSPACE``, and runs with the workspace as its working directory.
- ``DockerRunner``: the same steps inside the task's own image (``environment.docker_image`` in
  task.toml, or built from ``environment/Dockerfile``) through the ``docker`` SDK, with the
  paths Harbor uses (``/tests``, ``/logs/verifier``).

Reward: ``reward.txt`` (or ``reward.json``'s ``reward``) when the verifier wrote one, else 1 for
exit code 0 and 0 otherwise. Proposing patches needs a model or agent (``propose``); without one
this stage is out of reach, but the adapter and its local runner run offline.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms.meta.inner import Expansion
from rsi.errors import ConfigError

REQUIRED = ("task.toml", "instruction.md", "tests/test.sh")


@dataclass(frozen=True)
class HarborTask:
    path: Path
    name: str
    instruction: str
    config: dict

    @property
    def verifier_timeout(self) -> float:
        return float(self.config.get("verifier", {}).get("timeout_sec", 120.0))

    @property
    def verifier_env(self) -> dict:
        return {str(k): str(v) for k, v in self.config.get("verifier", {}).get("env", {}).items()}

    @property
    def docker_image(self) -> str | None:
        return self.config.get("environment", {}).get("docker_image")

    @property
    def workspace(self) -> Path:
        return self.path / "environment" / "workspace"


def _read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        # The standard library's TOML parser (Python 3.11 on), imported here so that this module
        # stays importable on 3.10 (requires-python), where a Harbor task cannot be read.
        import tomllib

        try:
            return tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    raise ConfigError(f"{path}: reading a Harbor task needs Python >= 3.11 (tomllib)")


def load_task(path: str | Path) -> HarborTask:
    root = Path(path)
    missing = [f for f in REQUIRED if not (root / f).is_file()]
    if missing:
        raise ConfigError(f"{root} is not a Harbor task: missing {', '.join(missing)}")
    config = _read_toml(root / "task.toml")
    name = config.get("task", {}).get("name") or root.name
    return HarborTask(root, name, (root / "instruction.md").read_text(), config)


@dataclass(frozen=True)
class Verdict:
    reward: float
    #: ok, timeout, patch_failed, error
    status: str
    exit_code: int | None
    output: str
    duration_s: float


def read_reward(logs: Path, exit_code: int | None) -> float:
    text_file, json_file = logs / "reward.txt", logs / "reward.json"
    try:
        if text_file.is_file():
            return float(text_file.read_text().strip())
        if json_file.is_file():
            return float(json.loads(json_file.read_text())["reward"])
    except (ValueError, KeyError, TypeError):
        return 0.0  # an unreadable reward is no reward
    return 1.0 if exit_code == 0 else 0.0


def _run_group(argv: list, cwd: Path, env: dict, timeout: float) -> tuple:
    """``(exit_code or None on timeout, output)``; on timeout the whole process group dies."""
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out.decode(errors="replace")


@dataclass(frozen=True)
class LocalRunner:
    timeout_s: float | None = None

    def _apply(self, work: Path, patch: str) -> tuple:
        patch_file = work.parent / "patch.diff"
        patch_file.write_text(patch)
        # No enclosing repository may capture the apply: the copy is the only tree.
        env = {"PATH": os.environ.get("PATH", ""), "GIT_CEILING_DIRECTORIES": str(work.parent)}
        return _run_group(["git", "apply", "--whitespace=nowarn", str(patch_file)], work, env, 60.0)

    def run(self, task: HarborTask, patch: str = "") -> Verdict:
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="rsi-harbor-") as tmp:
            root = Path(tmp)
            work, tests, logs = root / "workspace", root / "tests", root / "logs" / "verifier"
            if task.workspace.is_dir():
                shutil.copytree(task.workspace, work, symlinks=True)
            else:
                work.mkdir()
            if patch.strip():
                code, out = self._apply(work, patch)
                if code != 0:
                    return Verdict(0.0, "patch_failed", code, out, time.monotonic() - start)
            shutil.copytree(task.path / "tests", tests)
            logs.mkdir(parents=True)
            env = {
                "PATH": os.environ.get("PATH", ""),
                "HOME": tmp,
                "TESTS_DIR": str(tests),
                "LOGS_DIR": str(logs.parent),
                "WORKSPACE": str(work),
            } | task.verifier_env
            code, out = _run_group(["bash", str(tests / "test.sh")], work, env, self.timeout_s or task.verifier_timeout)
            if code is None:
                return Verdict(0.0, "timeout", None, out, time.monotonic() - start)
            return Verdict(read_reward(logs, code), "ok", code, out, time.monotonic() - start)


def docker_client() -> tuple:
    """``(client, "")`` when a Docker engine answers, else ``(None, why not)``."""
    try:
        import docker
    except ImportError:
        return None, "the docker SDK is not installed"
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # any failure to reach the engine means the same: no Docker here
        return None, f"no Docker engine answers: {type(exc).__name__}: {exc}"
    return client, ""


def _tar(files: dict) -> bytes:
    """An in-memory tar of ``{name: bytes or a directory Path}`` for ``put_archive``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, content in files.items():
            if isinstance(content, Path):
                tar.add(content, arcname=name)
            else:
                info = tarfile.TarInfo(name)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


@dataclass
class DockerRunner:
    image: str | None = None
    timeout_s: float | None = None
    client: Any = None

    def _image(self, task: HarborTask) -> str:
        image = self.image or task.docker_image
        if image:
            return image
        tag = f"rsi-harbor-{task.path.name.lower()}"
        self.client.images.build(path=str(task.path / "environment"), tag=tag)
        return tag

    @staticmethod
    def _reward(container: Any, exit_code: int) -> float:
        stream, _ = container.get_archive("/logs/verifier")
        with tempfile.TemporaryDirectory(prefix="rsi-harbor-logs-") as tmp:
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                tar.extractall(tmp, filter="data")
            return read_reward(Path(tmp) / "verifier", exit_code)

    def run(self, task: HarborTask, patch: str = "") -> Verdict:
        if self.client is None:
            self.client, why = docker_client()
            if self.client is None:
                raise ConfigError(f"DockerRunner: {why}")
        start = time.monotonic()
        container = self.client.containers.run(self._image(task), command="sleep infinity", detach=True)
        try:
            container.put_archive("/", _tar({"tests": task.path / "tests", "tmp/patch.diff": patch.encode()}))
            container.exec_run("mkdir -p /logs/verifier")
            if patch.strip():
                code, out = container.exec_run("git apply --whitespace=nowarn /tmp/patch.diff")
                if code != 0:
                    return Verdict(0.0, "patch_failed", code, out.decode(errors="replace"), time.monotonic() - start)
            limit = int(self.timeout_s or task.verifier_timeout)
            code, out = container.exec_run(
                f"timeout -s KILL {limit} bash /tests/test.sh", environment=task.verifier_env
            )
            if code in (124, 137):
                return Verdict(0.0, "timeout", None, out.decode(errors="replace"), time.monotonic() - start)
            value = self._reward(container, code)
            return Verdict(value, "ok", code, out.decode(errors="replace"), time.monotonic() - start)
        finally:
            container.remove(force=True)


Propose = Callable[[HarborTask, str, random.Random], str]


class HarborProblem:
    """A tree search over patches of one task: ``propose(task, parent_patch, rng)`` writes a child."""

    def __init__(self, task: HarborTask, runner: Any, propose: Propose):
        self.task, self.runner, self.propose = task, runner, propose

    def root(self) -> Expansion:
        return Expansion(self.runner.run(self.task, "").reward, payload="")

    def expand(self, parent, rng: random.Random) -> Expansion:
        patch = self.propose(self.task, parent.payload, rng)
        verdict = self.runner.run(self.task, patch)
        return Expansion(verdict.reward, payload=patch)
