"""A benchmark whose scores are written down in advance: deterministic experiments.

The target answers with a version name (``targets/table_demo`` prints the contents of its
``VERSION`` file) and the rollout scores whatever the table says that version gets on that
task in that trial. Gates, promotion, resume and reports can then be tested end to end with
known outcomes and no model. The file::

    splits: {train: [t1, t2], dev: [d1], test: [x1]}
    scores:                # version -> task_id -> score, or a list of per-trial scores
      v0: {t1: 1.0, t2: [1.0, 0.0], d1: 0.5, x1: 0}

A list is indexed by ``trial mod len``, so ``[1.0, 0.0]`` alternates across repetitions.
An unknown version or task scores 0.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import yaml
from pydantic import Field

from rsi.benchmark import SPLITS, Benchmark, BenchmarkParams, Score, Task
from rsi.errors import ConfigError

Scores = dict[str, dict[str, tuple[float, ...]]]


class TableParams(BenchmarkParams):
    path: str = Field(
        description="YAML file of splits and scores; a relative path resolves against the config's folder"
    )


def _key(value, what: str, where: str) -> str:
    """Names may be written bare in YAML (``t1``, ``3``); anything else (``1.10`` -> 1.1) would
    silently change on parsing, so it must be quoted."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ConfigError(f"{where}: {what} {value!r} must be a string (quote it)")
    return str(value)


def _score(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"{where}: score {value!r} must be a number in [0, 1]")
    return float(value)


def load_table(path: Path) -> tuple[dict[str, list[str]], Scores]:
    """Parse and check a table file; every problem is a ConfigError naming the file."""
    where = str(path)
    if not path.is_file():
        raise ConfigError(f"{where}: table file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: YAML error: {exc}") from None
    if not isinstance(data, dict) or set(data) != {"splits", "scores"}:
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ConfigError(f"{where}: expected exactly the keys 'splits' and 'scores', got {got}")
    raw_splits, raw_scores = data["splits"], data["scores"]
    if not isinstance(raw_splits, dict) or not set(raw_splits) <= set(SPLITS):
        raise ConfigError(f"{where}: 'splits' must map some of {list(SPLITS)} to lists of task ids")
    splits: dict[str, list[str]] = {}
    for split in SPLITS:
        ids = raw_splits.get(split) or []
        if not isinstance(ids, list):
            raise ConfigError(f"{where}: splits.{split} must be a list of task ids")
        ids = [_key(t, "task id", f"{where}: splits.{split}") for t in ids]
        dupes = sorted(t for t, n in Counter(ids).items() if n > 1)
        if dupes:
            raise ConfigError(f"{where}: splits.{split} lists task ids more than once: {dupes}")
        splits[split] = ids
    known = {t for ids in splits.values() for t in ids}
    if not isinstance(raw_scores, dict):
        raise ConfigError(f"{where}: 'scores' must map version -> task id -> score or list of scores")
    scores: Scores = {}
    for version, row in raw_scores.items():
        v = _key(version, "version", where)
        if not isinstance(row, dict):
            raise ConfigError(f"{where}: scores.{v} must map task ids to a score or a list of scores")
        scores[v] = {}
        for task_id, value in row.items():
            t = _key(task_id, "task id", f"{where}: scores.{v}")
            if t not in known:
                raise ConfigError(f"{where}: scores.{v} names task {t!r}, which is in no split")
            at = f"{where}: scores.{v}.{t}"
            if isinstance(value, list):
                if not value:
                    raise ConfigError(f"{at}: a list of per-trial scores must not be empty")
                scores[v][t] = tuple(_score(x, at) for x in value)
            else:
                scores[v][t] = (_score(value, at),)
    return splits, scores


class TableBenchmark(Benchmark):
    name = "table"
    Params = TableParams

    def __init__(self, params: TableParams, base_dir: Path | None = None):
        super().__init__(params, base_dir)
        self.path = (self.base_dir / params.path).resolve()
        # Checked now, before any run directory exists; kept in memory so the benchmark
        # pickles to workers without the file.
        self.splits, self.scores = load_table(self.path)
        self.digest = hashlib.sha256(self.path.read_bytes()).hexdigest()[:16]

    def _split(self, split: str) -> list[Task]:
        return [Task(t, {"task_id": t}, {"dataset": split}) for t in self.splits[split]]

    def data_fingerprint(self) -> str:
        # The file's content, not its name, decides every score.
        return self.digest

    def score(self, task: Task, output: dict, trial: int) -> Score:
        answer = output.get("answer") if isinstance(output, dict) else None
        per_trial = self.scores.get(answer, {}).get(task.task_id) if isinstance(answer, str) else None
        if not per_trial:
            return Score(0.0)
        return Score(per_trial[trial % len(per_trial)])


__all__ = ["TableBenchmark", "TableParams", "load_table"]
