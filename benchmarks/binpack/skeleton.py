"""The paper's online bin-packing skeleton, run in the sandbox with cwd = a candidate checkout.

stdin: one instance, ``{"capacity": int, "items": [int, ...]}`` (a whole task
``{"input": {...}}`` is accepted too). stdout: exactly one JSON object,
``{"assignment": [bin index per item], "bins_used": n}``; whatever the candidate prints goes to
stderr so it cannot corrupt that line. A heuristic that raises ends the process non-zero, which
the target records as an ``error`` rollout. The benchmark re-checks the assignment and counts
the bins itself; ``bins_used`` is for people reading traces.
"""

import contextlib
import importlib.util
import json
import os
import sys
from pathlib import Path

# A checkout is committed after rollouts; leave no __pycache__ in it.
sys.dont_write_bytecode = True


def load_online():
    """The shared packing loop, loaded by path so nothing in the checkout can shadow it."""
    path = Path(__file__).resolve().parent / "online.py"
    spec = importlib.util.spec_from_file_location("_binpack_online", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    task = json.load(sys.stdin)
    if "items" not in task and isinstance(task.get("input"), dict):
        task = task["input"]
    online = load_online()
    # The checkout takes the place of this script's folder: the candidate imports its own
    # modules, never the benchmark's.
    sys.path[0] = os.getcwd()
    with contextlib.redirect_stdout(sys.stderr):
        from heuristic import priority

        assignment = online.pack(task["items"], task["capacity"], priority)
    result = {"assignment": assignment.tolist(), "bins_used": len(set(assignment.tolist()))}
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
