"""Bin packing: the shared skeleton reproduces the FunSearch paper's Table 1, the sandboxed
skeleton script agrees with it bin for bin, and scoring trusts nothing a candidate prints."""

import inspect
import json
import math
import pickle
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from benchmarks.binpack import BinPack, BinPackParams, baselines, heuristic_excess
from benchmarks.binpack.instances import generated, load_test_set, published_baselines
from benchmarks.binpack.lockstep import PackingDialogue, PackingSeries, jailed_assignments
from benchmarks.binpack.online import best_fit, count_bins, first_fit, l1_bound, pack
from benchmarks.binpack.published import funsearch_weibull
from rsi.benchmark import Task
from rsi.components import Components
from rsi.results import rows_to_table
from rsi.sandbox import Limits, run_program

ROOT = Path(__file__).resolve().parents[1]
SKELETON = ROOT / "benchmarks" / "binpack" / "skeleton.py"
BESTFIT = ROOT / "targets" / "binpack_bestfit"
FIRSTFIT = ROOT / "targets" / "binpack_firstfit"


def bench(**kw) -> BinPack:
    return BinPack(BinPackParams(name="binpack", **kw))


def paper_online_binpack(items, bins, priority):
    """The FunSearch notebook's loop, verbatim in substance (google-deepmind/funsearch,
    bin_packing.ipynb, Apache-2.0): the reference our packing must match."""
    for item in items:
        valid_bin_indices = np.nonzero((bins - item) >= 0)[0]
        priorities = priority(item, bins[valid_bin_indices])
        best_bin = valid_bin_indices[np.argmax(priorities)]
        bins[best_bin] -= item
    return bins


PRINT = 'candidates may print; stdout must stay one JSON object'
FUNSEARCH_OR_SOURCE = '''
import numpy as np


def priority(item, bins):
    def s(bin, item):
        if bin - item <= 2:
            return 4
        elif (bin - item) <= 3:
            return 3
        elif (bin - item) <= 5:
            return 2
        elif (bin - item) <= 7:
            return 1
        elif (bin - item) <= 9:
            return 0.9
        elif (bin - item) <= 12:
            return 0.95
        elif (bin - item) <= 15:
            return 0.97
        elif (bin - item) <= 18:
            return 0.98
        elif (bin - item) <= 20:
            return 0.98
        elif (bin - item) <= 21:
            return 0.98
        else:
            return 0.99

    print('candidates may print; stdout must stay one JSON object')
    return np.array([s(b, item) for b in bins])
'''


def _heuristic_from(source: str):
    """The same program in-process (without its deliberate print)."""
    namespace: dict = {}
    quiet = source.replace(f"    print({PRINT!r})\n", "")
    assert "print(" not in quiet
    exec(quiet, namespace)
    return namespace["priority"]


#: The heuristic FunSearch found for the OR datasets (paper Fig. C.12 / notebook).
funsearch_or_heuristic = _heuristic_from(FUNSEARCH_OR_SOURCE)


def run_skeleton(target: Path, task: Task, tmp_path: Path):
    """The skeleton as a rollout runs it: in the jail, on a private copy of ``target``, fed one
    item at a time by the trusted side's lockstep dialogue. -> (Outcome, the copy)."""
    copy = tmp_path / f"checkout-{task.task_id.replace('/', '_')}"
    shutil.copytree(target, copy)
    out = run_program([sys.executable, str(SKELETON)], copy, None, Limits(timeout_s=120),
                      harness=bench().harness_mounts(),
                      dialogue=PackingDialogue(task.input["items"], task.input["capacity"]))
    return out, copy


# --- Table 1 -----------------------------------------------------------------------------------


def test_first_fit_and_best_fit_reproduce_table_1():
    tasks = bench().split("test")
    assert len(tasks) == 4 * 20 + 5
    published = published_baselines()
    ours = baselines(tasks)
    for dataset in ["OR1", "OR2", "OR3", "OR4", "Weibull 5k"]:
        assert round(100 * ours["first_fit"][dataset], 2) == published["First Fit"][dataset]
        assert round(100 * ours["best_fit"][dataset], 2) == published["Best Fit"][dataset]


def test_funsearch_or_heuristic_reproduces_its_published_figure_on_or1():
    excess = heuristic_excess(load_test_set("OR1"), funsearch_or_heuristic)
    assert round(100 * excess["OR1"], 2) == published_baselines()["FunSearch"]["OR1"] == 5.30


