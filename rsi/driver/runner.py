"""The outer driver: config -> validated parts -> run directory -> Ray -> algorithm -> test.

Everything that can be wrong with the input is checked in ``prepare`` before a run directory,
a Ray start or a model call exists (ConfigError: the CLI prints one line and exits 2).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rsi.algorithm import RunContext
from rsi.benchmark import Benchmark
from rsi.config import Resolved, load_config
from rsi.errors import ConfigError
from rsi.progress import log, phase, reset_status, status
from rsi.records import RunRecords
from rsi.registry import target_class
from rsi.results import ScoreMatrix, metric_means
from rsi.snapshot import Snapshot
from rsi.target import Target


@dataclass
class Prepared:
    config: Resolved
    benchmark: Benchmark
    target: Target
    seed: Snapshot


def prepare(resolved: Resolved) -> Prepared:
    """All checks, no side effects."""
    run = resolved.run
    target_dir = resolved.target_dir()
    if not target_dir.is_dir():
        raise ConfigError(f"target.path: directory {target_dir} does not exist")
    seed = Snapshot.from_dir(target_dir, secrets=resolved.secrets())
    check_scope(seed, run.target.evolve_scope, resolved.worker_cfg is not None)
    from rsi.registry import benchmark_class

    benchmark = benchmark_class(resolved.bench_params.name)(resolved.bench_params, base_dir=resolved.base_dir)
    for split in ("train", "dev", "test"):
        benchmark.split(split)  # duplicate ids, bad files: raise now
    resolved.algo_cls.check_benchmark(benchmark, resolved.algo_params)
    if run.tracker == "tensorboard" and "://" in resolved.storage():
        raise ConfigError(
            "tracker: tensorboard writes event files beside a local run directory; with object "
            "storage, export afterwards with `rsi report RUN_DIR --tensorboard DIR`"
        )
    target = target_class(run.target.kind)(run.target, benchmark)
    target.check(seed)
    if resolved.worker_cfg is not None:
        from rsi.workers import worker_class

        worker_class(resolved.worker_cfg.type)(resolved.worker_cfg, base_dir=resolved.base_dir, seed=run.seed)
    return Prepared(resolved, benchmark, target, seed)


#: The run directory's layout version (``run.json``). 2: rollout rows carry the target
#: fingerprint, and run.json records it with provenance. Runs without it are version 1.
SCHEMA_VERSION = 2


def provenance(base_dir: Path) -> dict:
    """What produced a run: package versions, the config's git commit (when it is in a
    repository), and the machine. For the reader of a run directory, never for a decision."""
    import importlib.metadata as md
    import platform
    import subprocess

    versions: dict[str, str | None] = {}
    for pkg in ("rsi", "ray", "pyarrow", "numpy", "pydantic"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    try:
        commit = (
            subprocess.run(
                ["git", "-C", str(base_dir), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.TimeoutExpired):
        commit = None
    return {
        "versions": versions,
        "python": platform.python_version(),
        "git_commit": commit,
        "machine": {"node": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count()},
    }


def check_scope(seed: Snapshot, scope, has_worker: bool) -> None:
    """The evolve scope names real components and holds something a worker can change."""
    try:
        names = seed.components.resolve_scope(scope)
    except ConfigError as exc:
        raise ConfigError(f"target.evolve_scope: {exc}") from None
    if has_worker and not any(e.component in names for e in seed.files.values()):
        raise ConfigError(
            f"target.evolve_scope {sorted(names)}: no file of the target is in these components, "
            f"so no edit could ever be committed"
        )


def keep_sources(records: RunRecords, benchmark: Benchmark) -> dict[str, str]:
    """A copy of the user's problem code in the run directory (``problem/``) -> name: sha256."""
    import hashlib

    digests = {}
    for name, data in benchmark.source_files().items():
        records.write_bytes(f"problem/{name}", data)
        digests[name] = hashlib.sha256(data).hexdigest()
    return digests


def start_run(config_path: str, overrides=(), run_dir: str | None = None) -> Run:
    prepared = prepare(load_config(config_path, overrides))
    run = prepared.config.run
    records = RunRecords.create(prepared.config.storage(), run.name, run_dir)
    records.write_config(prepared.config.redacted())
    records.write_json(
        "run.json",
        {
            "schema_version": SCHEMA_VERSION,
            "base_dir": str(prepared.config.base_dir),
            "seed_snapshot_id": prepared.seed.snapshot_id,
            "config_path": str(Path(config_path).resolve()),
            "fingerprint": prepared.target.fingerprint(),
            "jail": prepared.target.backend,
            "provenance": provenance(prepared.config.base_dir),
            "problem_files": keep_sources(records, prepared.benchmark),
        },
    )
    records.put_snapshot(prepared.seed)
    return Run(prepared, records)


