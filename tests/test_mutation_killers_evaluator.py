"""The rollout cache and resume preload, in this process: the Evaluator's bookkeeping without a
Ray actor around it, and the Results table and its reductions.

``Evaluator`` is a Ray actor class; ``Evaluator.__ray_actor_class__`` is the plain class under it.
Its ``__init__`` and ``_run`` need a live Ray (``ray.put``, remote tasks) and are covered by
test_evaluator.py and test_rollout_cache.py; every other method is plain Python and is called
here on an instance given the state ``__init__`` builds. ``evaluate`` stays in process as long as
every rollout it is asked for is a cache hit (``_run`` returns at once on nothing to do).
``perf/mutation.py evaluator-cache`` mutates these with this file as its test selection.
"""

from __future__ import annotations

import itertools
import math
import shutil
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from actors.evaluator import Evaluator, _Progress, sample_seed
from rsi.benchmark import Benchmark, Score, Task
from rsi.config import EvaluatorConfig
from rsi.results import (
    SCHEMA,
    Request,
    ScoreMatrix,
    concat,
    empty_table,
    metric_means,
    per_dataset_means,
    rows_to_table,
)
from rsi.snapshot import Snapshot

REPO = Path(__file__).resolve().parents[1]
Plain = Evaluator.__ray_actor_class__


class Suite(Benchmark):
    """Three train tasks in two datasets, one test task."""

    name = "suite"

    def _split(self, split):
        if split == "train":
            return [Task("t1", 1, {"dataset": "A"}), Task("t2", 2, {"dataset": "B"}), Task("t3", 3, {"dataset": "A"})]
        return [Task("x1", 0)] if split == "test" else []

    def score(self, task, output, trial):
        return Score(0.0)


SUITE = Suite(Suite.Params(name="suite"))


def evaluator(fingerprint: str = "fp", *, deterministic: bool = False, run_seed: int = 7,
              config: EvaluatorConfig | None = None, cpus: int = 2, batch_hint: int | None = None):
    """An Evaluator in the state ``__init__`` leaves it, less the two Ray object refs."""
    ev = object.__new__(Plain)
    ev.run_id, ev.fingerprint, ev.config = "run", fingerprint, config or EvaluatorConfig()
    ev.run_seed, ev.deterministic = run_seed, deterministic
    ev.tasks = {s: {t.task_id: t for t in SUITE.split(s)} for s in ("train", "dev", "test")}
    ev.cache, ev.chunks, ev.lock, ev.progress_by_req, ev.req_ids = {}, [], threading.Lock(), {}, itertools.count()
    ev.executed, ev.cache_hits, ev.cpus, ev.batch_hint = 0, 0, cpus, batch_hint
    return ev


def row(task_id: str, seed: int, fingerprint: str | None = "fp", snapshot_id: str = "s1", **kw) -> dict:
    return {**{n: None for n in SCHEMA.names}, "run_id": "old", "snapshot_id": snapshot_id, "split": "train",
            "task_id": task_id, "trial": 0,
            "sample_seed": seed, "score": 0.5, "status": "ok", "duration_s": 0.25, "tokens_in": 3,
            "tokens_out": 4, "cost_usd": 0.01, "trace_ref": "traces/a.jsonl.gz#0", "fingerprint": fingerprint,
            **kw}


@pytest.fixture(scope="module")
def snap(tmp_path_factory) -> Snapshot:
    root = tmp_path_factory.mktemp("snap") / "target"
    shutil.copytree(REPO / "targets" / "table_demo", root)
    return Snapshot.from_dir(root)


# ---- cache keys ----------------------------------------------------------------------------------
def test_sample_seed_is_the_first_7_bytes_of_a_sha256_of_the_key():
    # recorded: sha256("7|s|t1|0")[:7] big-endian; a change re-runs every stored rollout on resume
    assert sample_seed(7, "s", "t1", 0) == 21956345013131166
    assert sample_seed(7, "s", "t1", 1) == 71756850189817259
    assert sample_seed(0, "", "a", 0) == 35552153051389154
    assert all(0 <= sample_seed(1, "x", f"t{i}", i) < 2**56 for i in range(20))


