"""Archive actor: the run's archive and lineage, append-only, owned by one actor.

An entry is persisted to the run's storage (``archive.jsonl``, fsynced on local storage)
before ``append`` returns, so an acknowledged entry survives the driver, the actor and the
node. The actor is named per run: a resumed driver reattaches to it while the cluster lives,
and a restarted actor (``max_restarts``) rebuilds itself from storage.
"""

from __future__ import annotations

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rsi.records import RunRecords


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class ArchiveActor:
    def __init__(self, run_uri: str):
        self.records = RunRecords.open(run_uri)
        self.entries = self.records.read_lines("archive.jsonl")

    def append(self, entry: dict) -> int:
        # A call retried after a restart may already be on storage (the actor rebuilt itself
        # from it): appending is idempotent, so an entry is never written twice.
        if entry in self.entries:
            return len(self.entries)
        self.records.archive_entry(entry)
        self.entries.append(entry)
        return len(self.entries)

    def list(self, since: int = 0) -> list[dict]:
        return self.entries[since:]

    def truncate(self, keep: int) -> int:
        """Resume: forget entries of a step that was cut short (they are re-decided)."""
        self.records.truncate_lines("archive.jsonl", keep)
        self.entries = self.entries[:keep]
        return len(self.entries)


class ArchiveClient:
    """Driver-side handle; calls block until the entry is on storage."""

    def __init__(self, run_uri: str, run_id: str):
        name = f"rsi-archive-{run_id}"
        # Beside the driver, like the evaluator: losing a worker node must not lose the archive.
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        # ray.remote made ArchiveActor an ActorClass; mypy ignores class decorators (python/mypy#3135)
        self.actor = ArchiveActor.options(  # type: ignore[attr-defined]
            name=name, get_if_exists=True, scheduling_strategy=here
        ).remote(run_uri)

    def append(self, entry: dict) -> int:
        return ray.get(self.actor.append.remote(entry))

    def list(self, since: int = 0) -> list[dict]:
        return ray.get(self.actor.list.remote(since))

    def truncate(self, keep: int) -> int:
        return ray.get(self.actor.truncate.remote(keep))