class Run:
    def __init__(self, prepared: Prepared, records: RunRecords, resume_state: dict | None = None):
        self.p = prepared
        self.records = records
        self.run_id = records.uri.rstrip("/").rsplit("/", 1)[-1]
        self.resume_state = resume_state

    def execute(self) -> dict:
        with contextlib.ExitStack() as stack:
            self._track(stack)
            return self._execute(self._served_target(stack))

    def _track(self, stack: contextlib.ExitStack) -> None:
        """``tracker: tensorboard``: every decision's figures go to TensorBoard as it is made."""
        if self.p.config.run.tracker != "tensorboard":
            return
        from rsi.reporting.tensorboard import EventWriter

        writer = stack.enter_context(EventWriter(self.records.local_path() / "tensorboard"))
        self.records.decision_listeners.append(writer.decision)
        log(f"tensorboard: tensorboard --logdir {self.records.local_path() / 'tensorboard'}")

    def _served_target(self, stack: contextlib.ExitStack):
        """A target whose own model is ``provider: local`` gets a model server on this machine
        for the length of the run (its rollouts must then run here too: ``ray.address: local``)."""
        model = self.p.config.run.target.model
        if not model or model.get("provider") != "local" or model.get("base_url"):
            return self.p.target
        from rsi.llm import LLMConfig, serve

        served = stack.enter_context(serve(LLMConfig.model_validate(model), self.p.config.base_dir))
        log(f"local model server for the target: {served.base_url}")
        tcfg = self.p.config.run.target.model_copy(update={"model": served.model_dump(exclude_none=True)})
        return target_class(tcfg.kind)(tcfg, self.p.benchmark)

    def _execute(self, target) -> dict:
        from actors.client import EvaluatorClient
        from cluster.connect import connect

        cfg = self.p.config
        log(f"run directory: {self.records.uri}")
        if self.p.target.backend == "process":
            log(
                "WARNING: target.limits.backend is process: candidate code runs UNCONTAINED (rlimits and a "
                "scrubbed environment only; it can read files and reach the network)"
            )
        t0 = time.monotonic()
        reset_status(getattr(cfg.algo_params, "max_steps", None))
        where = (
            "starting a local Ray" if cfg.run.ray.address == "local" else f"connecting to Ray at {cfg.run.ray.address}"
        )
        phase(where)
        startup: list[bytes] = []
        status.dashboard = connect(cfg.run.ray, startup)
        if any(startup):
            self.records.write_bytes("logs/ray-startup.log", b"".join(startup))
        if status.dashboard:
            log(f"Ray dashboard: {status.dashboard}")
        phase("starting the evaluator")
        evaluator = EvaluatorClient.start(
            self.run_id,
            target,
            cfg.run.evaluator,
            cfg.run.seed,
            cfg.run.target.deterministic,
            self.records,
            fingerprint=self.p.target.fingerprint(),
        )
        algo, archive = self._algorithm(evaluator)
        if self.resume_state is not None:
            self._restore(algo, evaluator, archive, self.resume_state)
        promoted = algo.run()
        return self._finish(algo, evaluator, promoted, t0)

    def _algorithm(self, evaluator) -> tuple:
        """The configured algorithm on its run context (the worker pool, if the config names a
        worker, and the archive actor are started here), and the archive."""
        cfg = self.p.config
        state = self.resume_state or {}
        workers = None
        if cfg.worker_cfg is not None:
            from actors.worker_pool import WorkerPool

            workers = WorkerPool(cfg.worker_cfg, cfg.base_dir, cfg.run.seed, state.get("worker_states"))
        from actors.archive import ArchiveClient

        archive = ArchiveClient(self.records.uri, self.run_id)
        ctx = RunContext(
            config=cfg,
            records=self.records,
            evaluator=evaluator,
            benchmark=self.p.benchmark,
            seed_snapshot=self.p.seed,
            archive=archive,
            workers=workers,
            secrets=cfg.secrets(),
            run_id=self.run_id,
        )
        return cfg.algo_cls(ctx, cfg.algo_params), archive

    def _restore(self, algo, evaluator, archive, state: dict) -> None:
        """Resume: stored rollouts back into the evaluator's cache, decisions and archive cut to
        the saved state, and the algorithm's own state loaded."""
        loaded = evaluator.preload(self.records.rollouts())
        self.records.truncate_decisions(state.get("decisions", 0))
        archive.truncate(len(state.get("archive", [])))
        if state:
            algo.load_state(state)
        stale = (
            f"; {loaded['stale']} measured under another target fingerprint (or none) run again"
            if loaded["stale"]
            else ""
        )
        log(f"resume: continuing after step {state.get('step', 0)}; {loaded['cached']} stored rollouts reusable{stale}")

    def _finish(self, algo, evaluator, promoted: Snapshot, t0: float) -> dict:
        """The promoted snapshot stored and measured once on test, and ``summary.json``."""
        self.records.put_snapshot(promoted)
        test = None
        if evaluator.split_ids("test"):
            test = evaluator.evaluate(promoted, "test", trials=1, salt="final-test", label="test")
            algo.record_test(promoted, test)
        extra = algo.after_test(promoted, test) if test is not None else None
        summary = self.summary(promoted, test, evaluator.stats(), time.monotonic() - t0)
        summary["usage"] = algo.usage()
        if extra:
            summary["algorithm_report"] = extra
        self.records.write_json("summary.json", summary)
        return summary

    def summary(self, promoted: Snapshot, test: pa.Table | None, stats: dict, elapsed: float) -> dict:
        rows = self.records.rollouts()
        rows = rows.filter(pc.equal(rows["fingerprint"], self.p.target.fingerprint()))  # this target's rows only
        means, metrics = {}, {}
        for split in ("train", "dev", "test"):
            mask = np.array(
                [
                    (s == promoted.snapshot_id and sp == split)
                    for s, sp in zip(rows["snapshot_id"].to_pylist(), rows["split"].to_pylist())
                ],
                bool,
            )
            if mask.any():
                mine = rows.filter(pa.array(mask))
                means[split] = ScoreMatrix.from_table(mine).mean()
                if named := metric_means(mine):
                    metrics[split] = named
        report = self.p.benchmark.report(test, "test") if test is not None else []
        return {
            "run_dir": self.records.uri,
            "snapshot_id": promoted.snapshot_id,
            "seed_snapshot_id": self.p.seed.snapshot_id,
            "algorithm": self.p.config.algo_params.name,
            "means": means,
            "metrics": metrics,
            "test_report": report,
            "rollouts": {"executed": stats.get("executed", 0), "cache_hits": stats.get("cache_hits", 0)},
            "elapsed_s": round(elapsed, 2),
        }
