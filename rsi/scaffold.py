"""``rsi new NAME``: a runnable problem directory to start from.

It holds the three things every problem has: ``problem.py`` (tasks and the trusted scorer),
``seed/`` (the program rsi evolves, with a ``# rsi: evolve`` marked function and its
``components.yaml``) and ``config.yaml`` (DarwinX with the offline mutator, so it runs with no
model and no key). ``rsi run NAME/config.yaml`` works at once.
"""

from __future__ import annotations

import re
from pathlib import Path

from rsi.errors import ConfigError

PROBLEM = '''"""{name}: predict y for a hidden function of x; closer is better.

Replace tasks() and score() with your own problem. Everything under a task's "private" key stays
on the trusted side: the candidate program never sees it, score() does.
"""

import math


def _hidden(x: float) -> float:
    return 0.5 * x * x - 2.0 * x + 3.0


def tasks(split: str) -> list[dict]:
    """The tasks of "train", "dev" or "test": JSON dicts, each with a unique string "id"."""
    xs = {{"train": [i / 2 for i in range(-6, 7)], "dev": [-2.25, 0.75, 3.25], "test": [-3.5, 1.25, 4.5]}}[split]
    return [{{"id": f"{{split}}-{{i}}", "x": x, "private": {{"y": _hidden(x)}}}} for i, x in enumerate(xs)]


def score(task: dict, output: dict) -> dict:
    """Trusted: runs outside the candidate's jail. The primary score lies in [0, 1]."""
    y = output.get("y")
    if isinstance(y, bool) or not isinstance(y, (int, float)) or not math.isfinite(y):
        return {{"score": 0.0}}
    error = abs(y - task["private"]["y"])
    return {{"score": 1.0 / (1.0 + error), "abs_error": min(error, 1e9)}}
'''

SEED = '''"""The program rsi evolves: it reads one task as JSON on stdin and prints one JSON object."""

import json
import sys


# rsi: evolve
def predict(x: float) -> float:
    return 1.0 * x + 1.0


if __name__ == "__main__":
    task = json.load(sys.stdin)
    print(json.dumps({"y": predict(task["x"])}))
'''

COMPONENTS = """# Every file of the target matches exactly one rule; evolve_scope names what a worker may change.
- {name: program, glob: main.py}
"""

CONFIG = """# rsi run {name}/config.yaml   — DarwinX with the offline mutator: no model, no API key.
name: {name}
seed: 1
storage: runs                       # relative to this file
target:
  path: seed
  kind: program
  entry: main.py
  deterministic: true               # the program gives the same answer every time
  limits: {{timeout_s: 20}}
benchmark: {{problem: problem.py}}
algorithm:
  name: darwinx
  worker: {{type: mutator, max_ops: 2}}
  max_steps: 16
  parallel_candidates: 2
  screen_size: 4
  screen_samples: 1
  confirm_samples: 1
  regression_tolerance: 0.5
  screen_regression_tolerance: 1.0
  merge_every: 0
"""


def scaffold(name_or_path: str) -> Path:
    dest = Path(name_or_path)
    name = dest.name
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise ConfigError(f"rsi new: {name!r} is not a usable name (letters, digits, _ . -)")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ConfigError(f"rsi new: {dest} exists and is not an empty directory")
    (dest / "seed").mkdir(parents=True, exist_ok=True)
    (dest / "problem.py").write_text(PROBLEM.format(name=name))
    (dest / "seed" / "main.py").write_text(SEED)
    (dest / "seed" / "components.yaml").write_text(COMPONENTS)
    (dest / "config.yaml").write_text(CONFIG.format(name=name))
    return dest