def test_specs_are_trial_major_with_seeds_from_the_run_salt_task_and_trial():
    ev = evaluator()
    specs = ev._specs(Request(None, "train", trials=2, salt="s"))
    assert [(s.task_id, s.trial, s.sample_seed) for s in specs] == [
        (t, k, sample_seed(7, "s", t, k)) for k in (0, 1) for t in ("t1", "t2", "t3")]
    assert [(s.task_id, s.trial) for s in ev._specs(Request(None, "train", task_ids=["t3", "t1"]))] == \
        [("t3", 0), ("t1", 0)]
    det = evaluator(deterministic=True)._specs(Request(None, "train", task_ids=["t2"], trials=3, salt="s"))
    assert [(s.task_id, s.trial, s.sample_seed) for s in det] == [("t2", 0, 0), ("t2", 1, 1), ("t2", 2, 2)]
    assert evaluator()._specs(Request(None, "dev")) == []
    assert ev.split_ids("train") == ["t1", "t2", "t3"] and ev.split_ids("test") == ["x1"]


def test_tasks_outside_the_split_are_refused_naming_three():
    with pytest.raises(ValueError) as exc:
        evaluator()._specs(Request(None, "train", task_ids=["t1", "x1", "zz", "yy", "ww"]))
    assert str(exc.value) == "tasks ['x1', 'zz', 'yy'] are not in split train"


# ---- resume preload ------------------------------------------------------------------------------
def test_preload_trusts_only_rows_of_this_fingerprint_and_keys_them_fully():
    ev = evaluator("fp")
    stored = rows_to_table([row("t1", 11), row("t2", 12, score=1.0), row("t1", 11, fingerprint="other"),
                            row("t3", 13, fingerprint=None), row("t1", 11, snapshot_id="s2", score=0.25)])
    assert ev.preload(stored) == {"cached": 3, "stale": 2}
    assert set(ev.cache) == {("s1", "t1", 11, "fp"), ("s1", "t2", 12, "fp"), ("s2", "t1", 11, "fp")}
    assert ev.cached_row(("s1", "t2", 12, "fp")) == row("t2", 12, score=1.0)
    assert ev.cached_row(("s2", "t1", 11, "fp"))["score"] == 0.25
    assert ev.cached_row(("s1", "t1", 11, "other")) is None
    assert len(ev.chunks) == 1 and ev.chunks[0].num_rows == 3, "stored once, as Arrow"
    assert ev.stats() == {"executed": 0, "cache_hits": 0, "cached_rows": 3}
    assert evaluator("fp").preload(empty_table()) == {"cached": 0, "stale": 0}


def test_evaluate_answers_from_the_cache_in_request_order_with_the_requests_split_and_trial(snap):
    ev = evaluator("fp")
    seeds = {(t, k): sample_seed(7, "salt", t, k) for t in ("t1", "t2", "t3") for k in (0, 1)}
    # stored in another order, under another split and trial: the request decides both
    stored = [row(t, seeds[t, k], snapshot_id=snap.snapshot_id, split="dev", trial=9, score=0.1 * i)
              for i, (t, k) in enumerate(sorted(seeds, reverse=True))]
    ev.preload(rows_to_table(stored))
    table, fresh, traces = ev.evaluate(Request(snap, "train", trials=2, salt="salt"))
    assert fresh.to_pylist() == [False] * 6 and traces == []
    assert table.schema == SCHEMA
    got = [(r["task_id"], r["trial"], r["split"], r["sample_seed"], r["score"]) for r in table.to_pylist()]
    order = sorted(seeds, reverse=True)
    assert got == [(t, k, "train", seeds[t, k], 0.1 * order.index((t, k))) for k in (0, 1) for t in ("t1", "t2", "t3")]
    assert ev.stats() == {"executed": 0, "cache_hits": 6, "cached_rows": 6}
    assert ev.progress() == {"done": 0, "total": 0, "executed": 0, "cache_hits": 6}, "nothing left in flight"
    # the same again counts again; a subset answers only what it asks
    sub, _, _ = ev.evaluate(Request(snap, "train", task_ids=["t3"], trials=1, salt="salt"))
    assert sub["task_id"].to_pylist() == ["t3"] and sub["sample_seed"].to_pylist() == [seeds["t3", 0]]
    assert ev.stats()["cache_hits"] == 7
    empty, _, _ = ev.evaluate(Request(snap, "dev", salt="salt"))
    assert empty.num_rows == 0 and empty.schema == SCHEMA


def test_progress_sums_the_requests_in_flight():
    ev = evaluator()
    ev.progress_by_req = {0: _Progress(total=6, done=2), 3: _Progress(total=4, done=4)}
    ev.executed, ev.cache_hits = 5, 1
    assert ev.progress() == {"done": 6, "total": 10, "executed": 5, "cache_hits": 1}