@pytest.mark.parametrize("priority", [best_fit, first_fit, funsearch_or_heuristic])
def test_pack_matches_the_papers_loop(priority):
    task = load_test_set("OR2")[3]
    items, cap = task.input["items"], task.input["capacity"]
    reference = paper_online_binpack(items, np.array([cap for _ in items]), priority)
    assignment = pack(items, cap, priority)
    ours = cap - np.bincount(assignment, weights=items, minlength=len(items))
    assert np.array_equal(ours, reference)
    assert count_bins(items, cap, assignment) == int((reference != cap).sum())


# --- the skeleton subprocess -----------------------------------------------------------------


def test_skeleton_on_the_bestfit_template_equals_in_process(tmp_path):
    task = load_test_set("Weibull 5k")[2]
    out, copy = run_skeleton(BESTFIT, task, tmp_path)
    assert out.status == "ok", out.reason + out.stderr_tail
    expected = pack(task.input["items"], task.input["capacity"], best_fit)
    assert out.output["assignment"] == expected.tolist()
    assert out.output["bins_used"] == len(set(expected.tolist()))
    assert not (copy / "__pycache__").exists()  # the checkout stays committable


def test_skeleton_on_the_firstfit_template_is_first_fit(tmp_path):
    task = load_test_set("OR1")[5]
    out, _ = run_skeleton(FIRSTFIT, task, tmp_path)
    assert out.status == "ok", out.reason + out.stderr_tail
    assert out.output["assignment"] == pack(task.input["items"], task.input["capacity"], first_fit).tolist()


def test_funsearch_heuristic_in_the_skeleton_equals_in_process(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "heuristic.py").write_text(FUNSEARCH_OR_SOURCE)
    task = load_test_set("OR1")[7]
    out, _ = run_skeleton(tmp_path / "src", task, tmp_path)
    assert out.status == "ok", out.reason + out.stderr_tail
    expected = pack(task.input["items"], task.input["capacity"], funsearch_or_heuristic)
    assert out.output["assignment"] == expected.tolist()
    score = bench().score(task, out.output, 0)
    assert score.metrics["bins"] == len(set(expected.tolist())) and 0 < score.primary <= 1


def test_skeleton_fails_loudly_when_the_heuristic_raises(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "heuristic.py").write_text("def priority(item, bins):\n    raise RuntimeError('boom')\n")
    out, _ = run_skeleton(tmp_path / "src", load_test_set("OR1")[0], tmp_path)
    assert out.status == "error" and "boom" in out.stderr_tail and "RuntimeError: boom" in out.reason


def test_a_series_packs_each_list_from_fresh_bins_in_one_jail(tmp_path):
    """Stage 1 of meta-evolve packs all of a node's lists in one jail start: each list from fresh
    bins, exactly as a rollout of that list alone packs it."""
    lists = [t.input["items"] for t in load_test_set("OR1")[:3]]
    cap = load_test_set("OR1")[0].input["capacity"]
    got = jailed_assignments(BESTFIT, lists, cap, Limits(timeout_s=120))
    assert got == [pack(items, cap, best_fit).tolist() for items in lists]
    # a program that stops answering after the first list ends the series short: no assignments
    (tmp_path / "heuristic.py").write_text(
        "import numpy as np\nseen = []\n\n\ndef priority(item, bins):\n    seen.append(item)\n"
        f"    if len(seen) > {len(lists[0])}:\n        raise SystemExit(0)\n    return -(bins - item)\n")
    assert jailed_assignments(tmp_path, lists, cap, Limits(timeout_s=120)) is None
    with pytest.raises(ValueError, match="no empty list"):
        PackingSeries([lists[0], []], cap)


# --- scoring ---------------------------------------------------------------------------------


def test_score_is_l1_over_bins_and_rejects_invalid_packings():
    b = pickle.loads(pickle.dumps(bench()))  # scoring runs in Ray worker processes
    task = Task("x", {"capacity": 10, "items": [6, 5, 4, 5]}, {"dataset": "x", "l1": l1_bound([6, 5, 4, 5], 10)})
    assert task.meta["l1"] == 2
    assert b.score(task, {"assignment": [0, 1, 0, 1], "bins_used": 1}, 0).primary == 1.0  # bins_used ignored
    assert b.score(task, {"assignment": [0, 1, 2, 3]}, 0).primary == 0.5
    assert b.score(task, {"assignment": [0, 1, 2, 3]}, 0).metrics == {"bins": 4.0, "l1": 2.0}
    for bad in (
        {"assignment": [0, 0, 1, 1]},  # 11 > 10: over capacity
        {"assignment": [0, 1, 0]},  # wrong length
        {"assignment": [0, 1, 0, 1, 2]},
        {"assignment": [0, 1, 0, 4]},  # no such bin
        {"assignment": [0, 1, 0, -1]},
        {"assignment": [0, 1, 0, 1.0]},
        {"assignment": [0, 1, 0, True]},
        {"assignment": [0, 1, 0, 2**70]},
        {"assignment": "0101"},
        {"bins_used": 2},
        ["not", "a", "dict"],
    ):
        assert b.score(task, bad, 0).primary == 0.0, bad


