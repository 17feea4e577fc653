"""Bring your own problem: one Python file with ``tasks(split)`` and ``score(task, output)``.

```yaml
benchmark: {problem: problems/knapsack/problem.py}   # relative to the config file
# or an installed module:  {problem: "my_pkg.knapsack"}  /  {problem: "my_pkg.problems:Knapsack"}
```

The file is the user's own, trusted code: it runs on the trusted side (the driver, the evaluator,
the Ray workers that score), never in the jail. What it defines:

* ``tasks(split) -> list[dict]`` for ``"train"``, ``"dev"``, ``"test"``: JSON-serialisable dicts,
  each with a unique string ``"id"``. Everything under a task's ``"private"`` key stays on the
  trusted side; the rest is what the candidate reads on stdin.
* ``score(task, output) -> float | dict``: the whole task (``private`` included) and the JSON
  object the rollout printed. Higher is better; the primary score lies in [0, 1]. A dict holds
  ``"score"`` and may add named numeric metrics, which land in the rollout table.
* optional ``harness``: a path, relative to the problem file, of a fixed script that runs in the
  jail next to the candidate (it imports the candidate's marked function and prints the output
  JSON). Without it the target's own ``entry`` script is run.
* optional ``version``: a string folded into the rollout cache key (the key always includes a
  hash of the problem file and its harness too, so an edit never reuses stale rows).

The problem's source travels inside the benchmark object (it is small), so a Ray worker on any
node scores with exactly the file the run started with, whether or not that node has it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import math
import sys
import traceback
import types
from pathlib import Path
from typing import Any

from pydantic import Field

from rsi.benchmark import Benchmark, BenchmarkParams, Score, Task
from rsi.errors import ConfigError


class ProblemParams(BenchmarkParams):
    name: str = "problem"
    problem: str = Field(
        description="a problem file (path relative to the config) or an installed "
        "module, `pkg.module` or `pkg.module:Name`, defining tasks() and score()"
    )


class ProblemError(ValueError):
    """The problem's own code misbehaved while scoring one rollout (that rollout's error)."""


class ProblemBenchmark(Benchmark):
    name = "problem"
    Params = ProblemParams

    def __init__(self, params: ProblemParams, base_dir: Path | None = None):
        super().__init__(params, base_dir)
        self.ref = params.problem
        self.path, self.source, self.attr = _locate(params.problem, self.base_dir)
        self._module: Any = None
        api = self._api()
        self.version = str(getattr(api, "version", "") or "")
        harness = getattr(api, "harness", None)
        self.harness = None
        if harness is not None:
            if self.path is None:
                raise ConfigError(f"problem {self.ref}: a harness needs a problem file, not a module")
            self.harness = (self.path.parent / str(harness)).resolve()
            if not self.harness.is_file():
                raise ConfigError(f"{self.where}: harness {harness!r} is not a file next to the problem")
        self._splits: dict[str, list[Task]] = {}

    # ---- loading --------------------------------------------------------------------------
    @property
    def where(self) -> str:
        return str(self.path) if self.path is not None else self.ref

    def _api(self):
        """The object holding tasks/score: the module, or its ``Name`` attribute. Loaded from
        the carried source, once per process."""
        if self._module is None:
            self._module = _load_source(self.source, self.where, self.ref)
        api = getattr(self._module, self.attr) if self.attr else self._module
        for fn, arity in (("tasks", 1), ("score", 2)):
            f = getattr(api, fn, None)
            if not callable(f):
                raise ConfigError(f"{self.where}: defines no {fn}() function")
            try:
                params = [
                    p
                    for p in inspect.signature(f).parameters.values()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                ]
            except (TypeError, ValueError):
                continue
            if len(params) != arity:
                raise ConfigError(
                    f"{self.where}: {fn}() must take {arity} argument{'s' * (arity > 1)} "
                    f"({'split' if arity == 1 else 'task, output'}), not {len(params)}"
                )
        return api

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_module"] = None  # a module does not pickle; the source does
        return state

    # ---- Benchmark ------------------------------------------------------------------------
    def _split(self, split: str) -> list[Task]:
        if split not in self._splits:
            self._splits[split] = self._load_split(split)
        return self._splits[split]

    def _load_split(self, split: str) -> list[Task]:
        try:
            raw = self._api().tasks(split)
        except Exception as exc:  # the user's bug: one line naming their file and line
            raise ConfigError(
                f"{_user_frame(exc, self.where)}: tasks({split!r}) raised {type(exc).__name__}: {exc}"
            ) from None
        if raw is None:
            raw = []
        if not isinstance(raw, list):
            raise ConfigError(f"{self.where}: tasks({split!r}) must return a list of dicts, got {type(raw).__name__}")
        out, seen = [], set()
        for i, task in enumerate(raw):
            if not isinstance(task, dict) or not isinstance(task.get("id"), str) or not task["id"]:
                raise ConfigError(f'{self.where}: tasks({split!r})[{i}] must be a dict with a non-empty string "id"')
            if task["id"] in seen:
                raise ConfigError(f"{self.where}: tasks({split!r}) has a duplicate id {task['id']!r}")
            seen.add(task["id"])
            try:
                json.dumps(task, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{self.where}: task {task['id']!r} is not JSON-serialisable: {exc}") from None
            public = {k: v for k, v in task.items() if k != "private"}
            out.append(Task(task["id"], public, {"dataset": split, "private": task.get("private")}))
        return out

    def payload(self, task: Task, trial: int, sample_seed: int) -> Any:
        """The candidate reads the task itself, minus ``private``."""
        return task.input

    def score(self, task: Task, output: dict, trial: int) -> Score:
        whole = dict(task.input)
        if task.meta.get("private") is not None:
            whole["private"] = task.meta["private"]
        result = self._api().score(whole, output)
        if isinstance(result, dict):
            if "score" not in result:
                raise ProblemError(f'{self.where}: score() returned a dict without "score"')
            primary, extra = result["score"], {k: v for k, v in result.items() if k != "score"}
        else:
            primary, extra = result, {}
        primary = _finite(primary, "score", self.where)
        if not 0.0 <= primary <= 1.0:
            raise ProblemError(f"{self.where}: score() returned {primary}, outside [0, 1]")
        return Score(primary, {str(k): _finite(v, f"metric {k!r}", self.where) for k, v in extra.items()})

    def scorer_home(self) -> str | None:
        return self.where

    def data_fingerprint(self) -> str:
        h = hashlib.sha256(self.source.encode())
        h.update(f"|{self.attr}|{self.version}".encode())
        return h.hexdigest()[:16]

    def user_paths(self) -> list[Path]:
        return [p for p in (self.path, self.harness) if p is not None and self.path is not None]

    def source_files(self) -> dict[str, bytes]:
        name = self.path.name if self.path is not None else f"{self.ref.partition(':')[0]}.py"
        files = {name: self.source.encode()}
        if self.harness is not None:
            files[self.harness.name] = self.harness.read_bytes()
        return files


def _finite(value: Any, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProblemError(f"{where}: score() gave {what} {value!r}, not a number")
    value = float(value)
    if not math.isfinite(value):
        raise ProblemError(f"{where}: score() gave a non-finite {what} ({value})")
    return value


def _locate(ref: str, base_dir: Path) -> tuple[Path | None, str, str | None]:
    """-> (file or None, source, attribute): a ``.py`` path, else an importable module."""
    if ref.endswith(".py") or "/" in ref or ref.startswith("."):
        path = (base_dir / ref).resolve()
        if not path.is_file():
            raise ConfigError(f"benchmark.problem: {path} does not exist")
        try:
            return path, path.read_text(encoding="utf-8"), None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"benchmark.problem: cannot read {path}: {exc}") from None
    module, _, attr = ref.partition(":")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise ConfigError(f"benchmark.problem: no module {module!r} (a problem is a .py file or an installed module)")
    return Path(spec.origin), Path(spec.origin).read_text(encoding="utf-8"), attr or None


def _load_source(source: str, where: str, ref: str) -> types.ModuleType:
    name = "rsi_problem_" + hashlib.sha256(source.encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    module = types.ModuleType(name)
    module.__file__ = where
    try:
        code = compile(source, where, "exec")
        sys.modules[name] = module
        exec(code, module.__dict__)  # the user's own problem file: trusted, never candidate code
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise ConfigError(f"{where}:{exc.lineno}: {exc.msg}") from None
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ConfigError(
            f"{_user_frame(exc, where)}: importing the problem raised {type(exc).__name__}: {exc}"
        ) from None
    return module


def _user_frame(exc: BaseException, where: str) -> str:
    """``file:line`` of the innermost frame in the user's problem file (else the file)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == where]
    return f"{where}:{frames[-1].lineno}" if frames else where
