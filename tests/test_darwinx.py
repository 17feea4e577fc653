"""DarwinX decision scenarios on the table benchmark with the scripted worker: every outcome is
known in advance, so each gate is checked decision by decision through the real runner."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from _cluster import comparable
from _runs import agent_worker, assert_no_secret, of, run, scripted_edit, table_scenario, tool_call

from rsi.driver.cli import main
from rsi.driver.resume import resume_run
from rsi.driver.runner import start_run
from rsi.reporting.data import RunView
from rsi.testing.scripted_server import ScriptedServer

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-darwinx-test-key-0123456789"
# Ray worker processes see only the environment from before Ray starts: set it at import.
os.environ["RSI_TEST_DARWINX_KEY"] = KEY


def scenario(tmp_path: Path, table: dict, edits: list[dict], algorithm: dict, ask_reply: str = "learned") -> Path:
    return table_scenario(tmp_path, "darwinx", name="dx", seed=7, table=table, edits=edits, ask_reply=ask_reply,
                          params={"screen_size": len(table["splits"]["train"]), **algorithm})


def version(v: str) -> dict:
    return scripted_edit(f"switch to {v}", v)


def stop_by_a_worker_fault(directory: Path, table: dict, edits: list[dict], algorithm: dict, *, at: int):
    """Run ``edits`` with the edit of step ``at`` replaced by a write outside the checkout, which
    the worker refuses as a fault: the run stops there, after the steps before it were saved.
    Returns the stopped runner."""
    from ray.exceptions import RayTaskError

    broken = edits[:at - 1] + [{"files": {"../outside": "x"}, "reply": "escape"}] + edits[at:]
    r = start_run(str(scenario(directory, table, broken, algorithm)))
    with pytest.raises(RayTaskError, match="stay inside the checkout"):
        r.execute()
    return r


def resume_with_the_script_mended(r, directory: Path, edits: list[dict]) -> dict:
    """Continue a run stopped by ``stop_by_a_worker_fault`` with ``rsi resume``'s own code, its
    script restored to ``edits``."""
    (directory / "script.yaml").write_text(yaml.safe_dump({"edits": edits, "ask_reply": "learned"}))
    return resume_run(r.records.uri)



SPLITS = {"train": ["t1", "t2", "t3"], "dev": [], "test": ["x1"]}


def test_lucky_screen_then_failed_confirm(tmp_path, ray_session):
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.5, "t2": 0.5, "t3": 0.5, "x1": 0.5},
        "v1": {"t1": [1.0, 0.0, 0.0], "t2": 0.5, "t3": 0.5, "x1": 1.0}}}
    decisions, summary, _ = run(scenario(tmp_path, table, [version("v1")], {"max_steps": 1, "merge_every": 0}))
    screen, = of(decisions, "screen")
    confirm, = of(decisions, "confirm")
    assert screen["accepted"] is True and screen["means"]["t1"] == 1.0
    assert confirm["accepted"] is False
    assert confirm["means"]["t1"] == pytest.approx(1 / 3)
    assert confirm["samples"] == 3 and confirm["level"] == "confirm"
    assert summary["snapshot_id"] == decisions[0]["snapshot_id"], "the seed stays promoted"
    assert len(of(decisions, "test")) == 1, "the runner measures test exactly once"


def test_one_task_regression_rejected_though_sum_gains(tmp_path, ray_session):
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.5, "t2": 0.5, "t3": 0.5},
        "v2": {"t1": 1.0, "t2": 0.4, "t3": 0.5}}}
    decisions, _, _ = run(scenario(tmp_path, table, [version("v2")], {"max_steps": 1, "merge_every": 0}))
    confirm, = of(decisions, "confirm")
    assert confirm["gain"] == pytest.approx(0.4)
    assert confirm["regression_mass"] == pytest.approx(0.1)
    assert confirm["accepted"] is False and confirm["reason"] == "regression over tolerance"


def test_solved_task_lost_under_nonzero_tolerance_rejected(tmp_path, ray_session):
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.0, "t2": 0.5, "t3": 1.0},
        "v3": {"t1": 1.0, "t2": 0.5, "t3": 0.9}}}
    decisions, _, _ = run(scenario(tmp_path, table, [version("v3")],
                                   {"max_steps": 1, "merge_every": 0, "regression_tolerance": 0.5}))
    seed = of(decisions, "seed")[0]
    assert seed["solved"] == ["t3"]
    confirm, = of(decisions, "confirm")
    assert confirm["regression_mass"] == pytest.approx(0.1) and confirm["gain"] > 0
    assert confirm["lost_invariant"] == ["t3"]
    assert confirm["accepted"] is False and confirm["reason"] == "lost solved tasks"


def test_rejected_specialist_recombined_and_union_preserved(tmp_path, ray_session):
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 1.0, "t2": 0.0, "t3": 0.0},
        "vA": {"t1": 0.0, "t2": 1.0, "t3": 0.0},
        "vAB": {"t1": 1.0, "t2": 1.0, "t3": 0.0}}}
    decisions, summary, records = run(scenario(tmp_path, table, [version("vA"), version("vAB")],
                                               {"max_steps": 2, "merge_every": 2}))
    first, second = of(decisions, "confirm")
    assert first["accepted"] is False and first["lost_invariant"] == ["t1"], "the specialist is rejected"
    merge, = of(decisions, "merge")
    assert merge["donor_id"] == first["snapshot_id"] and merge["parent_id"] == decisions[0]["snapshot_id"]
    assert second["donor_id"] == first["snapshot_id"]
    assert second["reference_means"] == {"t1": 1.0, "t2": 1.0, "t3": 0.0}, "reference = max of both parents"
    assert second["accepted"] is True
    assert summary["snapshot_id"] == second["snapshot_id"]
    promote, = of(decisions, "promote")
    assert [a["admitted"] for a in promote["archive"]] == [True, False, True]


def test_invalid_edit_then_continued_search(tmp_path, ray_session):
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.5, "t2": 0.5, "t3": 0.5}, "v1": {"t1": 1.0, "t2": 0.5, "t3": 0.5}}}
    edits = [{"files": {"notes.txt": "stray"}, "reply": "oops"}, {"files": {}, "reply": "nothing"}, version("v1")]
    decisions, summary, _ = run(scenario(tmp_path, table, edits, {"max_steps": 3, "merge_every": 0}))
    declines = of(decisions, "decline")
    assert [(d["step"], d["reason"]) for d in declines] == [(1, "unclassified_path"), (2, "no_change")]
    confirm, = of(decisions, "confirm")
    assert confirm["step"] == 3 and confirm["accepted"] is True
    assert summary["snapshot_id"] == confirm["snapshot_id"]
    promote, = of(decisions, "promote")
    assert [d["reason"] for d in promote["declined_edits"]] == ["unclassified_path", "no_change"]


def test_confirm_never_compares_against_screen_scores(tmp_path, ray_session):
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": [0.0, 1.0, 1.0], "t2": 0.5, "t3": 0.5},
        "v1": {"t1": 0.5, "t2": 0.5, "t3": 0.5}}}
    decisions, _, _ = run(scenario(tmp_path, table, [version("v1")], {"max_steps": 1, "merge_every": 0}))
    screen, = of(decisions, "screen")
    confirm, = of(decisions, "confirm")
    assert screen["parent_means"]["t1"] == 0.0 and screen["accepted"] is True
    assert confirm["parent_means"]["t1"] == pytest.approx(2 / 3), "the parent is re-measured at confirm level"
    assert confirm["accepted"] is False


def test_parent_choice_among_confirmed_and_records(tmp_path, ray_session):
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.2, "t2": 0.2, "t3": 0.2, "x1": 0.1},
        "v1": {"t1": 0.5, "t2": 0.2, "t3": 0.2, "x1": 0.4},
        "v2": {"t1": 0.0, "t2": 0.9, "t3": 0.9},
        "v3": {"t1": 0.5, "t2": 0.6, "t3": 0.2, "x1": 0.8}}}
    edits = [version("v1"), version("v2"), version("v3"), version("v0")]
    decisions, summary, records = run(scenario(tmp_path, table, edits,
                                               {"max_steps": 4, "merge_every": 0, "exploration_probability": 0.5,
                                                "duplicate_retries": 0}))
    admitted = {decisions[0]["snapshot_id"]}
    for d in decisions:
        if d["kind"] == "screen":
            assert d["parent_id"] in admitted, "only confirmed members become parents"
        if d["kind"] == "confirm" and d["accepted"]:
            admitted.add(d["snapshot_id"])
            assert set(d["uncertainty"]) == {"wins", "losses", "sign_test_p", "bootstrap_gain_95"}
    # Seed 42's parent draws: step 1 has only the seed; steps 2 and 3 explore (draws 0.22 and
    # 0.03 < 0.5) and pick the seed; step 4 exploits the best lineage gain, v3 (+0.7). v1 (+0.3)
    # and v3 are admitted, v2 loses t1 (regression 0.2); v0 written onto v3 reproduces the seed.
    versions = {d["snapshot_id"]: records.get_snapshot(d["snapshot_id"]).text("VERSION").strip()
                for d in decisions if d["kind"] in ("seed", "screen")}
    assert sorted(versions[s] for s in admitted) == ["v0", "v1", "v3"]
    assert [versions[d["parent_id"]] for d in of(decisions, "screen")] == ["v0", "v0", "v0"]
    assert [(d["step"], d["reason"], d["parent_id"]) for d in of(decisions, "decline")] == \
        [(4, "duplicate", of(decisions, "confirm")[2]["snapshot_id"])]
    assert summary["snapshot_id"] == of(decisions, "confirm")[2]["snapshot_id"]
    table_rows = records.rollouts()
    assert table_rows.num_rows == len(pq.read_table(records.local_path() / "rollouts").to_pylist())
    assert set(summary["means"]) == {"train", "test"}
    cfg = yaml.safe_load((records.local_path() / "config.yaml").read_text())
    assert cfg["algorithm"]["name"] == "darwinx"


def test_merge_regressing_against_the_donor_only_is_rejected(tmp_path, ray_session):
    """The merge's regression reference is the per-task best of both parents. vAB keeps every
    task solved and gains 1.25 on the primary v0, but falls 0.25 below the donor vA on t3 (an
    unsolved task, so only the reference can catch it). vA's higher train mean makes it the
    pairing's primary; it was not admitted, so the admitted v0 becomes the main branch."""
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 1.0, "t2": 0.0, "t3": 0.0},
        "vA": {"t1": 0.0, "t2": 1.0, "t3": 0.5},
        "vAB": {"t1": 1.0, "t2": 1.0, "t3": 0.25}}}
    decisions, summary, _ = run(scenario(tmp_path, table, [version("vA"), version("vAB")],
                                         {"max_steps": 2, "merge_every": 2}))
    seed_id = decisions[0]["snapshot_id"]
    first, second = of(decisions, "confirm")
    assert (first["accepted"], first["reason"], first["lost_invariant"]) == (False, "lost solved tasks", ["t1"])
    merge, = of(decisions, "merge")
    assert (merge["step"], merge["parent_id"], merge["donor_id"]) == (2, seed_id, first["snapshot_id"]), \
        "the admitted parent is the main branch, the rejected specialist the donor"
    assert merge["ancestor_id"] == seed_id and merge["union"] == 2
    screen = of(decisions, "screen")[1]
    assert screen["accepted"] is True and screen["regression_mass"] == 0.25 and screen["gain"] == 1.25
    assert second["parent_id"] == seed_id and second["donor_id"] == first["snapshot_id"]
    assert second["parent_means"] == {"t1": 1.0, "t2": 0.0, "t3": 0.0}, "gain is measured against the main branch"
    assert second["reference_means"] == {"t1": 1.0, "t2": 1.0, "t3": 0.5}, "reference = per-task max of both parents"
    assert (second["gain"], second["regression_mass"], second["lost_invariant"]) == (1.25, 0.25, [])
    assert second["accepted"] is False and second["reason"] == "regression over tolerance"
    # the uncertainty figure pairs the child with the main branch: t2 and t3 win, t1 ties
    assert second["uncertainty"]["wins"] == 2 and second["uncertainty"]["losses"] == 0
    assert second["uncertainty"]["sign_test_p"] == 0.5  # 2 * C(2,0) / 2^2
    assert summary["snapshot_id"] == seed_id
    promote, = of(decisions, "promote")
    assert [(a["kind"], a["admitted"]) for a in promote["archive"]] == \
        [("seed", True), ("mutation", False), ("recombination", False)]


