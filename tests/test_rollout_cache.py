"""The rollout cache keys what it claims: ``(snapshot, task, sample_seed, target fingerprint)``.

A stored row is reused only under the fingerprint it was measured with (the benchmark's code and
data, the harness, the target's kind and limits); rows of another fingerprint, or of none (runs
from before rows carried it), run again. Resume of a run whose benchmark changed is refused with
exit 2 unless ``--allow-changed`` asks for the re-execution.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from actors.client import EvaluatorClient
from benchmarks.table import TableBenchmark, TableParams
from rsi.config import EvaluatorConfig, TargetConfig
from rsi.driver.cli import main
from rsi.records import RunRecords
from rsi.snapshot import Snapshot
from rsi.target import ProgramTarget

REPO = Path(__file__).resolve().parents[1]
TRAIN = ["t1", "t2", "t3"]


def table_text(score: float) -> str:
    return yaml.safe_dump({"splits": {"train": TRAIN, "dev": [], "test": ["x1"]},
                           "scores": {"v0": {**{t: score for t in TRAIN}, "x1": score}}})


def target_on(tmp_path: Path, score: float, **limits) -> ProgramTarget:
    (tmp_path / "table.yaml").write_text(table_text(score))
    bench = TableBenchmark(TableParams(name="table", path="table.yaml"), base_dir=tmp_path)
    cfg = TargetConfig(path="target", kind="program", entry="solve.py", deterministic=True,
                       limits={"timeout_s": 30, **limits})
    return ProgramTarget(cfg, bench)


def measure(target, records, snapshot, stored: pa.Table | None = None):
    client = EvaluatorClient.start("cache", target, EvaluatorConfig(), 0, True, records)
    loaded = client.preload(stored) if stored is not None else None
    table = client.evaluate(snapshot, "train", trials=1, salt="s")
    return table, client.stats(), loaded


@pytest.fixture
def seed(tmp_path) -> Snapshot:
    shutil.copytree(REPO / "targets" / "table_demo", tmp_path / "target")
    return Snapshot.from_dir(tmp_path / "target")


def test_preload_reuses_every_row_of_the_same_fingerprint(tmp_path, seed, ray_session):
    records = RunRecords.create(str(tmp_path / "runs"), "c", str(tmp_path / "runs" / "a"))
    first, stats, _ = measure(target_on(tmp_path, 0.25), records, seed)
    assert stats["executed"] == 3 and first["score"].to_pylist() == [0.25] * 3
    stored = records.rollouts()
    assert set(stored["fingerprint"].to_pylist()) == {target_on(tmp_path, 0.25).fingerprint()}

    again, stats, loaded = measure(target_on(tmp_path, 0.25), None, seed, stored)
    assert loaded == {"cached": 3, "stale": 0}
    assert stats["executed"] == 0 and stats["cache_hits"] == 3
    assert again["score"].to_pylist() == [0.25] * 3


def test_rows_of_another_scoring_table_are_never_reused(tmp_path, seed, ray_session):
    records = RunRecords.create(str(tmp_path / "runs"), "c", str(tmp_path / "runs" / "a"))
    measure(target_on(tmp_path, 0.25), records, seed)
    changed = target_on(tmp_path, 1.0)  # same snapshot, same tasks, other scores
    table, stats, loaded = measure(changed, None, seed, records.rollouts())
    assert loaded == {"cached": 0, "stale": 3}
    assert stats["executed"] == 3 and stats["cache_hits"] == 0
    assert table["score"].to_pylist() == [1.0] * 3, "the stale 0.25 rows were reused"


def test_a_changed_limit_or_a_row_without_fingerprint_runs_again(tmp_path, seed, ray_session):
    records = RunRecords.create(str(tmp_path / "runs"), "c", str(tmp_path / "runs" / "a"))
    measure(target_on(tmp_path, 0.25), records, seed)
    stored = records.rollouts()
    assert target_on(tmp_path, 0.25, memory_mb=1024).fingerprint() != target_on(tmp_path, 0.25).fingerprint()
    _, stats, loaded = measure(target_on(tmp_path, 0.25, memory_mb=1024), None, seed, stored)
    assert loaded == {"cached": 0, "stale": 3} and stats["executed"] == 3

    legacy = stored.set_column(stored.schema.get_field_index("fingerprint"), "fingerprint",
                               pa.nulls(stored.num_rows, pa.string()))
    _, stats, loaded = measure(target_on(tmp_path, 0.25), None, seed, legacy)
    assert loaded == {"cached": 0, "stale": 3} and stats["executed"] == 3


def test_fingerprint_covers_benchmark_code_and_harness(tmp_path):
    from rsi.benchmark import _code_digest

    before = target_on(tmp_path, 0.25).fingerprint()
    assert target_on(tmp_path, 0.25).fingerprint() == before, "stable for the same inputs"
    # The suite's own code is part of it: a copy of the package with one byte changed differs.
    pkg = tmp_path / "pkg_a"
    shutil.copytree(REPO / "benchmarks" / "table", pkg / "tablecopy", ignore=shutil.ignore_patterns("__pycache__"))
    import importlib.util
    import sys

    def load(root: Path, name: str):
        spec = importlib.util.spec_from_file_location(name, root / "tablecopy" / "__init__.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod.TableBenchmark

    a = _code_digest(load(pkg, "tablecopy_a"))
    pkg_b = tmp_path / "pkg_b"
    shutil.copytree(pkg, pkg_b)
    with open(pkg_b / "tablecopy" / "__init__.py", "a") as f:
        f.write("\n# scoring changed\n")
    assert _code_digest(load(pkg_b, "tablecopy_b")) != a


def test_code_dependencies_outside_the_package_enter_the_fingerprint(tmp_path):
    """A file the suite names in ``code_dependencies`` is part of the key: the same suite with
    one byte of that file changed gets another fingerprint, also when the file is edited in place
    by a process that already computed the key."""
    from algorithms.meta.benchmark import BinpackSearchBenchmark

    seeds = []
    for name, tail in (("a", ""), ("b", "\n# the operator changed\n")):
        copy = tmp_path / name / "binpack_bestfit"
        shutil.copytree(REPO / "targets" / "binpack_bestfit", copy)
        with open(copy / "heuristic.py", "a") as f:
            f.write(tail)
        seeds.append(copy)

    def fingerprint(dependency: Path) -> str:
        suite = type("Suite", (BinpackSearchBenchmark,), {"code_dependencies": (dependency,)})
        return suite(BinpackSearchBenchmark.Params(name="meta_binpack")).fingerprint()

    assert fingerprint(seeds[0]) == fingerprint(REPO / "targets" / "binpack_bestfit"), "a copy hashes as its original"
    assert fingerprint(seeds[1]) != fingerprint(seeds[0])
    assert fingerprint(seeds[1] / "heuristic.py") != fingerprint(seeds[0] / "heuristic.py"), "a single file too"
    before = fingerprint(seeds[0])
    with open(seeds[0] / "probe.json", "a") as f:  # an edit in place, in the same process
        f.write(" ")
    assert fingerprint(seeds[0]) != before


def test_meta_binpack_fingerprint_holds_what_an_inner_search_runs():
    """A stage-1 reward depends on the mutator that expands a node, the program the search starts
    from, the recorded calls its probe ranks, and the instances and skeleton that pack a node:
    every one lies in the suite's package or in its ``code_dependencies``."""
    import inspect

    import algorithms.meta.benchmark as meta
    import benchmarks.binpack.instances
    import benchmarks.binpack.lockstep
    import benchmarks.binpack.online
    import rsi.workers._merge
    import rsi.workers._mutations
    import rsi.workers._probe
    import rsi.workers._pyedit
    import rsi.workers.mutator
    from algorithms.meta.binpack import RECORDED_CALLS, SEED_PROGRAM

    held = [
        Path(inspect.getfile(meta)).parent,
        *(Path(d).resolve() for d in meta.BinpackSearchBenchmark.code_dependencies),
    ]
    modules = (rsi.workers.mutator, rsi.workers._mutations, rsi.workers._probe, rsi.workers._pyedit, rsi.workers._merge,
               benchmarks.binpack.instances, benchmarks.binpack.lockstep, benchmarks.binpack.online)  # fmt: skip
    used = [Path(inspect.getfile(m)).resolve() for m in modules] + [SEED_PROGRAM, *RECORDED_CALLS.values()]
    used.append(REPO / "rsi" / "workers" / "probe_harness.py")  # run as a script in the jail, never imported
    missing = [str(p) for p in used if not any(p == h or h in p.parents for h in held)]
    assert not missing