# ---- batch sizes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n, cpus, num_cpus, expected", [
    (100, 2, 1.0, 8),   # ceil(100 / (2 * 4)) = 13, at most 8
    (20, 2, 1.0, 3),    # ceil(20 / 8)
    (16, 2, 1.0, 2),    # exactly 2 per slot quarter
    (17, 2, 1.0, 3),
    (1, 2, 1.0, 1),
    (0, 2, 1.0, 1),     # never 0
    (20, 2, 0.5, 3),    # the CPU-bound rule whatever the fraction (_plan decides model-bound work)
    (64, 1, 1.0, 8),    # ceil(64 / 4) = 16, at most 8
    (12, 3, 1.0, 1),    # ceil(12 / 12)
    (13, 3, 1.0, 2),
])
def test_automatic_batch_size(n, cpus, num_cpus, expected):
    assert evaluator(cpus=cpus, config=EvaluatorConfig(num_cpus=num_cpus))._batch_size(n) == expected


@pytest.mark.parametrize("n, cpus, hint, expected", [
    (10, 2, 3, 3),     # 5 per CPU in batches of at most 3: 2 batches of 3 (ceil(5 / 2))
    (12, 2, 3, 3),     # 6 per CPU: 2 batches of 3
    (14, 2, 3, 3),     # 7 per CPU: 3 batches, ceil(7 / 3) = 3
    (8, 2, 4, 4),      # 4 per CPU: one batch of 4
    (9, 2, 4, 3),      # 5 per CPU: 2 batches, ceil(5 / 2) = 3
    (100, 4, 1000, 25),
    (1, 4, 10, 1),   # (n = 0 never gets here: _run returns first; it would divide by zero)
])
def test_batch_size_from_a_targets_hint_splits_each_cpus_share_evenly(n, cpus, hint, expected):
    assert evaluator(cpus=cpus, batch_hint=hint)._batch_size(n) == expected


@pytest.mark.parametrize("n, cpus, cap, batch_size, plan", [
    (400, 2, 64, None, (16, 16, 4)),   # two tasks per CPU share the 64 lanes: 4 x 16 in flight
    (400, 2, None, None, (100, 100, 4)),  # no cap: everything at once, still 4 Ray tasks
    (6, 2, 3, 1, (1, 1, 3)),          # a configured batch of 1: the cap counts tasks
    (8, 2, 2, 2, (2, 2, 1)),          # batches of 2 run at once: one task in flight
    (10, 2, 3, 8, (8, 3, 1)),         # a batch larger than the cap runs the cap's lanes
    (5, 1, 64, None, (3, 3, 2)),      # the cap does not bind: both tasks at once
    (100, 2, 10, None, (3, 3, 3)),    # 10 lanes in tasks of 3: 9 in flight, never 12
    (0, 2, None, None, (1, 1, 1)),
])
def test_model_bound_plan_overlaps_waits_within_the_cap(n, cpus, cap, batch_size, plan):
    config = EvaluatorConfig(num_cpus=0, max_concurrency=cap, batch_size=batch_size)
    got = evaluator(cpus=cpus, config=config)._plan(n)
    assert (got.size, got.threads, got.in_flight) == plan
    if n:
        assert got.threads * got.in_flight <= (cap or n), "never more rollouts in flight than the cap"


@pytest.mark.parametrize("n, cap, plan", [(100, None, (8, 1, 13)), (100, 4, (8, 1, 4)), (3, None, (1, 1, 3))])
def test_cpu_bound_plan_runs_one_rollout_per_task_and_caps_tasks(n, cap, plan):
    got = evaluator(cpus=2, config=EvaluatorConfig(num_cpus=1, max_concurrency=cap))._plan(n)
    assert (got.size, got.threads, got.in_flight) == plan


def test_a_configured_batch_size_wins():
    assert evaluator(config=EvaluatorConfig(batch_size=5), batch_hint=2)._batch_size(100) == 5


# ---- the Results table ---------------------------------------------------------------------------
def test_rows_to_table_fills_missing_columns_with_nulls_in_schema_order():
    t = rows_to_table([{"task_id": "a", "score": 0.5, "unknown": 1}, {"task_id": "b", "trial": 2}])
    assert t.schema == SCHEMA and t.num_rows == 2
    assert t.to_pylist()[0] == {**{n: None for n in SCHEMA.names}, "task_id": "a", "score": 0.5}
    assert t["trial"].to_pylist() == [None, 2]
    assert rows_to_table([]).schema == SCHEMA and rows_to_table([]).num_rows == 0