def test_screen_rejections_pay_no_confirm(tmp_path, ray_session):
    """Screen tolerance 0.25: vN improves nothing; vR improves t1 but regresses 0.5; vT improves
    t1 and regresses exactly 0.25, passes the screen and only then pays for a confirm (where the
    default tolerance 0 rejects it)."""
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.5, "t2": 0.5, "t3": 0.5},
        "vN": {"t1": 0.5, "t2": 0.25, "t3": 0.5},
        "vR": {"t1": 1.0, "t2": 0.0, "t3": 0.5},
        "vT": {"t1": 1.0, "t2": 0.25, "t3": 0.5}}}
    decisions, summary, records = run(scenario(
        tmp_path, table, [version("vN"), version("vR"), version("vT")],
        {"max_steps": 3, "merge_every": 0, "screen_regression_tolerance": 0.25}))
    seed_id = decisions[0]["snapshot_id"]
    screens = of(decisions, "screen")
    # One condition per reason: vN improves no task; vR improves t1 but regresses 0.5 > 0.25.
    assert [(d["step"], d["accepted"], d["reason_code"], d["reason"], d["gain"], d["regression_mass"])
            for d in screens] == [
        (1, False, "no_task_improved", "no task improved", -0.25, 0.25),
        (2, False, "screen_regression", "regression 0.5000 over screen tolerance 0.25", 0.0, 0.5),
        (3, True, "screen_passed", "screen passed", 0.25, 0.25)]
    assert all(d["parent_id"] == seed_id and sorted(d["tasks"]) == ["t1", "t2", "t3"] and d["samples"] == 1
               for d in screens)
    confirm, = of(decisions, "confirm")
    assert confirm["step"] == 3 and confirm["snapshot_id"] == screens[2]["snapshot_id"]
    assert (confirm["accepted"], confirm["reason"], confirm["regression_mass"]) == \
        (False, "regression over tolerance", 0.25)
    rows = records.rollouts()
    measured = Counter(zip(rows["snapshot_id"].to_pylist(), rows["split"].to_pylist()))
    vn, vr, vt = (d["snapshot_id"] for d in screens)
    assert measured == {
        (vn, "train"): 3, (vr, "train"): 3,  # screened on 3 tasks once, never confirmed
        (vt, "train"): 3 + 9,  # screen, then the whole pool 3 times
        (seed_id, "train"): 9 + 3 * 3 + 9,  # seed confirm, parent side of 3 screens and of 1 confirm
        (seed_id, "test"): 1}
    promote, = of(decisions, "promote")
    assert [(a["level"], a["admitted"]) for a in promote["archive"]] == \
        [("seed", True), ("screen", False), ("screen", False), ("confirm", False)]
    assert summary["snapshot_id"] == seed_id


