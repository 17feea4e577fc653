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


def unfinished(records: RunRecords) -> bool:
    """False when the run has finished (nothing to resume); raises when it cannot be resumed."""
    if records.exists("summary.json"):
        return False
    if not records.exists("run.json"):
        raise ConfigError(f"{records.uri}: no run.json; this run directory cannot be resumed")
    return True


def prepare_stored(records: RunRecords, base_dir: Path):
    """The run's own stored config, its relative paths resolved against ``base_dir``."""
    return prepare(load_config(base_dir / "config.yaml", raw=records.read_config()))


def resume_run(run_dir: str) -> dict:
    records = RunRecords.open(run_dir)
    if not unfinished(records):
        log(f"{run_dir} has finished; nothing to resume")
        return records.read_json("summary.json")
    meta = records.read_json("run.json")
    base_dir = Path(meta["base_dir"])
    if not base_dir.is_dir():
        # A submitted run's paths resolved against the job's working directory, which Ray
        # deletes; a resume (itself submitted from the config's directory) resolves them here.
        log(f"resume: {base_dir} is gone; the config's relative paths resolve against {Path.cwd()}")
        base_dir = Path.cwd()
    prepared = prepare_stored(records, base_dir)
    prepared.seed = records.get_snapshot(meta["seed_snapshot_id"])
    return Run(prepared, records, resume_state=records.read_state()).execute()