def rsi_imports(module: str) -> set[str]:
    """The ``rsi`` modules that ``module``'s source imports anywhere (function bodies included)."""
    import importlib.util

    from test_layers import imports

    return {m for m in imports(Path(importlib.util.find_spec(module).origin)) if m.startswith("rsi.")}


# Modules a rollout's code imports that cannot change its outcome: exception classes, and a
# worker's chat clients (``rsi.llm`` imports them; a rollout's model calls go through the proxy).
OUTCOME_NEUTRAL = {"rsi.errors", "rsi.llm.client", "rsi.llm.openai_client", "rsi.llm.anthropic_client",
                   "rsi.llm.local_client"}


@pytest.mark.parametrize("kind", ["program", "miniagent"])
def test_the_fingerprint_hashes_every_module_a_rollout_runs(kind):
    """A rollout's cached row is reused while the fingerprint stays the same, so every module of
    ours that runs it must be hashed: the sandbox split into parts, say, must not leave a part
    whose change would keep serving old rows."""
    from rsi.target import MiniAgentTarget

    cls = {"program": ProgramTarget, "miniagent": MiniAgentTarget}[kind]
    hashed = set(cls.runtime_modules)
    reached, todo = set(), list(hashed)
    while todo:
        module = todo.pop()
        for found in rsi_imports(module) - reached - OUTCOME_NEUTRAL:
            reached.add(found)
            todo.append(found)
    assert reached - hashed == set()