def _parallel_table() -> dict:
    return {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.5, "t2": 0.5, "t3": 0.5},
        "v1": {"t1": 1.0, "t2": 0.5, "t3": 0.5},
        "vBad": {"t1": 0.25, "t2": 0.25, "t3": 0.25},
        "v3": {"t1": 1.0, "t2": 1.0, "t3": 0.5}}}


PARALLEL = {"max_steps": 4, "merge_every": 0, "parallel_candidates": 2, "exploration_probability": 0.0,
            "duplicate_retries": 0}
PARALLEL_EDITS = [version("v1"), version("v1"), version("vBad"), version("v3")]


def test_parallel_round_duplicate_and_screen_rejection(tmp_path, ray_session):
    """Two candidates per round. Round 1: both edits write v1 onto the seed, so the second is a
    duplicate of the first (declined while the round is proposed, never measured). Round 2: both
    parents are v1 (exploration 0: best lineage gain); vBad fails the screen, v3 is admitted."""
    decisions, summary, records = run(scenario(tmp_path, _parallel_table(), PARALLEL_EDITS, PARALLEL))
    seed_id = decisions[0]["snapshot_id"]
    confirms = of(decisions, "confirm")
    v1, v3 = confirms[0]["snapshot_id"], confirms[1]["snapshot_id"]
    assert [(d["step"], d["kind"], d["snapshot_id"], d["parent_id"], d["accepted"], d["reason"])
            for d in decisions if d["kind"] != "seed"] == [
        (2, "decline", v1, seed_id, False, "duplicate"),
        (1, "screen", v1, seed_id, True, "screen passed"),
        (1, "confirm", v1, seed_id, True, "admitted: gains and preserves the lineage"),
        (3, "screen", of(decisions, "screen")[1]["snapshot_id"], v1, False, "no task improved"),
        (4, "screen", v3, v1, True, "screen passed"),
        (4, "confirm", v3, v1, True, "admitted: gains and preserves the lineage"),
        (4, "promote", v3, v1, True, "highest train mean 0.8333 among confirmed members"),
        (5, "test", v3, v1, None, "test mean 0.0000")]
    assert [c["gain"] for c in confirms] == [0.5, 0.5]
    assert of(decisions, "screen")[1]["regression_mass"] == 1.25
    promote, = of(decisions, "promote")
    assert [(a["step"], a["level"], a["admitted"]) for a in promote["archive"]] == \
        [(0, "seed", True), (1, "confirm", True), (3, "screen", False), (4, "confirm", True)]
    assert [(d["step"], d["reason"]) for d in promote["declined_edits"]] == [(2, "duplicate")]
    assert summary["snapshot_id"] == v3 and summary["rollouts"]["executed"] == 64


def test_duplicate_edits_are_asked_again_before_they_use_a_step(tmp_path, ray_session):
    """Round 1 of two candidates: both edits write v1 onto the seed. With retries (the default
    3) the second is asked again, writes v1 once more, then vBad: no step is declined and step 2
    measures vBad. With one retry the second answer is still v1: declined as a duplicate."""
    edits = [version("v1"), version("v1"), version("v1"), version("vBad")]
    params = {**PARALLEL, "max_steps": 2}
    params.pop("duplicate_retries")
    decisions, _, records = run(scenario(tmp_path / "default", _parallel_table(), edits, params))
    assert not of(decisions, "decline")
    screens = of(decisions, "screen")
    assert [(d["step"], records.get_snapshot(d["snapshot_id"]).text("VERSION").strip()) for d in screens] == [
        (1, "v1"), (2, "vBad")]

    decisions, _, _ = run(scenario(tmp_path / "once", _parallel_table(), edits,
                                   {**params, "duplicate_retries": 1}))
    decline, = of(decisions, "decline")
    assert (decline["step"], decline["reason"]) == (2, "duplicate")
    assert "after 1 retries" in decline["detail"]
    assert [d["step"] for d in of(decisions, "screen")] == [1]