# --- splits ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "family, sizes, capacity, low, high",
    [
        ("or", {"train": (20, 120), "dev": (20, 250)}, 150, 20, 100),
        ("weibull", {"train": (5, 5000), "dev": (5, 5000)}, 100, 1, 100),
    ],
)
def test_generated_splits_follow_the_protocol_and_are_deterministic(family, sizes, capacity, low, high):
    b = bench(train=family)
    for split, (count, n) in sizes.items():
        tasks = b.split(split)
        assert tasks == bench(train=family).split(split)  # same instances on every call
        assert len(tasks) == count and tasks[0].task_id == f"{split}-{family}/0"
        for t in tasks:
            items = t.input["items"]
            assert len(items) == n and t.input["capacity"] == capacity
            assert all(type(x) is int and low <= x <= high for x in items)
            assert t.meta == {"dataset": f"{split}-{family}", "l1": math.ceil(sum(items) / capacity)}
    train, dev = b.split("train"), b.split("dev")
    assert {tuple(t.input["items"]) for t in train}.isdisjoint(tuple(t.input["items"]) for t in dev)
    if family == "weibull":  # looks like the released test set (truncation: mean 39.75, std 14.68)
        all_items = np.concatenate([t.input["items"] for t in train])
        released = np.concatenate([t.input["items"] for t in load_test_set("Weibull 5k")])
        assert abs(all_items.mean() - released.mean()) < 0.3 and abs(all_items.std() - released.std()) < 0.3
    else:  # uniform on 20..100 reaches both ends
        all_items = np.concatenate([t.input["items"] for t in train])
        assert all_items.min() == 20 and all_items.max() == 100


@pytest.mark.parametrize("family, n", [("or", 250), ("weibull", 5000)])
def test_the_fresh_sample_is_large_and_apart_from_train_and_dev(family, n):
    """The reports' held-out sample: 100 instances of the dev size that share none with the
    splits a run searches (train) or levers are chosen on (dev)."""
    fresh = generated(family, "fresh")
    assert len(fresh) == 100 and all(len(t.input["items"]) == n for t in fresh)
    assert fresh[0].meta["dataset"] == f"fresh-{family}" and fresh == generated(family, "fresh")
    seen = {tuple(t.input["items"]) for split in ("train", "dev") for t in generated(family, split)}
    assert seen.isdisjoint(tuple(t.input["items"]) for t in fresh)
    assert len({tuple(t.input["items"]) for t in fresh}) == 100


def test_more_train_instances_extend_the_protocols_train_and_leave_dev_alone():
    base, more = bench(train="weibull"), bench(train="weibull", train_instances=8)
    assert len(more.split("train")) == 8 and more.split("train")[:5] == base.split("train")
    assert more.split("dev") == base.split("dev") and more.split("test") == base.split("test")
    with pytest.raises(ValueError, match="train_instances"):
        bench(train="weibull", train_instances=1000 + 1)


def test_train_items_lengthen_or_mix_the_instance_sizes():
    base, longer = bench(train="or"), bench(train="or", train_items=1000)
    for short, long in zip(base.split("train"), longer.split("train"), strict=True):
        assert len(long.input["items"]) == 1000 and long.input["items"][:120] == short.input["items"]
        assert long.meta["l1"] == math.ceil(sum(long.input["items"]) / 150)
    dev, longer_dev = base.split("dev"), longer.split("dev")  # dev is drawn as train is, from its own seeds
    assert [len(t.input["items"]) for t in longer_dev] == [1000] * len(dev)
    assert [t.input["items"][:250] for t in longer_dev] == [t.input["items"] for t in dev]
    mixed = bench(train="or", train_items=[120, 1000], train_instances=4).split("train")
    assert [len(t.input["items"]) for t in mixed] == [120, 1000, 120, 1000]
    assert mixed[0] == base.split("train")[0] and mixed[1] == longer.split("train")[1]
    for bad in (5, [120, 5], []):
        with pytest.raises(ValueError, match="train_items"):
            bench(train="or", train_items=bad)
    with pytest.raises(ValueError, match=r"train_items\.1\n.*greater than or equal to 10"):
        bench(train="or", train_items=[120, 5])  # the error names the bad size, not the union


