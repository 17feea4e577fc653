"""``rsi submit``: the same run as ``rsi run``, as a Ray job on a cluster.

The config is validated here first (a bad one exits 2 before the cluster is contacted). The job
ships the config's project directory as its working directory, plus this checkout's packages
when they are not inside it, so the cluster runs exactly the code and files that were
validated; its entrypoint is ``rsi run`` with ``--ray.address auto`` (join the cluster the job
runs on). The run directory is named here, so the user knows where results go even with
``--no-wait``; it must be somewhere the head node can write and the user can read: an object
store URI or a shared path. A relative one is accepted only for a cluster on this machine.

Token authentication: Ray 2.5x clusters may require a bearer token on the job API. It is read
the way Ray reads it (``RAY_AUTH_TOKEN``, else the file named by ``RAY_AUTH_TOKEN_PATH``, else
``~/.ray/auth_token``) and sent whenever one exists, unless ``RAY_AUTH_MODE=disabled``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shlex
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

from rsi.errors import ClusterError, ConfigError

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("rsi", "actors", "algorithms", "cluster", "benchmarks")
# Never shipped: environments, results, VCS data, caches (gitignore patterns, relative to the root).
EXCLUDES = [".venv", "venv", "runs", ".git", "__pycache__", "*.pyc", ".pytest_cache", "*.egg-info", "build", "dist"]
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def submit(config: str, address: str, overrides, run_dir: str | None = None, wait: bool = True) -> int:
    """Validate, submit, and (``wait``) stream the job's logs; 0 only when the job succeeded."""
    from rsi.config import load_config
    from rsi.driver.runner import prepare
    from rsi.records import new_run_uri

    overrides = [(k, v) for k, v in overrides if k != "ray.address"]
    resolved = load_config(config, overrides)
    prepared = prepare(resolved)
    local = _is_local(address)
    run_dir = _run_location(run_dir or new_run_uri(resolved.run.storage, resolved.run.name), local)
    workdir, config_rel = _working_dir(Path(config), resolved.base_dir)
    for path in prepared.benchmark.user_paths():
        if not _inside(path.resolve(), workdir):
            raise ConfigError(
                f"{path} is outside {workdir}, the directory the job ships: move the problem file "
                "next to the config (or below it)"
            )
    entrypoint = shlex.join(
        [
            "python",
            "-m",
            "rsi.driver.cli",
            "run",
            config_rel,
            "--run-dir",
            run_dir,
            "--ray.address",
            "auto",
            *[a for k, v in overrides for a in (f"--{k}", str(v))],
        ]
    )
    return _submit_job(address, entrypoint, workdir, resolved.run.name, run_dir, {"rsi_config": config_rel}, wait)


def submit_resume(
    run_dir: str, address: str, working_dir: str | None = None, wait: bool = True, allow_changed: bool = False
) -> int:
    """Submit ``rsi resume RUN_DIR`` as a job: the way back from a lost driver on a cluster.

    The run directory must be readable from here (an object store or a shared path). The job
    ships ``working_dir`` (default: the current directory), which must be the directory the
    run's config resolved its relative paths against; that is checked here, before the cluster
    is contacted, by loading the stored config against it."""
    from rsi.driver.resume import check_unchanged, prepare_stored, unfinished
    from rsi.records import RunRecords

    run_dir = _run_location(run_dir, _is_local(address))
    records = RunRecords.open(run_dir)
    if not unfinished(records):
        print(f"{run_dir} has finished; nothing to resume")
        return 0
    workdir = Path(working_dir or Path.cwd()).resolve()
    try:
        prepared = prepare_stored(records, workdir)
    except ConfigError as exc:
        raise ConfigError(
            f"--working-dir {workdir}: the run's config does not resolve there ({exc}); give the "
            "directory its relative paths resolve against"
        ) from None
    check_unchanged(records, prepared, allow_changed)
    entrypoint = shlex.join(
        ["python", "-m", "rsi.driver.cli", "resume", run_dir, *(["--allow-changed"] if allow_changed else [])]
    )
    return _submit_job(address, entrypoint, workdir, prepared.config.run.name, run_dir, {"rsi_resume": "1"}, wait)