def test_parallel_run_stopped_after_a_round_resumes_to_identical_decisions(tmp_path, ray_session):
    """The same parallel run, stopped by a worker fault in round 2 (after round 1's state was
    saved) and continued with ``rsi resume``'s own code once the script is fixed, decides exactly
    what the uninterrupted run decides and runs no stored rollout again."""
    whole, _, _ = run(scenario(tmp_path / "whole", _parallel_table(), PARALLEL_EDITS, PARALLEL))

    r = stop_by_a_worker_fault(tmp_path / "stopped", _parallel_table(), PARALLEL_EDITS, PARALLEL, at=3)
    state = r.records.read_state()
    assert state["step"] == 2 and state["worker_states"] == [{"position": 2}] and state["decisions"] == 4
    assert [a["level"] for a in state["archive"]] == ["seed", "confirm"]
    assert [d["reason"] for d in state["declined"]] == ["duplicate"]
    assert not r.records.exists("summary.json")

    summary = resume_with_the_script_mended(r, tmp_path / "stopped", PARALLEL_EDITS)
    assert comparable(r.records.decisions()) == comparable(whole)
    assert summary["rollouts"]["executed"] == 64 - 33, "seed and round 1 (33 rollouts) are not run again"
    assert summary["snapshot_id"] == of(whole, "promote")[0]["snapshot_id"]


@pytest.mark.parametrize("override,needle", [
    (["--algorithm.confirm_samples", "1", "--algorithm.screen_samples", "2"], "confirm_samples (1) must be >= screen_samples"),
    (["--algorithm.solved_threshold", "0"], "solved_threshold"),
    (["--algorithm.solved_threshold", "1.5"], "solved_threshold"),
    (["--algorithm.screen_size", "9"], "larger than the train split"),
    (["--algorithm.exploration_probability", "2"], "exploration_probability"),
    (["--algorithm.merge_every", "-1"], "merge_every"),
    (["--algorithm.graft_probability", "1.5"], "graft_probability"),
    (["--algorithm.promote_on_dev", "2"], "has no dev tasks to choose the promoted member on"),
    (["--algorithm.promote_on_dev", "2", "--algorithm.policies", "{promotion: {rule: highest_train_mean}}"],
     "replaces the promotion slot"),
    (["--algorithm.worker", "{type: llm, llm: {provider: openai, model: m, base_url: 'http://127.0.0.1:9'}}"],
     "text-only worker"),
])
def test_bad_parameters_exit_2(tmp_path, capsys, override, needle):
    table = {"splits": SPLITS, "scores": {"v0": {"t1": 0.5}}}
    path = scenario(tmp_path, table, [], {"max_steps": 1})
    assert main(["run", str(path), *override]) == 2
    err = capsys.readouterr().err
    assert needle in err, err
    assert not (tmp_path / "runs").exists()


def test_agent_worker_edits_the_directory_through_its_write_tool(tmp_path, ray_session):
    """The built-in coding agent against the scripted model server (real openai SDK)."""
    call = tool_call
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.5, "t2": 0.5, "t3": 0.5, "x1": 0.0}, "v1": {"t1": 1.0, "t2": 0.5, "t3": 0.5, "x1": 1.0}}}
    steps = [call("read_file", path="VERSION"), call("write_file", path="VERSION", content="v1\n"),
             call("finish", summary="answer v1"), "v1 fixed t1; keep it"]
    with ScriptedServer(steps, api_key=KEY) as srv:
        path = scenario(tmp_path, table, [], {"max_steps": 1, "merge_every": 0})
        cfg = yaml.safe_load(path.read_text())
        cfg["algorithm"]["worker"] = agent_worker(srv.base_url, "RSI_TEST_DARWINX_KEY")
        path.write_text(yaml.safe_dump(cfg))
        decisions, summary, records = run(path)
        prompt = srv.requests[0]["body"]["messages"][-1]["content"]
    confirm, = of(decisions, "confirm")
    assert confirm["accepted"] is True
    assert records.get_snapshot(confirm["snapshot_id"]).text("VERSION") == "v1\n"
    assert summary["snapshot_id"] == confirm["snapshot_id"] and summary["means"]["test"] == 1.0
    assert "Preservation contract" in prompt and "| version | `VERSION` |" in prompt
    promote, = of(decisions, "promote")
    assert promote["archive"][1]["learning"] == "v1 fixed t1; keep it"
    assert_no_secret(records.local_path(), KEY)


@pytest.mark.slow
def test_quickstart_runs_end_to_end_at_a_reduced_size(tmp_path, ray_session):
    """configs/quickstart.yaml itself (mutator worker, bin packing), two rounds, small splits."""
    r = start_run(str(REPO / "configs" / "quickstart.yaml"),
                  [("algorithm.max_steps", "4"), ("benchmark.limit", "2"), ("algorithm.merge_every", "2")],
                  run_dir=str(tmp_path / "qs"))
    summary = r.execute()
    decisions = r.records.decisions()
    kinds = [d["kind"] for d in decisions]
    assert kinds[0] == "seed" and kinds[-2:] == ["promote", "test"]
    assert {d["step"] for d in decisions if d["kind"] in ("screen", "decline", "merge")} <= {1, 2, 3, 4}
    edited = [d for d in decisions if d["kind"] == "screen"]
    for d in edited:
        child = r.records.get_snapshot(d["snapshot_id"])
        assert child.parent_id == d["parent_id"]
        assert r.records.get_snapshot(d["parent_id"]).changed_paths(child) == ["heuristic.py"]
    report = {row["dataset"]: row for row in summary["test_report"]}
    assert set(report) == {"OR1"} and report["OR1"]["best_fit_pct"] is not None


