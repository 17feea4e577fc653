"""The (1+1) hill climber and its restart variant on the table benchmark with the scripted
worker: every score is written in advance, so each decision is checked exactly through the
real runner (real Ray, real jailed rollouts)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pytest
from _runs import of, run, scripted_edit, table_scenario

from rsi.reporting.data import RunView

SPLITS = {"train": ["t1", "t2"], "dev": [], "test": ["x1"]}


def scenario(tmp_path: Path, scores: dict, edits: list[dict], params: dict) -> Path:
    return table_scenario(tmp_path, "hillclimb", name="hc", seed=3, table={"splits": SPLITS, "scores": scores},
                          edits=edits, ask_reply="", params=params)


def to(v: str) -> dict:
    return scripted_edit(f"switch to {v}", v)


def test_accepts_iff_the_train_mean_does_not_fall(tmp_path, ray_session):
    scores = {
        "v0": {"t1": 0.5, "t2": 0.5},    # mean 0.5
        "v1": {"t1": 0.75, "t2": 0.5},   # 0.625: improved
        "v2": {"t1": 0.5, "t2": 0.5},    # 0.5 < 0.625: worse, rejected
        "v3": {"t1": 0.5, "t2": 0.75},   # 0.625 = 0.625: equal, kept (a neutral move)
        "v4": {"t1": 1.0, "t2": 1.0},    # 1.0: improved
    }
    edits = [to("v1"), to("v2"), {"files": {}, "reply": "nothing"}, to("v3"), to("v4")]
    decisions, summary, records = run(scenario(tmp_path, scores, edits, {"max_steps": 5}))
    seed, = of(decisions, "seed")
    keeps = of(decisions, "keep")
    assert [(k["step"], k["accepted"], k["reason_code"]) for k in keeps] == [
        (1, True, "improved"), (2, False, "worse"), (4, True, "equal"), (5, True, "improved")]
    assert [k["train_mean"] for k in keeps] == [0.625, 0.5, 0.625, 1.0]
    decline, = of(decisions, "decline")
    assert (decline["step"], decline["reason_code"]) == (3, "no_change")
    # the parent of each child is the last kept version: v2's rejection does not move it
    v1, v2, v3, v4 = (k["snapshot_id"] for k in keeps)
    assert [k["parent_id"] for k in keeps] == [seed["snapshot_id"], v1, v1, v3]
    assert [k["gain"] for k in keeps] == [0.125, -0.125, 0.0, 0.375]
    assert summary["snapshot_id"] == v4 and of(decisions, "promote")[0]["train_mean"] == 1.0
    assert not of(decisions, "restart"), "restart_after 0 never restarts"
    # one full measurement per committed child, none for the decline
    assert [k["rollouts"] for k in keeps] == [2, 2, 2, 2]
    train = records.rollouts().filter(pc.equal(records.rollouts()["split"], "train"))
    assert train.num_rows == 2 + 4 * 2 == of(decisions, "promote")[0]["rollouts_used"]


def test_restarts_from_the_seed_after_k_children_without_a_rise(tmp_path, ray_session):
    scores = {
        "v0": {"t1": 0.5, "t2": 0.5},    # 0.5
        "v1": {"t1": 0.25, "t2": 0.5},   # worse: stalled 1
        "v2": {"t1": 0.75, "t2": 0.5},   # 0.625 improved: stalled back to 0
        "v3": {"t1": 0.5, "t2": 0.5},    # worse: stalled 1
        "v4": {"t1": 0.5, "t2": 0.75},   # equal, kept: stalled 2 -> restart from the seed
        "v5": {"t1": 0.5, "t2": 0.625},  # 0.5625 > seed's 0.5: improved, child of the seed
    }
    edits = [to(v) for v in ("v1", "v2", "v3", "v4", "v5")]
    decisions, summary, records = run(scenario(tmp_path, scores, edits, {"max_steps": 5, "restart_after": 2}))
    seed, = of(decisions, "seed")
    keeps = of(decisions, "keep")
    assert [(k["accepted"], k["reason_code"], k["climb"]) for k in keeps] == [
        (False, "worse", 1), (True, "improved", 1), (False, "worse", 1), (True, "equal", 1), (True, "improved", 2)]
    restart, = of(decisions, "restart")
    assert restart["step"] == 4 and restart["reason_code"] == "stalled" and restart["climb"] == 2
    assert restart["snapshot_id"] == seed["snapshot_id"] and restart["parent_id"] == keeps[3]["snapshot_id"]
    assert keeps[4]["parent_id"] == seed["snapshot_id"] and keeps[4]["parent_mean"] == 0.5
    # the best kept version over both climbs, ties to the earlier (v2 before v4)
    promote, = of(decisions, "promote")
    assert summary["snapshot_id"] == keeps[1]["snapshot_id"]
    assert promote["train_mean"] == 0.625 and promote["climbs"] == 2
    # the report's seed is still a root: the restart (which names the seed) is not its decision
    seed_view = RunView(records.uri).candidates[0]
    assert (seed_view.kind, seed_view.parent_id, len(seed_view.decisions)) == ("seed", None, 1)


def test_stops_when_a_new_child_would_exceed_max_rollouts(tmp_path, ray_session):
    scores = {"v0": {"t1": 0.5, "t2": 0.5}, "v1": {"t1": 0.75, "t2": 0.5}, "v2": {"t1": 1.0, "t2": 0.5}}
    edits = [to("v1"), {"files": {}, "reply": "nothing"}, to("v2"), to("v0")]
    # seed 2 + v1 2 + (decline 0) + v2 2 = 6; a third child would make 8 > 7
    decisions, summary, records = run(scenario(tmp_path, scores, edits, {"max_steps": 10, "max_rollouts": 7}))
    stop, = of(decisions, "stop")
    assert stop["reason_code"] == "rollout_budget" and stop["rollouts_used"] == 6 and stop["step"] == 3
    assert [k["step"] for k in of(decisions, "keep")] == [1, 3]
    train = records.rollouts().filter(pc.equal(records.rollouts()["split"], "train"))
    assert train.num_rows == 6
    assert summary["snapshot_id"] == of(decisions, "keep")[1]["snapshot_id"]
    assert of(decisions, "test")[0]["tasks"] == 1, "the test measurement runs after the budget stop"


@pytest.mark.parametrize("bad", [{"max_rollouts": -1}, {"restart_after": -2}, {"samples": 0}])
def test_negative_budgets_are_refused_before_anything_starts(tmp_path, bad):
    from rsi.driver.cli import main

    path = scenario(tmp_path, {"v0": {"t1": 0.5}}, [], {"max_steps": 1, **bad})
    assert main(["validate", str(path)]) == 2
    assert not (tmp_path / "runs").exists()