# ---- resume, end to end through the CLI ---------------------------------------------------
def finished_run(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "targets" / "table_demo", tmp_path / "target", dirs_exist_ok=True)
    (tmp_path / "table.yaml").write_text(table_text(0.25))
    cfg = {"name": "ev", "seed": 1, "storage": str(tmp_path / "runs"),
           "target": {"path": "target", "kind": "program", "entry": "solve.py", "deterministic": True},
           "benchmark": {"name": "table", "path": "table.yaml"}, "algorithm": {"name": "evaluate"}}
    (tmp_path / "ev.yaml").write_text(yaml.safe_dump(cfg))
    run_dir = tmp_path / "runs" / "ev"
    assert main(["run", str(tmp_path / "ev.yaml"), "--run-dir", str(run_dir)]) == 0
    # As if killed before its first checkpoint: resume re-decides every decision from the start,
    # asking for every measurement again (train, then test).
    (run_dir / "summary.json").unlink()
    (run_dir / "state" / "latest.json.gz").unlink()
    return run_dir


def test_resume_unchanged_executes_nothing(tmp_path, ray_session):
    run_dir = finished_run(tmp_path)
    stored = RunRecords.open(str(run_dir)).rollouts().num_rows
    assert main(["resume", str(run_dir)]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rollouts"] == {"executed": 0, "cache_hits": stored}


def test_resume_after_the_benchmark_changed_is_refused_then_reexecutes_with_the_flag(tmp_path, ray_session,
                                                                                      capsys):
    run_dir = finished_run(tmp_path)
    stored = RunRecords.open(str(run_dir)).rollouts().num_rows
    (tmp_path / "table.yaml").write_text(table_text(1.0))
    capsys.readouterr()
    assert main(["resume", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "changed since this run started" in err and "--allow-changed" in err
    assert not (run_dir / "summary.json").exists()

    assert main(["resume", str(run_dir), "--allow-changed"]) == 0
    out = capsys.readouterr().out
    assert f"{stored} measured under another target fingerprint (or none) run again" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rollouts"] == {"executed": stored, "cache_hits": 0}
    assert summary["means"] == {"train": 1.0, "test": 1.0}, "the summary reads only rows of the new fingerprint"
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["fingerprint_history"] and meta["fingerprint"] != meta["fingerprint_history"][0]
    assert meta["schema_version"] == 2 and meta["provenance"]["versions"]["pyarrow"] == pa.__version__