@pytest.mark.slow
def test_bin_packing_promoted_on_dev_in_the_run_as_the_quality_report_reads_it_off_the_records(tmp_path, ray_session):
    """Bin packing with promote_on_dev: two islands each admit a residual band rule from best fit,
    a gap of 45 (the higher train mean) and of 50 (the higher dev mean, packed in-process when
    the test was written); the run packs the shortlist on dev in the jail and promotes the gap of
    50. perf/search_quality.py, which reads the same choice off a finished run's records for the
    results tables, names the same member with the same dev means."""
    import importlib.util

    from benchmarks.binpack.instances import generated

    spec = importlib.util.spec_from_file_location("perf_search_quality", REPO / "perf" / "search_quality.py")
    quality = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quality)
    seed_source = (REPO / "targets" / "binpack_bestfit" / "heuristic.py").read_text()
    assert seed_source.rstrip().endswith("return -(bins - item)")
    bands = [seed_source.rstrip().removesuffix("return -(bins - item)")
             + f"r = bins - item\n    return np.where(r < 2, 1e3 - r, -np.abs(r - {gap}))\n" for gap in (45, 50)]
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(
        {"edits": [{"files": {"heuristic.py": band}, "reply": "a band"} for band in bands], "ask_reply": "ok"}))
    (tmp_path / "bands.yaml").write_text(yaml.safe_dump({
        "name": "bands", "seed": 1, "storage": str(tmp_path / "runs"),
        "target": {"path": str(REPO / "targets" / "binpack_bestfit"), "kind": "program", "deterministic": True},
        "benchmark": {"name": "binpack", "train": "weibull", "train_items": 1000, "train_instances": 3,
                      "dev_instances": 4, "test": ["OR1"], "limit": 4},
        "algorithm": {"name": "darwinx", "worker": {"type": "scripted", "script": "script.yaml"},
                      "max_steps": 2, "islands": 2, "merge_every": 0, "screen_size": 3, "confirm_samples": 1,
                      "regression_tolerance": 1.0, "promote_on_dev": 3}}))
    r = start_run(str(tmp_path / "bands.yaml"), run_dir=str(tmp_path / "run"))
    summary = r.execute()
    decisions = r.records.decisions()
    admitted = [d["snapshot_id"] for d in of(decisions, "confirm") if d["accepted"]]
    promote, = of(decisions, "promote")
    assert len(admitted) == 2 and len(promote["shortlist"]) == 3, "both bands and the seed are on the shortlist"
    assert promote["reason_code"] == "highest_dev_mean" and summary["snapshot_id"] == promote["snapshot_id"]
    gap45, gap50 = admitted
    assert [m["snapshot_id"] for m in promote["shortlist"]] == [gap45, gap50, decisions[0]["snapshot_id"]]
    assert promote["snapshot_id"] == gap50, "the higher dev mean, not the higher train mean"
    assert promote["dev_mean"] == max(m["dev_mean"] for m in promote["shortlist"])
    dev = generated("weibull", "dev", 4, 1000)
    chosen, shortlist = quality.promoted_on_dev(tmp_path / "run", decisions, 3, dev)
    assert chosen == promote["snapshot_id"]
    assert [(m["snapshot_id"], m["dev_mean"]) for m in shortlist] == [
        (m["snapshot_id"], pytest.approx(m["dev_mean"], abs=1e-12)) for m in promote["shortlist"]]


def test_an_edit_leaving_a_symlink_out_of_the_checkout_is_a_decline(tmp_path, ray_session):
    """The worker's checkout is read where it was edited; a symlink leaving it is refused there
    and comes back as a recorded ``symlink_escape`` decline, and the search goes on."""
    table = {"splits": SPLITS, "scores": {"v0": {"t1": 0.2, "t2": 0.2, "t3": 0.2, "x1": 0.1},
                                          "v1": {"t1": 0.5, "t2": 0.2, "t3": 0.2, "x1": 0.4}}}
    edits = [{"links": {"notes.md": "/etc/passwd"}, "reply": "a link out"}, version("v1")]
    decisions, summary, records = run(scenario(tmp_path, table, edits, {"max_steps": 2, "merge_every": 0}))
    prompts = sorted(p.name for p in (records.local_path() / "prompts").iterdir())
    assert prompts == ["0001-mutate.md", "0002-distil.md", "0002-mutate.md"], "every prompt a worker was shown"
    decline, = of(decisions, "decline")
    assert (decline["step"], decline["reason_code"], decline["accepted"]) == (1, "symlink_escape", False)
    assert "points outside the tree" in decline["detail"]
    assert [(d["step"], d["accepted"]) for d in of(decisions, "confirm")] == [(2, True)]
    assert summary["snapshot_id"] == of(decisions, "confirm")[0]["snapshot_id"]


def test_gain_must_exceed_the_regression_by_the_ratio(tmp_path, ray_session):
    """Tolerance 0.2 allows both trades; ratio 2 admits only the one whose gain (0.3) is at least
    twice its regression (0.1), not the lateral one (gain 0.05 for a regression of 0.1)."""
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.5, "t2": 0.5, "t3": 0.5},
        "vL": {"t1": 0.65, "t2": 0.4, "t3": 0.5},
        "vG": {"t1": 0.9, "t2": 0.4, "t3": 0.5}}}
    params = {"max_steps": 2, "merge_every": 0, "exploration_probability": 0.0, "regression_tolerance": 0.2}
    decisions, _, _ = run(scenario(tmp_path / "ratio", table, [version("vL"), version("vG")],
                                   {**params, "regression_gain_ratio": 2.0}))
    assert [(d["step"], d["accepted"], d["reason_code"], d["parent_id"] == decisions[0]["snapshot_id"])
            for d in of(decisions, "confirm")] == [
        (1, False, "gain_below_ratio", True), (2, True, "admitted", True)]
    assert of(decisions, "confirm")[0]["reason"] == "gain under 2 x regression"

    decisions, _, _ = run(scenario(tmp_path / "off", table, [version("vL"), version("vG")], params))
    assert [(d["step"], d["accepted"]) for d in of(decisions, "confirm")] == [(1, True), (2, True)]


