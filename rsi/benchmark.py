"""Task and Benchmark: what a target is measured on.

A Benchmark yields ``train``/``dev``/``test`` task lists (honouring ``limit``) and scores one
output to a primary metric in [0, 1] plus named secondary metrics. Scoring runs where the
rollout ran (a Ray worker process), so a benchmark object must pickle; it is ``ray.put`` once per
evaluation, not shipped per task.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from rsi.errors import ConfigError

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Task:
    task_id: str
    input: Any
    meta: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Score:
    primary: float
    metrics: dict[str, float] = field(default_factory=dict)


class BenchmarkParams(BaseModel):
    """Keys every suite accepts; a suite's own model subclasses this (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    limit: int | None = Field(None, ge=1, description="at most this many tasks per split")


class Benchmark(ABC):
    name: ClassVar[str]
    Params: ClassVar[type[BenchmarkParams]] = BenchmarkParams
    #: A script run in the sandbox instead of the target's own entry script (cwd = the
    #: snapshot checkout). Bin packing uses this for the paper's skeleton, which imports the
    #: candidate's ``heuristic.py``. None: run the target's entry script. A class attribute,
    #: which an instance may set for itself (a bring-your-own problem names its harness).
    harness: Path | None = None
    #: Files besides ``harness`` that it loads (read-only in the jail, under /harness, by name).
    #: Nothing else of the suite, its data above all, is visible to a candidate.
    harness_support: ClassVar[tuple[Path, ...]] = ()
    #: Code and data outside the suite's package that a score depends on (files or folders),
    #: hashed into ``fingerprint`` beside the package: a suite whose tasks run a search over
    #: programs depends on the operator that edits them and on the program it starts from.
    code_dependencies: ClassVar[tuple[Path, ...]] = ()

    def __init__(self, params: BenchmarkParams, base_dir: Path | None = None):
        self.params = params
        self.base_dir = base_dir or Path.cwd()

    @abstractmethod
    def _split(self, split: str) -> list[Task]:
        """All tasks of one split, in a fixed order."""

    def split(self, split: str) -> list[Task]:
        if split not in SPLITS:
            raise ConfigError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
        tasks = self._split(split)
        seen = set()
        for t in tasks:
            if t.task_id in seen:
                raise ConfigError(f"benchmark {self.name}: duplicate task id {t.task_id!r} in split {split}")
            seen.add(t.task_id)
        return tasks[: self.params.limit] if self.params.limit else tasks

    def harness_mounts(self) -> dict[str, str]:
        """Host path -> name under /harness of each file the jail gets from this suite."""
        files = [self.harness, *self.harness_support] if self.harness is not None else []
        return {str(Path(f).resolve()): Path(f).name for f in files}

    def dialogue(self, task: Task, trial: int, sample_seed: int):
        """An online problem returns an ``rsi.sandbox.Dialogue`` that reveals the task step by
        step (the rollout then gets no ``payload``); None: the whole payload at once."""
        return None

    def payload(self, task: Task, trial: int, sample_seed: int) -> Any:
        """What a program rollout reads as JSON on stdin."""
        return {"task_id": task.task_id, "input": task.input, "trial": trial, "sample_seed": sample_seed}

    @abstractmethod
    def score(self, task: Task, output: dict, trial: int) -> Score:
        """Score one rollout's JSON output. Must not raise on hostile output: return 0."""

    def fingerprint(self) -> str:
        """Part of the rollout cache key: changes whenever a score could. It hashes the suite's
        parameters, the bytes of its code and shipped data (every file of the package that
        defines it), the harness, ``code_dependencies``, and ``data_fingerprint()`` for data kept elsewhere."""
        h = hashlib.sha256(f"{self.name}|{self.params.model_dump_json()}|{self.data_fingerprint()}".encode())
        h.update(_code_digest(type(self)).encode())
        for dependency in self.code_dependencies:
            h.update(_tree_digest(Path(dependency).resolve()).encode())
        for path in sorted(self.harness_mounts()):
            h.update(hashlib.sha256(Path(path).read_bytes()).hexdigest().encode())
        return f"{self.name}:{h.hexdigest()[:16]}"

    def source_files(self) -> dict[str, bytes]:
        """User-supplied code the run depends on (a problem file, its harness): the run
        directory keeps a copy and its hash. The shipped suites have none."""
        return {}

    def user_paths(self) -> list[Path]:
        """Files of the user's this suite reads at start-up (a problem file and its harness):
        a submitted job must ship them."""
        return []

    def scorer_home(self) -> str | None:
        """Where the scoring code lives (a folder, or a file): a scorer's error names its line there."""
        try:
            return str(Path(inspect.getfile(type(self))).resolve().parent)
        except (TypeError, OSError):
            return None

    def data_fingerprint(self) -> str:
        """A digest of data that lives outside the suite's package (a user's file); "" if none."""
        return ""

    def report(self, table, split: str) -> list[dict]:
        """Rows for the CLI's results table (per dataset where the suite has datasets)."""
        from rsi.results import per_dataset_means

        return per_dataset_means(table, self, split)

    def dataset_of(self, task: Task) -> str:
        return task.meta.get("dataset", self.name)


def _code_digest(cls: type) -> str:
    """Digest of every file beside the module that defines ``cls`` (its package directory, data
    included): an edit to scoring code, instance generation or a shipped data file changes it."""
    return _tree_digest(Path(inspect.getfile(cls)).resolve().parent)


def _tree_digest(root: Path) -> str:
    """Digest of a file, or of every file under a folder with its relative path; ``__pycache__``
    is not content. The bytes are hashed again only when a file's size or modification time
    changed, so a long-lived process (a notebook) that edits a dependency gets a new key."""
    if root.is_file():
        files = [root]
    elif root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    else:
        raise ConfigError(f"{root}: a file the rollout cache key depends on is missing")
    stamps = tuple((str(p), (st := p.stat()).st_size, st.st_mtime_ns) for p in files)
    return _hash_files(root, stamps)


@functools.lru_cache(maxsize=256)
def _hash_files(root: Path, stamps: tuple[tuple[str, int, int], ...]) -> str:
    h = hashlib.sha256()  # a file's own name relative to itself is ".": one loop for both kinds
    for name, _, _ in stamps:
        path = Path(name)
        h.update(f"{path.relative_to(root).as_posix()}\0".encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()
