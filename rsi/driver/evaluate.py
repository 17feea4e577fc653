"""``rsi eval``: measure one target directory on a benchmark through Ray, no run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rsi.config import load_config
from rsi.progress import console
from rsi.report import rows_table
from rsi.results import ScoreMatrix


def evaluate_target(
    target_dir: str, benchmark: str, split: str, kind: str = "program", entry: str | None = None, overrides=()
) -> dict:
    from actors.client import EvaluatorClient
    from cluster.connect import connect
    from rsi.driver.runner import prepare

    raw: dict[str, Any] = {
        "name": "eval",
        "target": {"path": str(Path(target_dir).resolve()), "kind": kind},
        "benchmark": {"name": benchmark},
        "algorithm": {"name": "evaluate"},
    }
    if entry:
        raw["target"]["entry"] = entry
    prepared = prepare(load_config(Path.cwd() / "<eval>", overrides, raw=raw))
    connect(prepared.config.run.ray)
    client = EvaluatorClient.start(
        "eval", prepared.target, prepared.config.run.evaluator, prepared.config.run.seed, True, records=None
    )
    table = client.evaluate(prepared.seed, split, trials=1, salt="eval", label=f"{benchmark}/{split}")
    rows = prepared.benchmark.report(table, split)
    console.print(rows_table(rows, f"{Path(target_dir).name} on {benchmark}/{split}"))
    statuses = {s: table["status"].to_pylist().count(s) for s in set(table["status"].to_pylist())}
    console.print(
        f"rollouts: {table.num_rows}  statuses: {statuses}  mean score: {ScoreMatrix.from_table(table).mean():.4f}",
        markup=False,
    )
    return {
        "target": str(target_dir),
        "benchmark": benchmark,
        "split": split,
        "rows": rows,
        "snapshot_id": prepared.seed.snapshot_id,
        "statuses": statuses,
    }
