"""Target: how a snapshot runs one task.

A rollout never raises for anything a candidate does: it ends ``ok``, ``error``, ``timeout`` or
``protocol_error`` and anything but ``ok`` scores 0. Targets run inside Ray worker processes,
so they are plain picklable objects built once per evaluation.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import sys
import time
import traceback
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rsi import untrusted
from rsi.benchmark import Benchmark, Task
from rsi.config import TargetConfig
from rsi.errors import ConfigError, RsiError
from rsi.snapshot import Snapshot

if TYPE_CHECKING:
    from rsi.model_proxy import ModelProxy
    from rsi.sandbox import Outcome


@dataclass
class RolloutResult:
    score: float
    status: str
    duration_s: float
    trace: dict = field(default_factory=dict)
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)


class Target(ABC):
    kind: ClassVar[str]

    def __init__(self, config: TargetConfig, benchmark: Benchmark):
        self.config = config
        self.benchmark = benchmark

    #: How candidate code is contained ("bwrap", "process"), known after ``check``; None for a
    #: target that starts no candidate process.
    backend: str | None = None

    def check(self, snapshot: Snapshot) -> None:
        """Startup checks against the seed version (ConfigError: exit 2, nothing started)."""

    #: Modules besides the target's own whose code decides a rollout's outcome (the sandbox,
    #: the jail, the output parser; an agent target adds its model proxy).
    runtime_modules: ClassVar[tuple[str, ...]] = (
        "rsi.sandbox",
        "rsi._sandbox_pump",
        "rsi._sandbox_slots",
        "rsi.jail",
        "rsi.jail_docker",
        "rsi.untrusted",
    )

    def fingerprint(self) -> str:
        """Everything besides the snapshot that decides a rollout's outcome (cache key part):
        the kind, the target config (limits included), the bytes of the module that runs the
        rollout and of its ``runtime_modules``, and the benchmark's own fingerprint (its code,
        data and harness)."""
        import importlib

        files = [inspect.getfile(type(self))]
        for name in self.runtime_modules:
            file = importlib.import_module(name).__file__
            if file is None:  # a namespace package: no code of its own to hash
                raise RsiError(f"runtime module {name} has no source file")
            files.append(file)
        code = hashlib.sha256(b"".join(Path(f).read_bytes() for f in files)).hexdigest()
        body = f"{self.kind}|{self.config.model_dump_json()}|{code}|{self.benchmark.fingerprint()}"
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    @abstractmethod
    def run(self, workdir: Path, task: Task, trial: int, sample_seed: int) -> RolloutResult:
        """Run one task on a materialised checkout of the snapshot at ``workdir``."""

    def run_many(self, workdir: Path, rollouts: list[tuple[Task, int, int]]) -> list[RolloutResult]:
        """Run a batch of ``(task, trial, sample_seed)`` of one snapshot on one checkout, one
        result each, in order. Used for targets that only read their checkout
        (``needs_private_workdir = False``); one may override it to share a sandbox across
        the batch (the policy target runs a batch of inner searches in one jail)."""
        return [self.run(workdir, task, trial, sample_seed) for task, trial, sample_seed in rollouts]


class ProgramTarget(Target):
    """An entry script in a sandboxed subprocess: task JSON on stdin, one JSON object on stdout.

    A benchmark with a ``harness`` (bin packing's skeleton) runs that script instead, with the
    checkout as working directory, so the candidate only supplies the function it evolves.
    """

    kind = "program"
    default_entry: ClassVar[str | None] = None

    def entry(self) -> str | None:
        return self.config.entry or self.default_entry

    @property
    def needs_private_workdir(self) -> bool:
        """A jail (bubblewrap or docker) copies the checkout into its own tmpfs, so it only reads the host
        tree: every rollout of a node can start from the node's one pristine copy, with no copy
        of its own. The weak ``process`` backend runs in the host tree itself: a fresh copy each."""
        from rsi.sandbox import resolve_backend

        return resolve_backend(self.config.limits.backend) == "process"

    def check(self, snapshot: Snapshot) -> None:
        from rsi.sandbox import check_backend

        self.backend = check_backend(self.config.limits.backend)
        if self.benchmark.harness is None:
            entry = self.entry()
            if not entry:
                raise ConfigError("target.entry is required for a program target (the script a rollout runs)")
            if entry not in snapshot.files:
                raise ConfigError(f"target entry script {entry!r} is not in the target directory")

    def argv(self, workdir: Path) -> list[str]:
        if self.benchmark.harness:
            return [sys.executable, str(Path(self.benchmark.harness).resolve())]
        entry = self.entry()
        if not entry:  # ``check`` refuses this before anything runs
            raise ConfigError("target.entry is required for a program target (the script a rollout runs)")
        return [sys.executable, str(workdir / entry)]

    def env(self) -> tuple[dict[str, str], list[str]]:
        return {}, list(self.config.env_pass)

    def run(self, workdir: Path, task: Task, trial: int, sample_seed: int) -> RolloutResult:
        return self.run_program(workdir, task, trial, sample_seed)

    def run_program(
        self, workdir: Path, task: Task, trial: int, sample_seed: int, proxy: ModelProxy | None = None
    ) -> RolloutResult:
        """``proxy``: this rollout's ``rsi.model_proxy.ModelProxy`` (MiniAgentTarget), whose
        environment and socket directory go into the jail."""
        out = self._run_sandboxed(workdir, task, trial, sample_seed, proxy)
        trace: dict[str, Any] = {
            "status": out.status,
            "reason": out.reason,
            "returncode": out.returncode,
            "stderr_tail": out.stderr_tail,
        }
        output = out.output
        if out.status != "ok" or output is None:  # an ok outcome always carries its output
            trace["stdout_tail"] = out.stdout_tail
            return RolloutResult(0.0, out.status, out.duration_s, trace)
        t0 = time.perf_counter()
        try:
            usage = untrusted.usage(output)
        except untrusted.Invalid as exc:  # the candidate's own usage report breaks the protocol
            trace.update(status="protocol_error", reason=str(exc), output=_clip(output))
            return RolloutResult(0.0, "protocol_error", out.duration_s, trace)
        try:
            score = self.benchmark.score(task, output, trial)
            primary = float(score.primary)
            if not math.isfinite(primary):
                raise ValueError(f"primary score is not a finite number ({primary!r})")
            trace["output"] = _clip(output)
            trace["metrics"] = dict(score.metrics)
        except Exception as exc:
            # Scoring runs on hostile output: a scorer that raises on it (which Benchmark.score
            # forbids, but cannot be told apart from a candidate provoking a scorer bug) ends
            # this rollout as an error, with the place it raised, never the whole run.
            trace.update(
                status="error", reason=f"scorer failed: {_where(exc, self.benchmark)}", stdout_tail=out.stdout_tail
            )
            return RolloutResult(0.0, "error", out.duration_s + (time.perf_counter() - t0), trace)
        primary = min(max(primary, 0.0), 1.0)
        # What a candidate says it spent is its own report, kept in the trace. A jailed program
        # has no network, so the spend of a rollout (the row's tokens and cost, which the run's
        # budget counts) is only ever what a model proxy measured (MiniAgentTarget).
        trace["reported_usage"] = {
            "tokens_in": usage.tokens_in,
            "tokens_out": usage.tokens_out,
            "cost_usd": usage.cost_usd,
        }
        return RolloutResult(
            primary, "ok", out.duration_s + (time.perf_counter() - t0), trace, metrics=dict(score.metrics)
        )

    def _run_sandboxed(
        self, workdir: Path, task: Task, trial: int, sample_seed: int, proxy: ModelProxy | None
    ) -> Outcome:
        """The program run once on the task (its payload, or the benchmark's dialogue) under the
        target's limits, with the proxy's environment and socket directory when there is one."""
        from rsi.sandbox import Limits, resolve_backend, run_program

        lim = self.config.limits
        limits = Limits(**lim.model_dump())
        env, passthrough = self.env()
        dialogue = self.benchmark.dialogue(task, trial, sample_seed)
        payload = None if dialogue is not None else self.benchmark.payload(task, trial, sample_seed)
        if proxy is not None:
            env = {**env, **proxy.env(jailed=resolve_backend(limits.backend) != "process")}
        return run_program(
            self.argv(workdir),
            workdir,
            payload,
            limits,
            env_passthrough=passthrough,
            env=env,
            harness=self.benchmark.harness_mounts(),
            dialogue=dialogue,
            binds=proxy.binds if proxy is not None else None,
        )


class MiniAgentTarget(ProgramTarget):
    """A tool-using LLM agent harness run as a subprocess per task (``runtime/main.py``).

    Its model is the target's own (``target.model``), reached only through a model proxy
    started for each rollout (``rsi.model_proxy``): the jail gets the proxy's socket and a
    per-rollout token, never the key. The rollout's tokens and cost are the proxy's count (the
    ``usage`` the harness prints is only its own report), for every status, and the proxy caps
    them per rollout (``rollout_max_*`` of the model block).
    """

    kind = "miniagent"
    default_entry = "runtime/main.py"
    # the proxy, the model settings a rollout gets (``rsi.llm``: its environment, its pricing)
    # and the local server that answers provider ``local``
    runtime_modules = (
        *ProgramTarget.runtime_modules,
        "rsi.model_proxy",
        "rsi.llm",
        "rsi.llm.config",
        "rsi.local_server",
    )

    def llm(self):
        from rsi.llm import LLMConfig

        return LLMConfig.model_validate(self.config.model) if self.config.model else None

    def check(self, snapshot: Snapshot) -> None:
        super().check(snapshot)
        cfg = self.llm()
        if cfg is not None and cfg.api_key_env and cfg.api_key_env in self.config.env_pass:
            raise ConfigError(
                f"target.env_pass names {cfg.api_key_env}, the model's key: a miniagent rollout "
                "reaches its model through the model proxy and must never hold the key"
            )

    def run(self, workdir: Path, task: Task, trial: int, sample_seed: int) -> RolloutResult:
        cfg = self.llm()
        if cfg is None:
            return super().run(workdir, task, trial, sample_seed)
        from rsi.model_proxy import ModelProxy

        with ModelProxy(cfg) as proxy:
            result = self.run_program(workdir, task, trial, sample_seed, proxy=proxy)
        spent = proxy.usage()  # calls still in flight when the rollout ended count at their estimate
        result.tokens_in, result.tokens_out, result.cost_usd = spent.tokens_in, spent.tokens_out, spent.cost_usd
        result.trace["model_usage"] = spent.as_dict()
        return result


def _where(exc: BaseException, benchmark: Benchmark) -> str:
    """``Type: message (file:line)``, the line being the innermost frame in the benchmark's own
    package (else the innermost frame): where a scorer raised, for the rollout's trace."""
    frames = traceback.extract_tb(exc.__traceback__)
    home = benchmark.scorer_home()
    own = [f for f in frames if home and (f.filename == home or str(Path(f.filename).resolve()).startswith(home + "/"))]
    found = own or frames
    frame = found[-1] if found else None
    message = " ".join(str(exc).split())[:300]
    where = f" ({frame.filename}:{frame.lineno})" if frame is not None else ""
    return f"{type(exc).__name__}: {message}{where}"


def _clip(obj: Any, limit: int = 20000) -> Any:
    """Keep traces bounded: a 5000-item assignment is evidence enough as its first few KB."""
    import json

    text = json.dumps(obj, default=str)
    return obj if len(text) <= limit else {"truncated": text[:limit]}