def test_empty_table_and_concat():
    assert empty_table().schema == SCHEMA and empty_table().num_rows == 0
    a, b = rows_to_table([row("t1", 1)]), rows_to_table([row("t2", 2), row("t3", 3)])
    both = concat([a, None, b])
    assert both["task_id"].to_pylist() == ["t1", "t2", "t3"] and both.schema == SCHEMA
    none = concat([None, None])
    assert none.num_rows == 0 and none.schema == SCHEMA
    assert concat(iter([a])).num_rows == 1


def scores_table(cells) -> pa.Table:
    return rows_to_table([{"task_id": t, "trial": k, "score": s} for t, k, s in cells])


def test_score_matrix_is_tasks_by_trials_with_nan_for_missing():
    m = ScoreMatrix.from_table(scores_table([("b", 1, 0.5), ("a", 0, 1.0), ("b", 0, 0.25), ("c", 2, 0.75)]))
    assert m.task_ids == ["a", "b", "c"]
    np.testing.assert_array_equal(m.scores, [[1.0, np.nan, np.nan], [0.25, 0.5, np.nan], [np.nan, np.nan, 0.75]])
    chosen = ScoreMatrix.from_table(scores_table([("b", 0, 0.5), ("a", 1, 1.0)]), task_ids=["b", "z"])
    assert chosen.task_ids == ["b", "z"]
    np.testing.assert_array_equal(chosen.scores, [[0.5, np.nan], [np.nan, np.nan]])  # "a" is not asked for
    empty = ScoreMatrix.from_table(empty_table())
    assert empty.task_ids == [] and empty.scores.shape == (0, 0)


def test_avg_at_k_is_the_mean_over_trials_never_the_best_and_zero_for_no_trials():
    m = ScoreMatrix.from_table(scores_table([("a", 0, 1.0), ("a", 1, 0.0), ("a", 2, 0.5), ("b", 1, 0.25)]),
                               task_ids=["a", "b", "c"])
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        means = m.avg_at_k()  # "c" has no trial at all: NaN, reported as 0
    assert means == {"a": 0.5, "b": 0.25, "c": 0.0}
    with pytest.warns(RuntimeWarning):
        assert m.mean() == 0.25
    none = ScoreMatrix.from_table(empty_table(), task_ids=["a", "b"])
    assert none.scores.shape == (2, 0)
    assert none.avg_at_k() == {"a": 0.0, "b": 0.0} and none.mean() == 0.0
    assert ScoreMatrix([], np.zeros((0, 0))).avg_at_k() == {} and ScoreMatrix([], np.zeros((0, 0))).mean() == 0.0
    assert ScoreMatrix(["a"], np.array([[0.25, 0.75]])).mean() == 0.5
    assert ScoreMatrix(["a"], np.array([[0.25]])).avg_at_k() == {"a": 0.25}, "one task, one trial"


def test_per_dataset_means_group_by_dataset_and_count_failures():
    t = rows_to_table([
        {"task_id": "t1", "score": 1.0, "status": "ok"}, {"task_id": "t2", "score": 0.5, "status": "error"},
        {"task_id": "t3", "score": 0.0, "status": "timeout"}, {"task_id": "t1", "score": 0.5, "status": "ok"},
        {"task_id": "gone", "score": 0.25, "status": "ok"},  # not in the split (any more): the split's name
    ])
    assert per_dataset_means(t, SUITE, "train") == [
        {"dataset": "A", "rollouts": 3, "mean_score": 0.5, "failed": 1},
        {"dataset": "B", "rollouts": 1, "mean_score": 0.5, "failed": 1},
        {"dataset": "train", "rollouts": 1, "mean_score": 0.25, "failed": 0},
    ]
    assert per_dataset_means(rows_to_table([{"task_id": "x1", "score": 1.0, "status": "ok"}]), SUITE, "test") == \
        [{"dataset": "suite", "rollouts": 1, "mean_score": 1.0, "failed": 0}]
    assert per_dataset_means(empty_table(), SUITE, "train") == []
    assert math.isclose(per_dataset_means(t, SUITE, "train")[0]["mean_score"], 0.5)


def test_metric_means_average_each_metric_over_the_rows_reporting_it():
    t = rows_to_table([{"task_id": "a", "metrics": [("bins", 3.0)]}, {"task_id": "b"},
                       {"task_id": "c", "metrics": [("bins", 6.0), ("waste", 0.5)]}])
    assert metric_means(t) == {"bins": 4.5, "waste": 0.5}
    assert metric_means(empty_table()) == {}
    assert metric_means(t.drop_columns(["metrics"])) == {}, "rows from before the column: no metrics"