def test_a_child_that_screens_exactly_as_a_measured_version_is_not_confirmed(tmp_path, ray_session):
    """vT trades t2 for t1 and is admitted (tolerance 0.2); its child vB undoes the trade and
    scores exactly as the seed: it passes the screen against vT (t2 improves, regression 0.4 within
    the screen tolerance 1) but is declined as the seed's twin, without a confirm. Off, it is
    confirmed and rejected for its regression."""
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.5, "t2": 0.5, "t3": 0.5},
        "vT": {"t1": 0.9, "t2": 0.4, "t3": 0.5},
        "vB": {"t1": 0.5, "t2": 0.5, "t3": 0.5}}}
    params = {"max_steps": 2, "merge_every": 0, "exploration_probability": 0.0, "regression_tolerance": 0.2}
    edits = [version("vT"), version("vB")]
    decisions, _, records = run(scenario(tmp_path / "on", table, edits, {**params, "decline_known_screens": True}))
    seed_id = decisions[0]["snapshot_id"]
    first, second = of(decisions, "screen")
    assert [(d["step"], d["accepted"]) for d in of(decisions, "confirm")] == [(1, True)]
    assert (second["step"], second["parent_id"], second["accepted"], second["reason_code"]) == \
        (2, first["snapshot_id"], False, "screen_matches_known")
    assert second["reason"] == f"screen scores equal those of {seed_id}, already measured"
    assert second["regression_mass"] == pytest.approx(0.4) and second["gain"] == pytest.approx(-0.3)
    rows = records.rollouts()
    assert Counter(rows["snapshot_id"].to_pylist())[second["snapshot_id"]] == 3, "screened, never confirmed"

    decisions, _, _ = run(scenario(tmp_path / "off", table, edits, params))
    assert [(d["step"], d["accepted"], d["reason_code"]) for d in of(decisions, "confirm")] == [
        (1, True, "admitted"), (2, False, "regression_over_tolerance")]


def test_a_stalled_island_restarts_from_the_seed_and_promotion_sees_every_island(tmp_path, ray_session):
    """v1 is admitted at step 1; v2 and v3 (steps 2 and 3) are refused, so with restart_after 2
    island 1 begins after step 3 and step 4 edits the seed, although pure exploitation would pick
    v1. v4 is admitted in island 1 but scores below v1, which stays promoted. Without restarts,
    step 4 edits v1 as before."""
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.2, "t2": 0.2, "t3": 0.2, "x1": 0.1},
        "v1": {"t1": 0.8, "t2": 0.8, "t3": 0.8, "x1": 0.7},
        "v2": {"t1": 0.1, "t2": 0.1, "t3": 0.1},
        "v3": {"t1": 0.0, "t2": 0.0, "t3": 0.0},
        "v4": {"t1": 0.5, "t2": 0.5, "t3": 0.5}}}
    edits = [version(v) for v in ("v1", "v2", "v3", "v4")]
    params = {"max_steps": 4, "merge_every": 0, "exploration_probability": 0.0}
    decisions, summary, records = run(scenario(tmp_path / "on", table, edits, {**params, "restart_after": 2}))
    seed_id = decisions[0]["snapshot_id"]
    v1 = of(decisions, "confirm")[0]["snapshot_id"]
    restart, = of(decisions, "restart")
    assert (restart["step"], restart["island"], restart["reason_code"]) == (3, 1, "stalled")
    assert restart["left_mean"] == pytest.approx(0.8)
    assert [(d["step"], d["parent_id"]) for d in of(decisions, "screen")] == [
        (1, seed_id), (2, v1), (3, v1), (4, seed_id)]
    assert [(d["step"], d["accepted"]) for d in of(decisions, "confirm")] == [(1, True), (4, True)]
    assert summary["snapshot_id"] == v1, "the stalled island's best is still promoted"
    assert [a["island"] for a in records.read_state()["archive"]] == [0, 0, 0, 0, 1]
    seed_view = RunView(records.uri).candidates[0]
    assert [d["kind"] for d in seed_view.decisions] == ["seed"], "a restart is not one of the seed's decisions"

    decisions_off, _, _ = run(scenario(tmp_path / "off", table, edits, params))
    assert not of(decisions_off, "restart")
    assert of(decisions_off, "screen")[3]["parent_id"] == of(decisions_off, "confirm")[0]["snapshot_id"]

    # Stopped by a worker fault at step 4, after the restart was saved, and resumed: step 4
    # still edits the seed (the island comes back with the state), and the run decides exactly
    # what the uninterrupted run decided.
    r = stop_by_a_worker_fault(tmp_path / "stopped", table, edits, {**params, "restart_after": 2}, at=4)
    assert r.records.read_state()["islands"]["current"] == [1]
    resume_with_the_script_mended(r, tmp_path / "stopped", edits)
    assert comparable(r.records.decisions()) == comparable(decisions)


def test_islands_side_by_side_each_edit_their_own_lineage_and_promotion_sees_both(tmp_path, ray_session):
    """With two islands, odd steps draw parents from island 0 and even steps from island 1 (the
    seed is in both). v1 (step 1) wins island 0; step 2 still edits the seed, although pure
    exploitation would pick v1, and v2 starts island 1; steps 3 and 4 edit v1 and v2. Promotion
    picks the best of both: v4, island 1's. Without islands, steps 2-4 all edit the best member."""
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.2, "t2": 0.2, "t3": 0.2, "x1": 0.1},
        "v1": {"t1": 0.8, "t2": 0.8, "t3": 0.8, "x1": 0.7},
        "v2": {"t1": 0.5, "t2": 0.5, "t3": 0.5},
        "v3": {"t1": 0.85, "t2": 0.85, "t3": 0.85},
        "v4": {"t1": 0.9, "t2": 0.9, "t3": 0.9, "x1": 0.8}}}
    edits = [version(v) for v in ("v1", "v2", "v3", "v4")]
    params = {"max_steps": 4, "merge_every": 0, "exploration_probability": 0.0}
    decisions, summary, records = run(scenario(tmp_path / "on", table, edits, {**params, "islands": 2}))
    seed_id = decisions[0]["snapshot_id"]
    confirmed = {d["step"]: d["snapshot_id"] for d in of(decisions, "confirm") if d["accepted"]}
    assert sorted(confirmed) == [1, 2, 3, 4]
    assert [(d["step"], d["parent_id"]) for d in of(decisions, "screen")] == [
        (1, seed_id), (2, seed_id), (3, confirmed[1]), (4, confirmed[2])]
    assert summary["snapshot_id"] == confirmed[4]
    state = records.read_state()
    assert [a["island"] for a in state["archive"]] == [0, 0, 1, 0, 1]
    assert state["islands"]["current"] == [0, 1] and not of(decisions, "restart")

    decisions_off, _, _ = run(scenario(tmp_path / "off", table, edits, params))
    off = {d["step"]: d["snapshot_id"] for d in of(decisions_off, "confirm") if d["accepted"]}
    assert [d["parent_id"] for d in of(decisions_off, "screen")][1:] == [off[1], off[1], off[3]]


