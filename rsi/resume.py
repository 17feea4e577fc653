"""``rsi resume RUN_DIR``: continue a stopped or killed run from its records.

The algorithm's state after its last completed step (``state/latest.json.gz``: RNG states,
archive, worker states, decision count) is restored, decision lines of the interrupted step
are dropped and re-decided, and every stored rollout is preloaded into the evaluator's cache,
so nothing that finished runs again and the decisions equal an uninterrupted run's.
"""

from __future__ import annotations

from pathlib import Path

from rsi.config import load_config
from rsi.errors import ConfigError
from rsi.progress import log
from rsi.records import RunRecords
from rsi.runner import Run, prepare


def resume_run(run_dir: str) -> dict:
    records = RunRecords.open(run_dir)
    if records.exists("summary.json"):
        log(f"{run_dir} has finished; nothing to resume")
        return records.read_json("summary.json")
    if not records.exists("run.json"):
        raise ConfigError(f"{run_dir}: no run.json; this run directory cannot be resumed")
    meta = records.read_json("run.json")
    base_dir = Path(meta["base_dir"])
    if not base_dir.is_dir():
        # A submitted run's paths resolved against the job's working directory, which Ray
        # deletes; a resume (itself submitted from the config's directory) resolves them here.
        log(f"resume: {base_dir} is gone; the config's relative paths resolve against {Path.cwd()}")
        base_dir = Path.cwd()
    resolved = load_config(base_dir / "config.yaml", raw=records.read_config())
    prepared = prepare(resolved)
    prepared.seed = records.get_snapshot(meta["seed_snapshot_id"])
    state = records.read_state()
    return Run(prepared, records, resume_state=state).execute()
