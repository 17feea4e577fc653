"""The seams between the core and what the driver plugs into a run: typed, so an algorithm is
checked against what it may call, never against Ray.

``RunContext`` (``rsi.algorithm``) holds one of each. The driver passes the Ray-backed
implementations (``actors.client.EvaluatorClient``, ``actors.worker_pool.WorkerPool``,
``actors.archive.ArchiveClient``); tests pass in-process fakes. These are structural
(``typing.Protocol``): an implementation matches by its methods and never imports this
module, and the core never imports ``actors`` (``tests/test_layers.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from rsi.results import Request
    from rsi.snapshot import Snapshot
    from rsi.workers.base import EditResult


class Evaluator(Protocol):
    """Measurements: rollouts of a snapshot on a split's tasks, as Arrow tables in the
    ``rsi.results.SCHEMA`` layout (stored before the caller sees them)."""

    def split_ids(self, split: str) -> list[str]:
        """The task ids of ``split`` (``train``, ``dev``, ``test``), in order; empty if none."""
        ...

    def evaluate(
        self,
        snapshot: Snapshot,
        split: str,
        task_ids: Sequence[str] | None = None,
        trials: int = 1,
        salt: str = "",
        label: str = "",
    ) -> pa.Table:
        """One measurement (``task_ids`` None: the whole split)."""
        ...

    def evaluate_many(self, requests: Sequence[Request], label: str = "") -> list[pa.Table]:
        """Several measurements at once, one table per request, in order."""
        ...

    def evaluate_chained(
        self,
        groups: Sequence[Sequence[Request]],
        follow: Callable[[int, list[pa.Table]], Sequence[Request]],
        label: str = "",
    ) -> tuple[list[list[pa.Table]], list[list[pa.Table]]]:
        """Groups of measurements at once, each group's follow-up measurements (``follow(i,
        group i's tables)``) started as soon as that group is in, while the others run:
        ``(first-stage tables, follow-up tables)``, per group, in order."""
        ...

    def preload(self, table: pa.Table) -> dict[str, Any]:
        """Resume: the stored rollouts the cache may reuse -> ``{"cached": n, "stale": n}``."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters of the run so far (``executed``, ``cache_hits``, ...)."""
        ...

    @property
    def rollout_usage(self) -> Mapping[str, float]:
        """Model spend of the rollouts themselves (agent targets): ``rollout_tokens_in``,
        ``rollout_tokens_out``, ``rollout_cost_usd``."""
        ...


class ProposerSession(Protocol):
    """One checkout kept across several edits (``Proposers.session``)."""

    def edit(self, prompt: str) -> str:
        """Edit the session's checkout; returns the worker's reply."""
        ...

    def tree(self) -> EditResult:
        """The edited tree; ends the session."""
        ...


class Proposers(Protocol):
    """The worker pool: replicas that propose edits (or answer questions). ``i`` picks the
    replica (modulo the pool's size); the ``*_many`` calls spread over all of them."""

    def edit(self, i: int, parent: Snapshot, prompt: str, references: dict[str, Snapshot] | None = None) -> EditResult:
        """An edit of ``parent`` as a tree (``references``: read-only versions shown beside it)."""
        ...

    def edit_many(self, jobs: Sequence[tuple[Snapshot, str, dict[str, Snapshot] | None]]) -> list[EditResult]:
        """Several ``(parent, prompt, references)`` edits at once; results in order."""
        ...

    def ask(self, i: int, prompt: str) -> tuple[str, dict[str, Any]]:
        """A text reply and the replica's usage so far."""
        ...

    def ask_many(
        self, prompts: Sequence[str], replicas: Sequence[int] | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        """Several ``ask`` calls at once (prompt ``k`` to replica ``replicas[k]``, else ``k``);
        replies in prompt order."""
        ...

    def session(self, i: int, parent: Snapshot) -> AbstractContextManager[ProposerSession]:
        """A checkout of ``parent`` kept on replica ``i`` across edits; removed on exit."""
        ...

    def states(self) -> list[dict[str, Any]]:
        """Each replica's state, for resume."""
        ...

    def usage(self) -> dict[str, Any]:
        """Model usage of all replicas: ``calls``, ``tokens_in``, ``tokens_out``, ``cost_usd``."""
        ...


class Archive(Protocol):
    """The run's append-only archive (``archive.jsonl``): an entry is on storage when
    ``append`` returns."""

    def append(self, entry: dict[str, Any]) -> int:
        """Store one entry; returns the number of entries."""
        ...

    def truncate(self, keep: int) -> int:
        """Resume: keep the first ``keep`` entries; returns the number kept."""
        ...