def _submit_job(
    address: str, entrypoint: str, workdir: Path, name: str, run_dir: str, metadata: dict, wait: bool
) -> int:
    runtime_env = {"working_dir": str(workdir), "excludes": EXCLUDES}
    if not _inside(REPO, workdir):
        runtime_env["py_modules"] = [str(REPO / p) for p in PACKAGES]

    client = _client(address)
    submission_id = f"rsi-{name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    try:
        client.submit_job(
            entrypoint=entrypoint,
            runtime_env=runtime_env,
            submission_id=submission_id,
            metadata={"rsi_run_dir": run_dir, **metadata},
        )
    except _auth_error() as exc:
        raise ClusterError(_auth_message(address, exc)) from None
    except RuntimeError as exc:
        raise ClusterError(f"the job server at {address} refused the job: {exc}") from None
    print(f"submitted job {submission_id} to {address}")
    print(f"run directory: {run_dir}")
    if not wait:
        print(f"follow it with: ray job logs --follow {submission_id} --address {address}")
        return 0
    return _follow(client, submission_id, address)


# ---- pieces --------------------------------------------------------------------------------
def auth_token() -> str | None:
    """The cluster token as Ray itself finds it; None when there is none or auth is off."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return None
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return os.environ["RAY_AUTH_TOKEN"].strip()
    named = os.environ.get("RAY_AUTH_TOKEN_PATH")
    path = Path(named).expanduser() if named else Path.home() / ".ray" / "auth_token"
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        if named:
            raise ClusterError(f"RAY_AUTH_TOKEN_PATH={named}: no such file") from None
        return None
    except OSError as exc:
        raise ClusterError(f"cannot read the Ray auth token at {path}: {exc}") from None
    return token or None


def _client(address: str):
    from ray.job_submission import JobSubmissionClient

    if not urlparse(address).scheme.startswith("http"):
        raise ConfigError(f"--address {address!r}: give the job server's URL, e.g. http://HEAD:8265")
    token = auth_token()
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        return JobSubmissionClient(address, headers=headers)
    except _auth_error() as exc:
        raise ClusterError(_auth_message(address, exc)) from None
    except (ConnectionError, RuntimeError) as exc:
        raise ClusterError(f"could not reach the Ray job server at {address}: {exc}") from None


def _auth_error():
    from ray.exceptions import AuthenticationError

    return AuthenticationError


def _auth_message(address: str, exc) -> str:
    sent = "a token was sent and refused" if auth_token() else "no token was found here"
    return (
        f"the cluster at {address} refused authentication ({sent}): {getattr(exc, 'message', exc)}\n"
        "Copy the cluster's token (`ray get-auth-token` on the head node) into RAY_AUTH_TOKEN, "
        "or a file named by RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token."
    )


def _is_local(address: str) -> bool:
    host = urlparse(address).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _run_location(run_dir: str, local: bool) -> str:
    """A URI as is; a relative path only for a cluster on this machine (then made absolute)."""
    if "://" in run_dir or Path(run_dir).expanduser().is_absolute():
        return run_dir
    if not local:
        raise ConfigError(
            f"run directory {run_dir!r} is relative: on a remote cluster it would land in the job's temporary "
            "working directory on the head node. Use --storage s3://bucket/prefix (or gs://, or a path shared "
            "by the head node), or --run-dir with such a location"
        )
    return str(Path(run_dir).expanduser().resolve())


def _working_dir(config: Path, base_dir: Path) -> tuple[Path, str]:
    """What to ship and the config's path inside it: the directory the config's relative
    paths resolve against (the repository, for the shipped ``configs/``)."""
    config = config.resolve()
    if not _inside(config, base_dir):
        raise ConfigError(f"{config} is outside {base_dir}, the directory its paths resolve against")
    return base_dir, str(config.relative_to(base_dir))


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _follow(client, submission_id: str, address: str) -> int:
    """Stream the job's output until it ends; the job's verdict is the exit code."""

    async def tail() -> None:
        async for chunk in client.tail_job_logs(submission_id):
            sys.stdout.write(chunk)
            sys.stdout.flush()

    try:
        try:
            asyncio.run(tail())
        except (RuntimeError, OSError) as exc:  # the log stream dropped; the job's status still decides
            print(f"rsi submit: log stream interrupted ({exc}); waiting for the job to end", file=sys.stderr)
        status = str(client.get_job_status(submission_id))
        while status not in TERMINAL:
            time.sleep(1)
            status = str(client.get_job_status(submission_id))
    except KeyboardInterrupt:
        print(
            f"\nrsi submit: stopped following; the job keeps running on the cluster "
            f"(stop it with: ray job stop {submission_id} --address {address})",
            file=sys.stderr,
        )
        return 130
    if status == "SUCCEEDED":
        print(f"job {submission_id} succeeded")
        return 0
    message = client.get_job_info(submission_id).message or ""
    print(f"rsi submit: job {submission_id} {status}: {message.strip()[-2000:]}", file=sys.stderr)
    return 1
