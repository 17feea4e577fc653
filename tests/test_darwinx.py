"""DarwinX decision scenarios on the table benchmark with the scripted worker: every outcome is
known in advance, so each gate is checked decision by decision through the real runner."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from rsi.cli import main
from rsi.scripted_server import ScriptedServer
from rsi.runner import start_run
from _runs import assert_no_secret, of, run

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-darwinx-test-key-0123456789"
# Ray worker processes see only the environment from before Ray starts: set it at import.
os.environ["RSI_TEST_DARWINX_KEY"] = KEY


def scenario(tmp_path: Path, table: dict, edits: list[dict], algorithm: dict, ask_reply: str = "learned") -> Path:
    shutil.copytree(REPO / "targets" / "table_demo", tmp_path / "target")
    (tmp_path / "table.yaml").write_text(yaml.safe_dump(table))
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"edits": edits, "ask_reply": ask_reply}))
    cfg = {
        "name": "dx", "seed": 7, "storage": str(tmp_path / "runs"),
        "target": {"path": "target", "kind": "program", "entry": "solve.py"},
        "benchmark": {"name": "table", "path": "table.yaml"},
        "algorithm": {"name": "darwinx", "worker": {"type": "scripted", "script": "script.yaml"},
                      "screen_size": len(table["splits"]["train"]), **algorithm},
    }
    path = tmp_path / "darwinx.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path



def version(v: str) -> dict:
    return {"files": {"VERSION": v + "\n"}, "reply": f"switch to {v}"}



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
                                               {"max_steps": 4, "merge_every": 0, "exploration_probability": 0.5}))
    admitted = {decisions[0]["snapshot_id"]}
    for d in decisions:
        if d["kind"] == "screen":
            assert d["parent_id"] in admitted, "only confirmed members become parents"
        if d["kind"] == "confirm" and d["accepted"]:
            admitted.add(d["snapshot_id"])
            assert set(d["uncertainty"]) == {"wins", "losses", "sign_test_p", "bootstrap_gain_95"}
    assert len(admitted) >= 2
    table_rows = records.rollouts()
    assert table_rows.num_rows == len(pq.read_table(records.local_path() / "rollouts").to_pylist())
    assert set(summary["means"]) == {"train", "test"}
    cfg = yaml.safe_load((records.local_path() / "config.yaml").read_text())
    assert cfg["algorithm"]["name"] == "darwinx"


@pytest.mark.parametrize("override,needle", [
    (["--algorithm.confirm_samples", "1", "--algorithm.screen_samples", "2"], "confirm_samples (1) must be >= screen_samples"),
    (["--algorithm.solved_threshold", "0"], "solved_threshold"),
    (["--algorithm.solved_threshold", "1.5"], "solved_threshold"),
    (["--algorithm.screen_size", "9"], "larger than the train split"),
    (["--algorithm.exploration_probability", "2"], "exploration_probability"),
    (["--algorithm.merge_every", "-1"], "merge_every"),
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
    def call(name, **arguments):
        return {"tool_calls": [{"name": name, "arguments": arguments}]}

    table = {"splits": SPLITS, "scores": {
        "v0": {"t1": 0.5, "t2": 0.5, "t3": 0.5, "x1": 0.0}, "v1": {"t1": 1.0, "t2": 0.5, "t3": 0.5, "x1": 1.0}}}
    steps = [call("read_file", path="VERSION"), call("write_file", path="VERSION", content="v1\n"),
             call("finish", summary="answer v1"), "v1 fixed t1; keep it"]
    with ScriptedServer(steps, api_key=KEY) as srv:
        path = scenario(tmp_path, table, [], {"max_steps": 1, "merge_every": 0})
        cfg = yaml.safe_load(path.read_text())
        cfg["algorithm"]["worker"] = {"type": "agent", "llm": {
            "provider": "openai", "model": "scripted-model", "base_url": srv.base_url,
            "api_key_env": "RSI_TEST_DARWINX_KEY", "retry_backoff_s": 0.01}}
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
