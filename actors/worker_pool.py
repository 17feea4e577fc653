"""Worker pool: N Ray actors, each wrapping one Worker backend, an edit proposer (``rsi.workers``;
not to be confused with Ray worker processes, which host these actors and the rollouts).

``edit`` materialises the parent on the actor's own node (nothing assumes the driver's
filesystem is visible), places read-only reference versions under relative paths, runs the
worker, removes the references and returns the edited tree; the driver commits it. Actors
restart on failure (``max_restarts``) and the driver retries the call once per restart.

An edit session keeps one checkout on one actor across several ``edit`` calls, so a worker can
review and revise its own files (ADAS reflections) before the tree is committed once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rsi.errors import Rejected, WorkerError
from rsi.snapshot import Snapshot, scan_tree
from rsi.workers.base import REF_DIR, EditResult


@ray.remote(num_cpus=0, max_restarts=3, max_task_retries=3)
class WorkerActor:
    def __init__(self, worker_cfg, base_dir: str, seed: int, state: dict | None = None):
        from rsi.workers import worker_class

        self.worker = worker_class(worker_cfg.type)(worker_cfg, base_dir=Path(base_dir), seed=seed)
        self.sessions: dict[str, Path] = {}
        if state:
            self.worker.set_state(state)

    def ask(self, prompt: str) -> tuple[str, dict]:
        reply = self.worker.ask(prompt)
        return reply, dict(vars(self.worker.usage))

    def edit(self, parent: Snapshot, prompt: str, references: dict[str, Snapshot] | None = None) -> EditResult:
        work = Path(tempfile.mkdtemp(prefix="rsi-edit-"))
        try:
            parent.materialize(work)
            rel_refs = {}
            for role, snap in (references or {}).items():
                rel = f"{REF_DIR}/{role}"
                snap.materialize(work / rel)
                _read_only(work / rel)
                rel_refs[role] = rel
            reply = self.worker.edit(work, prompt, rel_refs or None)
            if rel_refs:
                _writable(work / REF_DIR)
                shutil.rmtree(work / REF_DIR, ignore_errors=True)
            return _edit_result(work, reply, dict(vars(self.worker.usage)), self.worker.get_state())
        finally:
            _writable(work)
            shutil.rmtree(work, ignore_errors=True)

    def get_state(self) -> dict:
        return self.worker.get_state()

    def get_usage(self) -> dict:
        return dict(vars(self.worker.usage))

    # ---- sessions: several edits on one checkout ------------------------------------------
    def open_session(self, parent: Snapshot) -> str:
        work = Path(tempfile.mkdtemp(prefix="rsi-session-"))
        parent.materialize(work)
        self.sessions[work.name] = work
        return work.name

    def session_edit(self, session: str, prompt: str) -> tuple[str, dict]:
        reply = self.worker.edit(self._session(session), prompt, None)
        return reply, dict(vars(self.worker.usage))

    def close_session(self, session: str, keep: bool = True) -> EditResult | None:
        """The session's edited tree (None when ``keep`` is false); the checkout is removed."""
        work = self._session(session)
        del self.sessions[session]
        try:
            return _edit_result(work, "", dict(vars(self.worker.usage)), self.worker.get_state()) if keep else None
        finally:
            _writable(work)
            shutil.rmtree(work, ignore_errors=True)

    def _session(self, session: str) -> Path:
        if session not in self.sessions:
            # A restarted actor has lost its checkouts; the edits made in it are gone.
            raise WorkerError(f"edit session {session} is gone (the worker actor restarted)")
        return self.sessions[session]


class EditSession:
    """Driver-side handle of one session: ``edit`` as often as needed, then ``tree`` once."""

    def __init__(self, actor, session: str):
        self.actor, self.session, self.closed = actor, session, False

    def edit(self, prompt: str) -> str:
        reply, _usage = ray.get(self.actor.session_edit.remote(self.session, prompt))
        return reply

    def tree(self) -> EditResult:
        """The edited tree (``EditResult.tree``: {path: (bytes, executable)}); ends the session."""
        self.closed = True
        return ray.get(self.actor.close_session.remote(self.session))


def gather(refs: Sequence) -> list:
    """The results of concurrent calls in order, like ``ray.get(refs)``, except that when one
    fails the others are waited for before its error is raised. ``ray.get`` raises at the first
    failure and drops the calls still in flight: their outcomes are never observed, a later
    failure among them reaches the console as Ray's "Unhandled error" traceback, and the caller
    learns of only one of several failures. Here the first failure (in call order) is raised,
    with one note per other failed call."""
    if not refs:
        return []
    ray.wait(list(refs), num_returns=len(refs))
    results: list = []
    errors: list[tuple[int, BaseException]] = []
    for k, ref in enumerate(refs):
        try:
            results.append(ray.get(ref))
        except Exception as exc:  # noqa: BLE001 - each outcome is observed; the first one is raised below
            errors.append((k, exc))
    if errors:
        first = _first_with_notes(errors, len(refs))
        try:
            raise first
        finally:
            # Each caught error's traceback holds this frame: while this frame holds the errors,
            # the cycle keeps every caller's frame, and what they hold (the run's actor handles),
            # alive until a garbage collection, whenever that comes. A run resumed in the same
            # process then reattached to an archive actor that died under it.
            del first, errors
    return results