def test_dev_instances_extend_dev_in_train_s_sizes_and_stay_apart_from_train_and_fresh():
    """The split DarwinX's promote_on_dev chooses on: more dev instances extend the protocol's
    dev, cycle over train's sizes as train does, and share no instance with train or fresh."""
    assert bench(train="weibull", dev_instances=20).split("dev")[:5] == bench(train="weibull").split("dev")
    sizes = [120, 250, 500, 1000]
    b = bench(train="or", train_items=sizes, dev_instances=8)
    dev = b.split("dev")
    assert [len(t.input["items"]) for t in dev] == sizes * 2
    assert all(t.task_id.startswith("dev-or/") for t in dev)
    held = {tuple(t.input["items"]) for t in dev}
    assert len(held) == 8 and held.isdisjoint(tuple(t.input["items"]) for t in b.split("train"))
    assert held.isdisjoint(tuple(t.input["items"]) for t in generated("or", "fresh", items=sizes))
    with pytest.raises(ValueError, match="dev_instances"):
        bench(train="weibull", dev_instances=1000 + 1)  # instance i draws from dev seed + i: 1000 on is fresh's


def test_test_split_params_and_limit():
    tasks = bench(test=["OR4", "OR1"]).split("test")
    assert [t.task_id for t in tasks[:1]] == ["OR4/u1000_00"] and tasks[-1].task_id == "OR1/u120_19"
    assert tasks[0].meta == {"dataset": "OR4", "l1": l1_bound(tasks[0].input["items"], 150)}
    assert [t.task_id for t in bench(limit=3).split("test")] == ["OR1/u120_00", "OR1/u120_01", "OR1/u120_02"]
    assert len(bench(train="or", limit=7).split("dev")) == 7
    with pytest.raises(ValidationError, match="OR1"):
        BinPackParams(name="binpack", test=["OR5"])
    with pytest.raises(ValidationError):
        BinPackParams(name="binpack", test=["OR1", "OR1"])
    with pytest.raises(ValidationError):
        BinPackParams(name="binpack", train="uniform")
    with pytest.raises(ValidationError):
        BinPackParams(name="binpack", tests=["OR1"])


# --- report ----------------------------------------------------------------------------------


def rows_for(b: BinPack, tasks, priority, status="ok"):
    rows = []
    for t in tasks:
        s = b.score(t, {"assignment": pack(t.input["items"], t.input["capacity"], priority).tolist()}, 0)
        rows.append({"task_id": t.task_id, "trial": 0, "score": s.primary, "status": status, "split": "test"})
    return rows


def test_report_gives_the_papers_figures_and_flags_failures():
    b = bench(test=["OR1"])
    tasks = b.split("test")
    table = rows_to_table(rows_for(b, tasks, best_fit))
    assert round(100 * b.excess_by_dataset(table, "test")["OR1"], 2) == 5.81
    (row,) = b.report(table, "test")
    assert row["dataset"] == "OR1" and row["failed"] == 0 and row["tasks"] == 20
    assert round(row["excess_pct"], 2) == 5.81 == round(row["best_fit_pct"], 2)
    assert round(row["first_fit_pct"], 2) == 6.42 and row["funsearch_pct"] == 5.30
    assert round(row["sum_of_squares_pct"], 2) == 13.66 and row["trained_on"] == "generated weibull"

    # One crashed instance: the dataset is failed, not averaged over the 19 that worked.
    broken = rows_for(b, tasks[:19], best_fit) + rows_for(b, tasks[19:], best_fit, status="error")
    table = rows_to_table(broken)
    assert b.excess_by_dataset(table, "test")["OR1"] == math.inf
    (row,) = b.report(table, "test")
    assert row["excess_pct"] is None and row["failed"] == 1
    # An invalid packing scores 0 with status ok: also failed.
    zero = rows_for(b, tasks[:19], best_fit) + [dict(rows_for(b, tasks[19:], best_fit)[0], score=0.0)]
    assert b.excess_by_dataset(rows_to_table(zero), "test")["OR1"] == math.inf