def test_promotion_on_dev_chooses_among_the_best_train_means_on_instances_no_gate_saw(tmp_path, ray_session):
    """Two islands admit v1 (train 0.9) and v2 (train 0.8), both children of the seed. v1 fits the
    train tasks and loses on dev; v2 holds up there. With promote_on_dev 2 the two best train
    means are measured on dev, and v2 is promoted; with 1, only v1 is on the shortlist. The seed,
    third by train mean, is never measured on dev, and dev never reaches a gate."""
    splits = {"train": ["t1", "t2", "t3"], "dev": ["d1", "d2"], "test": ["x1"]}
    table = {"splits": splits, "scores": {
        "v0": {"t1": 0.5, "t2": 0.5, "t3": 0.5, "d1": 0.9, "d2": 0.9, "x1": 0.5},
        "v1": {"t1": 0.9, "t2": 0.9, "t3": 0.9, "d1": 0.2, "d2": 0.3, "x1": 0.2},
        "v2": {"t1": 0.8, "t2": 0.8, "t3": 0.8, "d1": 0.7, "d2": 0.6, "x1": 0.7}}}
    edits = [version("v1"), version("v2")]
    params = {"max_steps": 2, "merge_every": 0, "islands": 2, "confirm_samples": 1}
    decisions, summary, records = run(scenario(tmp_path / "k2", table, edits, {**params, "promote_on_dev": 2}))
    v1, v2 = (d["snapshot_id"] for d in of(decisions, "confirm") if d["accepted"])
    promote, = of(decisions, "promote")
    assert summary["snapshot_id"] == promote["snapshot_id"] == v2
    assert promote["reason_code"] == "highest_dev_mean" and promote["dev_mean"] == pytest.approx(0.65)
    assert [(m["snapshot_id"], m["train_mean"], m["dev_mean"]) for m in promote["shortlist"]] == [
        (v1, pytest.approx(0.9), pytest.approx(0.25)), (v2, pytest.approx(0.8), pytest.approx(0.65))]
    dev = records.rollouts().filter(pc.equal(records.rollouts()["split"], "dev"))
    assert sorted(set(dev["snapshot_id"].to_pylist())) == sorted([v1, v2]), "the seed is not on the shortlist"
    assert all("d1" not in d.get("means", {}) for d in decisions if d["kind"] in ("screen", "confirm"))

    decisions, summary, _ = run(scenario(tmp_path / "k1", table, edits, {**params, "promote_on_dev": 1}))
    promote, = of(decisions, "promote")
    assert summary["snapshot_id"] == promote["snapshot_id"] == v1
    assert [m["snapshot_id"] for m in promote["shortlist"]] == [v1]

    decisions, summary, _ = run(scenario(tmp_path / "off", table, edits, params))
    assert of(decisions, "promote")[0]["reason_code"] == "highest_train_mean" and summary["snapshot_id"] == v1


def test_a_graft_donor_is_another_admitted_member_shown_to_the_worker_and_never_a_gate_reference(tmp_path, ray_session):
    """With graft_probability 1 every mutation that has another admitted member (not the seed,
    not its parent) gets one as its donor: step 3 edits v2, the best lineage, with v1 beside it.
    The donor is named in the prompt and recorded as the child's ``graft_id`` (``donor_id`` stays
    a recombination's, which reports draw as a merge), but the gates measure the child against
    its parent alone. Steps 1 and 2 have no other member to draw, so their
    prompts are exactly the plain mutation prompt."""
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.2, "t2": 0.2, "t3": 0.2, "x1": 0.2},
        "v1": {"t1": 0.6, "t2": 0.2, "t3": 0.2, "x1": 0.3},
        "v2": {"t1": 0.6, "t2": 0.6, "t3": 0.2, "x1": 0.4},
        "v3": {"t1": 0.9, "t2": 0.6, "t3": 0.2, "x1": 0.5}}}
    edits = [version("v1"), version("v2"), version("v3")]
    params = {"max_steps": 3, "merge_every": 0, "confirm_samples": 1, "exploration_probability": 0.0}
    decisions, _, records = run(scenario(tmp_path / "graft", table, edits, {**params, "graft_probability": 1.0}))
    screens = of(decisions, "screen")
    v1, v2, v3 = (d["snapshot_id"] for d in screens)
    assert [d["parent_id"] for d in screens[1:]] == [v1, v2]
    assert [d["donor_id"] for d in screens] == [None, None, None], "donor_id names a recombination's donor"
    assert [d.get("graft_id") for d in of(decisions, "screen") + of(decisions, "confirm")] == [None, None, v1] * 2
    archive = [json.loads(line) for line in (records.local_path() / "archive.jsonl").read_text().splitlines()]
    assert [(a["graft_id"], a["kind"]) for a in archive[1:]] == [(None, "mutation"), (None, "mutation"), (v1, "mutation")]
    assert screens[2]["reference_means"] == screens[2]["parent_means"] == {"t1": 0.6, "t2": 0.6, "t3": 0.2}
    assert [d["snapshot_id"] for d in of(decisions, "confirm") if d["accepted"]] == [v1, v2, v3]
    prompts = {p.name: p.read_text() for p in (records.local_path() / "prompts").iterdir() if "mutate" in p.name}
    assert f"another admitted member, {v1} (train mean 0.3333)" in prompts["0003-mutate.md"]
    assert ".rsi_refs/donor" in prompts["0003-mutate.md"]

    plain, _, plain_records = run(scenario(tmp_path / "plain", table, edits, params))
    assert [d.get("graft_id") for d in of(plain, "screen")] == [None, None, None]
    plain_prompts = {p.name: p.read_text() for p in (plain_records.local_path() / "prompts").iterdir()
                     if "mutate" in p.name}

    def untimed(prompt: str) -> list[str]:
        return [line for line in prompt.splitlines() if "sized_at" not in line]  # traces carry clock times

    for name in ("0001-mutate.md", "0002-mutate.md"):
        assert "another admitted member" not in prompts[name]
        assert untimed(prompts[name]) == untimed(plain_prompts[name])
    assert "another admitted member" not in plain_prompts["0003-mutate.md"]


