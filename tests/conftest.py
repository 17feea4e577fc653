"""Shared fixtures. One real local Ray for the whole session (2 CPUs, like CI's machine)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


#: The files that take minutes (multi-node clusters, kill-and-resume runs, whole searches), longest
#: first. They are collected first, so under pytest-xdist's ``--dist loadfile`` (how CI runs) each
#: worker starts on one and the short files fill in around them, instead of one long file running
#: alone at the end. Tests keep their order within a file.
LONG_FILES = ("test_resume.py", "test_cluster.py", "test_autoscaling.py", "test_darwinx.py", "test_mutator.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))


@pytest.fixture(scope="session")
def ray_session():
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, namespace="rsi", configure_logging=False,
                 log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def repo() -> Path:
    return REPO


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
    return root


@pytest.fixture
def make_tree(tmp_path):
    def make(files: dict[str, str], name: str = "target") -> Path:
        return write_tree(tmp_path / name, files)

    return make


@pytest.fixture(scope="session")
def docker_engine():
    """The ``DOCKER_HOST`` of an engine for the docker jail's tests (see ``_docker``). Skips only
    where no engine answers and none can be started here (no ``dockerd``, or not root); a
    ``dockerd`` that is installed but fails to start is a failure, not a skip."""
    from _docker import PrivateEngine, engine_answers

    if engine_answers(os.environ.get("DOCKER_HOST")):
        yield os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        return
    import shutil

    if os.geteuid() != 0 or shutil.which("dockerd", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"])) is None:
        pytest.skip("no Docker engine answers and none can be started here (needs root and dockerd)")
    engine = PrivateEngine()
    engine.start()
    try:
        yield engine.host
    finally:
        engine.stop()


@pytest.fixture
def docker_host(docker_engine, monkeypatch):
    """This test's rollouts use the docker jail's engine (``DOCKER_HOST`` set for this test only)."""
    from rsi import jail_docker, sandbox

    monkeypatch.setenv("DOCKER_HOST", docker_engine)
    jail_docker.client.cache_clear()
    sandbox._probe_docker.cache_clear()
    yield docker_engine
    jail_docker.client.cache_clear()
    sandbox._probe_docker.cache_clear()


@pytest.fixture(params=["bwrap", "docker"])
def jail_backend(request) -> str:
    """Each jail a rollout may run in: bubblewrap, and the same contract in a Docker container
    (whose engine ``docker_host`` provides for the test)."""
    if request.param == "docker":
        request.getfixturevalue("docker_host")
    return request.param

