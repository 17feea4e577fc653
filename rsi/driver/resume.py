"""``rsi resume RUN_DIR``: continue a stopped or killed run from its records.

The algorithm's state after its last completed step (``state/latest.json.gz``: RNG states,
archive, worker states, decision count) is restored, decision lines of the interrupted step
are dropped and re-decided, and every stored rollout is preloaded into the evaluator's cache,
so nothing that finished runs again and the decisions equal an uninterrupted run's. A stored
row is reused only under the target fingerprint it was measured with; a run whose benchmark,
harness or limits changed is refused unless ``--allow-changed`` says to re-execute.
"""

from __future__ import annotations

from pathlib import Path

from rsi.config import load_config
from rsi.driver.runner import Run, prepare
from rsi.errors import ConfigError
from rsi.progress import log
from rsi.records import RunRecords


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


def check_unchanged(records: RunRecords, prepared, allow_changed: bool = False) -> None:
    """Refuse (exit 2) to resume a run whose target fingerprint changed since it started: the
    benchmark or problem code, its data, the harness or the target's limits. With
    ``allow_changed`` the run goes on, re-executing every rollout measured under the old one."""
    meta = records.read_json("run.json")
    before, now = meta.get("fingerprint"), prepared.target.fingerprint()
    if before is None or before == now:  # a run from before fingerprints: its rows are re-executed
        return
    if not allow_changed:
        raise ConfigError(
            f"{records.uri}: the problem or benchmark, its harness or the target's limits changed since "
            f"this run started (fingerprint {before} -> {now}); pass --allow-changed to re-execute its "
            "rollouts"
        )
    log(f"resume: target fingerprint changed ({before} -> {now}); stored rollouts of the old one run again")
    records.write_json(
        "run.json", {**meta, "fingerprint": now, "fingerprint_history": [*meta.get("fingerprint_history", []), before]}
    )


def resume_run(run_dir: str, allow_changed: bool = False) -> dict:
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
    check_unchanged(records, prepared, allow_changed)
    prepared.seed = records.get_snapshot(meta["seed_snapshot_id"])
    return Run(prepared, records, resume_state=records.read_state()).execute()