def test_a_saved_run_from_before_lanes_resumes_in_its_island():
    """State saved when islands were one scalar each reads as one lane; its next restart is due
    exactly restart_after steps after its last rise."""
    from algorithms.darwinx.islands import Islands

    islands = Islands.from_state(600, 1, {"restart_after": 600, "current": 2, "best_mean": 0.9, "best_step": 1200})
    assert (islands.count, islands.current, islands.best_mean, islands.best_step) == (1, [2], [0.9], [1200])
    assert islands.due(1799, 3000) == [] and islands.due(1800, 3000) == [0] and islands.due(3000, 3000) == []
    islands.restart(0, 1800, 0.5)
    assert (islands.current, islands.best_mean, islands.best_step) == ([3], [0.5], [1800])

def test_every_lane_merges_at_the_cadence_of_its_own_steps():
    """Counted in steps of the run, merges every 6 steps would all fall in lane 1 of two."""
    from algorithms.darwinx.islands import Islands

    two = Islands(0, 2)
    merging = [s for s in range(1, 25) if two.own_step(s) % 6 == 0]
    assert merging == [11, 12, 23, 24] and {two.lane(s) for s in merging} == {0, 1}
    assert [s for s in range(1, 25) if Islands(0, 1).own_step(s) % 6 == 0] == [6, 12, 18, 24]

def test_a_stalled_lane_restarts_alone(tmp_path, ray_session):
    """Two islands, restart_after 2: island 1's first edit (step 2) is refused and nothing else
    comes to it, so after step 4 its lane starts island 2 from the seed, while island 0, which
    rose at step 3, goes on; step 6 (lane 1) then edits the seed."""
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.2, "t2": 0.2, "t3": 0.2, "x1": 0.1},
        "v1": {"t1": 0.5, "t2": 0.5, "t3": 0.5},
        "v2": {"t1": 0.1, "t2": 0.1, "t3": 0.1},
        "v3": {"t1": 0.8, "t2": 0.8, "t3": 0.8, "x1": 0.7},
        "v4": {"t1": 0.0, "t2": 0.0, "t3": 0.0},
        "v5": {"t1": 0.9, "t2": 0.9, "t3": 0.9},
        "v6": {"t1": 0.3, "t2": 0.3, "t3": 0.3}}}
    edits = [version(v) for v in ("v1", "v2", "v3", "v4", "v5", "v6")]
    params = {"max_steps": 6, "merge_every": 0, "exploration_probability": 0.0, "islands": 2, "restart_after": 2}
    decisions, _, records = run(scenario(tmp_path, table, edits, params))
    seed_id = decisions[0]["snapshot_id"]
    restart, = of(decisions, "restart")
    assert (restart["step"], restart["lane"], restart["left_island"], restart["island"]) == (4, 1, 1, 2)
    screens = {d["step"]: d["parent_id"] for d in of(decisions, "screen")}
    confirmed = {d["step"]: d["snapshot_id"] for d in of(decisions, "confirm") if d["accepted"]}
    assert screens[5] == confirmed[3] and screens[6] == seed_id
    assert records.read_state()["islands"]["current"] == [0, 2]


def test_a_stalled_lane_restarts_from_the_best_of_the_other_islands(tmp_path, ray_session):
    """Two islands, restart_after 2, restart_from best. Island 0 holds the run's best (v1, 0.8)
    and stalls first (after step 5): it goes on, as nothing elsewhere is better. Island 1 (v2,
    0.5) stalls after step 6: its lane starts island 2 from v1, its founder, so step 8 (lane 1)
    edits v1 where a restart from the seed would edit the seed."""
    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.2, "t2": 0.2, "t3": 0.2, "x1": 0.1},
        "v1": {"t1": 0.8, "t2": 0.8, "t3": 0.8, "x1": 0.7},
        "v2": {"t1": 0.5, "t2": 0.5, "t3": 0.5},
        **{f"v{i}": {"t1": 0.0, "t2": 0.0, "t3": 0.0} for i in range(3, 9)}}}
    edits = [version(f"v{i}") for i in range(1, 9)]
    params = {"max_steps": 8, "merge_every": 0, "exploration_probability": 0.0, "islands": 2, "restart_after": 2}
    decisions, _, records = run(scenario(tmp_path / "best", table, edits, {**params, "restart_from": "best"}))
    seed_id = decisions[0]["snapshot_id"]
    confirmed = {d["step"]: d["snapshot_id"] for d in of(decisions, "confirm") if d["accepted"]}
    v1 = confirmed[1]
    restart, = of(decisions, "restart")
    assert (restart["step"], restart["lane"], restart["left_island"], restart["island"]) == (6, 1, 1, 2)
    assert restart["snapshot_id"] == v1 and f"starts from {v1} of island 0" in restart["reason"]
    screens = {d["step"]: d["parent_id"] for d in of(decisions, "screen")}
    assert screens[6] == confirmed[2] and screens[7] == v1 and screens[8] == v1
    state = records.read_state()["islands"]
    assert state["current"] == [0, 2] and state["founder"] == [None, v1]

    # Stopped by a worker fault at step 7, after the restart from v1 was saved, and resumed: the
    # founder comes back with the state, so step 8 still edits v1 and the run decides exactly
    # what the uninterrupted run decided.
    r = stop_by_a_worker_fault(tmp_path / "stopped", table, edits, {**params, "restart_from": "best"}, at=7)
    saved = r.records.read_state()["islands"]
    assert saved["current"] == [0, 2] and saved["founder"] == [None, v1], "snapshots are named by content"
    resume_with_the_script_mended(r, tmp_path / "stopped", edits)
    assert comparable(r.records.decisions()) == comparable(decisions)

    decisions, _, _ = run(scenario(tmp_path / "seed", table, edits, params))
    assert [(d["step"], d["lane"], d["snapshot_id"]) for d in of(decisions, "restart")] == [
        (5, 0, seed_id), (6, 1, seed_id)]
    assert {d["step"]: d["parent_id"] for d in of(decisions, "screen")}[8] == seed_id


def test_restarting_from_the_best_needs_islands_and_restarts():
    from algorithms.darwinx.params import DarwinXParams

    with pytest.raises(ValueError, match="restart_from: best needs islands >= 2 and restart_after > 0"):
        DarwinXParams(name="darwinx", islands=1, restart_after=5, restart_from="best")
    with pytest.raises(ValueError, match="restart_from: best needs"):
        DarwinXParams(name="darwinx", islands=2, restart_from="best")
    assert DarwinXParams(name="darwinx", islands=2, restart_after=5, restart_from="best").restart_from == "best"