def _first_with_notes(errors: list[tuple[int, BaseException]], calls: int) -> BaseException:
    first = errors[0][1]
    for k, other in errors[1:]:
        cause = getattr(other, "cause", None) or other  # a RayTaskError's own text is Ray's header
        _add_note(first, f"call {k + 1} of {calls} also failed: {type(cause).__name__}: {cause}".splitlines()[0])
    return first


def _add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note`` where Python has it (3.11+); on 3.10 the same ``__notes__`` list."""
    add = getattr(exc, "add_note", None)
    if add is not None:
        add(note)
    else:
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]  # type: ignore[attr-defined]


def _edit_result(work: Path, reply: str, usage: dict, state: dict) -> EditResult:
    """The edited checkout as a tree, or the reason it cannot be one (a symlink out of it)."""
    try:
        return EditResult(scan_tree(work), reply, usage, state)
    except Rejected as exc:
        return EditResult({}, reply, usage, state, rejected=exc)


def _read_only(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for f in filenames:
            p = Path(dirpath) / f
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _writable(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)


class WorkerPool:
    """Driver-side view of the worker actors; replica i gets seed ``run_seed + i``."""

    def __init__(self, worker_cfg, base_dir: Path, seed: int, states: Sequence[dict | None] | None = None):
        self._n = getattr(worker_cfg, "replicas", 1)
        self._args = (worker_cfg, str(base_dir), seed)
        self._states = list(states or [None] * self._n)
        self._actors: list | None = None

    @property
    def actors(self) -> list:
        """The worker actors, started at the first call that needs one: a run measures its seed
        first, and that measurement (the run's first rollouts) then has the CPUs to itself
        instead of sharing them with ``replicas`` processes importing their libraries."""
        if self._actors is None:
            worker_cfg, base_dir, seed = self._args
            # Pinned to the driver's node: an actor lost with another node would restart from the
            # run's initial states and replay edits already used; the driver's node ends the run anyway.
            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            # ray.remote made WorkerActor an ActorClass; mypy ignores class decorators (python/mypy#3135)
            actor_class = WorkerActor.options(scheduling_strategy=here)  # type: ignore[attr-defined]
            self._actors = [actor_class.remote(worker_cfg, base_dir, seed + i, self._states[i]) for i in range(self._n)]
        return self._actors

    def __len__(self) -> int:
        return self._n

    def edit(self, i: int, parent: Snapshot, prompt: str, references=None) -> EditResult:
        return ray.get(self.actors[i % len(self.actors)].edit.remote(parent, prompt, references))

    def edit_many(self, jobs: Sequence[tuple[Snapshot, str, dict[str, Snapshot] | None]]) -> list[EditResult]:
        refs = [self.actors[i % len(self.actors)].edit.remote(*job) for i, job in enumerate(jobs)]
        return gather(refs)

    def ask(self, i: int, prompt: str) -> tuple[str, dict]:
        return ray.get(self.actors[i % len(self.actors)].ask.remote(prompt))

    def ask_many(self, prompts: Sequence[str], replicas: Sequence[int] | None = None) -> list[tuple[str, dict]]:
        """Prompt ``k`` to actor ``replicas[k]`` (default: round-robin), each actor answering one
        call at a time (so at most ``replicas`` are in flight); replies in prompt order, whatever
        order they finish in. A failed call raises here, once every call has ended (``gather``)."""
        at = list(replicas) if replicas is not None else list(range(len(prompts)))
        refs = [self.actors[i % len(self.actors)].ask.remote(p) for i, p in zip(at, prompts)]
        return gather(refs)

    @contextlib.contextmanager
    def session(self, i: int, parent: Snapshot) -> Iterator[EditSession]:
        """A checkout of ``parent`` kept on actor ``i`` across edits; removed on exit."""
        actor = self.actors[i % len(self.actors)]
        handle = EditSession(actor, ray.get(actor.open_session.remote(parent)))
        try:
            yield handle
        finally:
            if not handle.closed:
                ray.get(actor.close_session.remote(handle.session, keep=False))

    def usage(self) -> dict:
        """Model usage of all replicas since they started: calls, tokens, cost."""
        total = {"calls": 0, "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0}
        if self._actors is None and not any(self._states):  # a fresh pool not started: no calls
            return total
        for u in ray.get([a.get_usage.remote() for a in self.actors]):
            for k in total:
                total[k] += u.get(k, 0)
        return total

    def states(self) -> list[dict]:
        if self._actors is None:  # not started: the states it would start from ({}: from its seed)
            return [s or {} for s in self._states]
        return ray.get([a.get_state.remote() for a in self._actors])
