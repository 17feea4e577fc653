"""Shared fixtures. One real local Ray for the whole session (2 CPUs, like CI's machine)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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