def test_report_on_train_lists_excess_only():
    b = bench(train="or")
    tasks = b.split("train")[:4]
    rows = b.report(rows_to_table(rows_for(b, tasks, first_fit)), "train")
    assert [r["dataset"] for r in rows] == ["train-or"] and rows[0]["tasks"] == 4
    assert rows[0]["excess_pct"] == pytest.approx(100 * heuristic_excess(tasks, first_fit)["train-or"])
    assert "first_fit_pct" not in rows[0]


# --- templates -------------------------------------------------------------------------------


@pytest.mark.parametrize("template", [BESTFIT, FIRSTFIT])
def test_templates_classify_every_file_and_mark_the_evolved_function(template):
    comps = Components.load(template)
    files = sorted(p.name for p in template.iterdir() if p.is_file() and p.name != "components.yaml")
    # best fit also carries the mutator's probe inputs (recorded calls of priority, Weibull and OR)
    expected = {"README.md": "docs", "heuristic.py": "heuristic", "probe.json": "probe", "probe_or.json": "probe"}
    assert files == (sorted(expected) if template == BESTFIT else ["README.md", "heuristic.py"])
    assert [comps.label(f) for f in files] == [expected[f] for f in files]
    lines = (template / "heuristic.py").read_text().splitlines()
    assert lines[lines.index("def priority(item: float, bins: np.ndarray) -> np.ndarray:") - 1] == "# rsi: evolve"




# The paper's Weibull heuristic as a candidate's file (the jailed test below runs it as one).
FUNSEARCH_WEIBULL_SOURCE = "import numpy as np\n\n\n" + inspect.getsource(funsearch_weibull).replace(
    "def funsearch_weibull(", "def priority("
)


@pytest.mark.slow
@pytest.mark.parametrize("dataset, source, published", [
    ("OR3", FUNSEARCH_OR_SOURCE, 3.11), ("Weibull 5k", FUNSEARCH_WEIBULL_SOURCE, 0.68)])
def test_published_heuristics_give_their_figures_through_the_jailed_lockstep(tmp_path, dataset, source, published):
    """The paper's own heuristics, run as candidates are: in the jail, shown one item at a time,
    scored by the trusted side. Online-only feeding changes nothing an honest heuristic does."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "heuristic.py").write_text(source)
    b, rows = bench(), []
    for i, task in enumerate(load_test_set(dataset)):
        out, _ = run_skeleton(tmp_path / "src", task, tmp_path / str(i))
        assert out.status == "ok", out.reason + out.stderr_tail
        rows.append({"task_id": task.task_id, "score": b.score(task, out.output, 0).primary, "status": "ok"})
    assert round(100 * b.excess_by_dataset(rows_to_table(rows), "test")[dataset], 2) == published


@pytest.mark.slow
def test_funsearch_weibull_heuristic_reproduces_its_published_figure():
    excess = heuristic_excess(load_test_set("Weibull 5k"), funsearch_weibull)
    assert round(100 * excess["Weibull 5k"], 2) == 0.68


AFFINITY_PROBE = '''import os, sys
import numpy as np

def priority(item, bins):
    if not hasattr(priority, "seen"):
        priority.seen = sorted(os.sched_getaffinity(0))
        sys.stderr.write(f"affinity {priority.seen}\\n")
    return -(bins - item)
'''


@pytest.mark.skipif(len(getattr(__import__("os"), "sched_getaffinity", lambda _: [])(0)) < 2,
                    reason="needs a machine with two CPUs or more")
def test_a_lockstep_rollout_shares_one_cpu_with_its_caller_and_the_caller_gets_its_cpus_back(tmp_path):
    """The two sides of a dialogue take strict turns, so they run on one CPU (a hand-over there
    is a context switch, not a cross-CPU wake-up); the caller's thread is unpinned afterwards,
    and the packing is the one best fit makes."""
    import os

    before = os.sched_getaffinity(0)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "heuristic.py").write_text(AFFINITY_PROBE)
    task = load_test_set("OR1")[0]
    out, _ = run_skeleton(tmp_path / "src", task, tmp_path / "work")
    assert out.status == "ok", out.reason + out.stderr_tail
    seen = [line for line in out.stderr_tail.splitlines() if line.startswith("affinity ")]
    assert len(seen) == 1 and len(json.loads(seen[0].split(" ", 1)[1])) == 1, seen
    assert os.sched_getaffinity(0) == before
    items, cap = task.input["items"], task.input["capacity"]
    assert out.output["assignment"] == pack(items, cap, best_fit).tolist()
