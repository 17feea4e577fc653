"""OpenEvolve evaluator for the bin-packing comparison: rsi's binpack benchmark, same score.

The train instances are the benchmark's own (``generated("weibull", "train")``: five generated
Weibull instances of 5,000 items) and the score is its primary score, L1 / bins per instance in
(0, 1], averaged over the instances; a heuristic that raises or packs invalidly scores 0 on that
instance, as in rsi. The packing loop is the benchmark's ``online.pack``, run in OpenEvolve's
own worker process, the way an OpenEvolve evaluator runs a program (no jail, no lockstep pipe).

Each call appends ``{"start", "end", "score"}`` to the JSON-lines file named by
``PEER_EVAL_LOG`` when it is set, so the comparison can split wall time.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.binpack.instances import generated  # noqa: E402
from benchmarks.binpack.online import InvalidPacking, count_bins, pack  # noqa: E402

TASKS = generated("weibull", "train")


def _load(program_path: str):
    spec = importlib.util.spec_from_file_location("candidate_program", program_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load a program from {program_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.priority


def evaluate(program_path: str) -> dict:
    start = time.time()
    scores: list[float] = []
    error = ""
    try:
        priority = _load(program_path)
    except Exception as exc:  # a program that does not even import scores 0 everywhere
        priority, error = None, f"{type(exc).__name__}: {exc}"
    for task in TASKS:
        items, capacity = task.input["items"], task.input["capacity"]
        if priority is None:
            scores.append(0.0)
            continue
        try:
            bins = count_bins(items, capacity, pack(items, capacity, priority))
            scores.append(task.meta["l1"] / bins)
        except (InvalidPacking, Exception) as exc:
            scores.append(0.0)
            error = error or f"{type(exc).__name__}: {exc}"
    end = time.time()
    log = os.environ.get("PEER_EVAL_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"start": start, "end": end, "score": sum(scores) / len(scores)}) + "\n")
    out = {"combined_score": sum(scores) / len(scores), "min_instance_score": min(scores)}
    if error:
        out["error"] = 1.0
    return out
