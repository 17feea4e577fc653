"""ADAS through the real runner: the table benchmark with the scripted worker for exact decision
scenarios, and the built-in agent worker against the scripted model server (real openai SDK)
for directory edits and what the meta agent's prompts contain."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _runs import agent_worker, assert_no_secret, of, run, scripted_edit, table_scenario, tool_call

from rsi.driver.cli import main
from rsi.records import RunRecords
from rsi.testing.scripted_server import ScriptedServer

SPLITS = {"train": [], "dev": ["d1", "d2"], "test": ["x1"]}
SCORES = {
    "v0": {"d1": 0.5, "d2": 0.5, "x1": 0.1},
    "v1": {"d1": 1.0, "d2": 0.5, "x1": 0.9},
    "v2": {"d1": 0.5, "d2": 0.0, "x1": 1.0},
}
KEY = "adas-test-key-5be3e1f0"
# Ray worker processes get the environment Ray started with, so the key variable is set when
# this module is collected, before the session's Ray starts (as a user exports it before `rsi run`).
os.environ["RSI_TEST_ADAS_KEY"] = KEY


def scenario(tmp_path: Path, algorithm: dict, edits: list[dict] | None = None, worker: dict | None = None,
             splits: dict = SPLITS, budget: dict | None = None) -> Path:
    return table_scenario(tmp_path, "adas", name="adas", seed=3, table={"splits": splits, "scores": SCORES},
                          edits=edits or [], ask_reply="unused", params=algorithm, worker=worker, budget=budget)


def edit(version: str | None = None, reply: str = "", **files) -> dict:
    return scripted_edit(reply, version, **files)


def dev_rows(records: RunRecords, snapshot_id: str) -> int:
    rows = records.rollouts()
    return sum(1 for s, sp in zip(rows["snapshot_id"].to_pylist(), rows["split"].to_pylist())
               if s == snapshot_id and sp == "dev")


def test_leader_parent_ties_and_worse_designs_archived(tmp_path, ray_session):
    edits = [edit("v1", "<DESIGN>d1 first</DESIGN>"),
             edit("v2", "<DESIGN>worse</DESIGN>"),
             edit(reply="<DESIGN>notes only</DESIGN>", **{"notes.md": "a classifiable new file\n"}),
             edit("v0", "<DESIGN>back to the seed</DESIGN>")]
    decisions, summary, records = run(scenario(tmp_path, {"max_steps": 4, "num_reflections": 0}, edits))
    seed, = of(decisions, "seed")
    admits = of(decisions, "admit")
    assert [(d["step"], d["score"], d["accepted"]) for d in admits] == [
        (1, 0.75, True), (2, 0.25, False), (3, 0.75, False), (4, 0.5, False)]
    leader = admits[0]["snapshot_id"]
    assert admits[0]["parent_id"] == seed["snapshot_id"]
    assert [d["parent_id"] for d in admits[1:]] == [leader] * 3, "parent = archive leader, not the last candidate"
    # Step 3 only added notes.md to the leader's checkout: it scores the leader's 0.75, and the tie
    # keeps the earlier design.
    notes = records.get_snapshot(admits[2]["snapshot_id"])
    assert notes.text("VERSION") == "v1\n" and notes.files["notes.md"].component == "docs"
    promote, = of(decisions, "promote")
    assert promote["snapshot_id"] == leader == summary["snapshot_id"]
    assert promote["archive"] == [{"account": "The target as given: the starting design, before any search.",
                                   "score": 0.5},
                                  {"account": "d1 first", "score": 0.75}, {"account": "worse", "score": 0.25},
                                  {"account": "notes only", "score": 0.75},
                                  {"account": "back to the seed", "score": 0.5}]
    assert promote["archive_snapshot_ids"][1] == leader and promote["declined_designs"] == []
    assert [e["score"] for e in records.read_lines("archive.jsonl")] == [0.5, 0.75, 0.25, 0.75, 0.5]
    design = (records.local_path() / "prompts/0004-design.md").read_text()
    assert all(json.dumps(e) in design for e in promote["archive"][:4]), "the whole archive reaches the next prompt"
    assert "| version | `VERSION` |" in design and "| docs | `*.md` |" in design
    test, = of(decisions, "test")
    assert test["snapshot_id"] == leader and summary["means"]["test"] == 0.9
    assert not any("x1" in p.read_text() for p in (records.local_path() / "prompts").iterdir())


def test_reflections_revise_the_same_checkout_and_evaluate_once(tmp_path, ray_session):
    edits = [edit("v1", "<DESIGN>draft</DESIGN>", **{"notes.md": "draft\n"}),
             edit(reply="thinking it over <DESIGN>revised</DESIGN>", **{"notes.md": "revised\n"}),
             edit(reply="")]
    decisions, _, records = run(scenario(tmp_path, {"max_steps": 1, "num_reflections": 2}, edits))
    admit, = of(decisions, "admit")
    child = records.get_snapshot(admit["snapshot_id"])
    assert child.text("VERSION") == "v1\n", "the first edit survives the reflections: one checkout"
    assert child.text("notes.md") == "revised\n"
    assert admit["account"] == "revised", "an empty last reply keeps the last description given"
    assert dev_rows(records, child.snapshot_id) == 2, "evaluated once, on the two dev tasks"
    prompts = records.local_path() / "prompts"
    assert sorted(p.name for p in prompts.iterdir()) == ["0001-design.md", "0001-reflect-1.md", "0001-reflect-2.md"]
    assert "<DESIGN>\ndraft\n</DESIGN>" in (prompts / "0001-reflect-1.md").read_text()
    assert "<DESIGN>\nrevised\n</DESIGN>" in (prompts / "0001-reflect-2.md").read_text()
    assert "| version | `VERSION` |" in (prompts / "0001-reflect-2.md").read_text()


def test_invalid_designs_declined_and_the_run_goes_on(tmp_path, ray_session):
    edits = [edit(reply="<DESIGN>stray</DESIGN>", **{"stray.txt": "matches no rule\n"}),
             edit(reply="<DESIGN>nothing</DESIGN>"),
             edit(reply="<DESIGN>chatty</DESIGN>", **{"solve.py": "print('thinking...')\nprint('v1')\n"}),
             edit("v1", "Switched the answer to v1; no tags in this reply.")]
    decisions, summary, records = run(scenario(tmp_path, {"max_steps": 4, "num_reflections": 0}, edits))
    declines = of(decisions, "decline")
    assert [(d["step"], d["reason"]) for d in declines] == [(1, "unclassified_path"), (2, "no_change")]
    # A harness that prints something other than its result object loses with score 0; the run goes on.
    broken, admit = of(decisions, "admit")
    assert (broken["step"], broken["score"], broken["accepted"]) == (3, 0.0, False)
    rows = records.rollouts().to_pylist()
    assert {r["status"] for r in rows if r["snapshot_id"] == broken["snapshot_id"]} == {"protocol_error"}
    assert admit["step"] == 4 and admit["accepted"] is True and admit["parent_id"] == broken["parent_id"]
    assert admit["account"] == "Switched the answer to v1; no tags in this reply."
    promote, = of(decisions, "promote")
    assert len(promote["archive"]) == 3, "declined designs have no score and no archive row"
    assert [(d["step"], d["reason"], d["account"]) for d in promote["declined_designs"]] == [
        (1, "unclassified_path", "stray"), (2, "no_change", "nothing")]
    assert summary["snapshot_id"] == admit["snapshot_id"]
    steps = [d["step"] for d in decisions]
    assert steps == sorted(steps)
    # num_reflections: 0 skips review: one scripted edit per step, no reflection prompt.
    assert sorted(p.name for p in (records.local_path() / "prompts").iterdir()) == [
        "0001-design.md", "0002-design.md", "0003-design.md", "0004-design.md"]


def test_agent_worker_edits_the_directory_and_sees_the_archive(tmp_path, ray_session):
    call = tool_call
    steps = [call("write_file", path="VERSION", content="v1\n"), call("finish", summary="<DESIGN>v1 answers</DESIGN>"),
             call("read_file", path="VERSION"), call("finish", summary="<DESIGN>v1 answers, reviewed</DESIGN>"),
             call("write_file", path="VERSION", content="v2\n"), call("finish", summary="<DESIGN>try v2</DESIGN>"),
             call("finish", summary="<DESIGN>try v2, reviewed</DESIGN>")]
    budget = {"max_calls": 5}  # 4 model calls in step 1, 3 in step 2: step 3 is never started
    with ScriptedServer(steps, api_key=KEY) as srv:
        worker = agent_worker(srv.base_url, "RSI_TEST_ADAS_KEY")
        decisions, summary, records = run(scenario(tmp_path, {"max_steps": 3, "num_reflections": 1}, worker=worker,
                                                   budget=budget))
        requests = [r["body"] for r in srv.requests]
    first, second = of(decisions, "admit")
    assert (first["accepted"], first["account"], first["score"]) == (True, "v1 answers, reviewed", 0.75)
    assert (second["accepted"], second["score"], second["parent_id"]) == (False, 0.25, first["snapshot_id"])
    assert summary["snapshot_id"] == first["snapshot_id"]
    stop, = of(decisions, "stop")
    assert stop["step"] == 2 and stop["usage"]["calls"] == 7 and "max_calls 5" in stop["reason"]
    assert records.get_snapshot(first["snapshot_id"]).text("VERSION") == "v1\n"
    assert len(requests) == 7 and all(r["model"] == "scripted-model" for r in requests)
    reflection = requests[2]["messages"][1]["content"]
    assert "v1 answers" in reflection and "review 1 of 1" in reflection
    design2 = requests[4]["messages"][1]["content"]
    assert '{"account": "v1 answers, reviewed", "score": 0.75}' in design2
    assert '{"account": "The target as given: the starting design, before any search.", "score": 0.5}' in design2
    assert "| solver | `solve.py` |" in design2
    assert_no_secret(records.local_path(), KEY)


@pytest.mark.parametrize("override,needle", [
    (["--algorithm.max_steps", "0"], "max_steps"),
    (["--algorithm.num_reflections", "-1"], "num_reflections"),
    (["--algorithm.num_reflections", "11"], "num_reflections"),
    (["--algorithm.max_evidence_chars", "100"], "max_evidence_chars"),
    (["--algorithm.mode", "fast"], "unknown key 'algorithm.mode'"),
    (["--algorithm.worker", "{type: llm, llm: {provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1'}}"],
     "text-only worker"),
])
def test_bad_parameters_exit_2_before_anything_starts(tmp_path, capsys, override, needle):
    path = scenario(tmp_path, {"max_steps": 1})
    assert main(["run", str(path), *override]) == 2
    err = capsys.readouterr().err
    assert needle in err, err
    assert not (tmp_path / "runs").exists()


def test_empty_dev_is_a_startup_error(tmp_path, capsys):
    path = scenario(tmp_path, {"max_steps": 1}, splits={"train": ["d1", "d2"], "dev": [], "test": ["x1"]})
    assert main(["run", str(path)]) == 2
    assert "split 'dev' is empty" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_config_validates_with_its_key_variables_set(repo, monkeypatch, capsys):
    for name in ("OPENAI_API_KEY",):
        monkeypatch.setenv(name, "dummy-value-for-validation")
    assert main(["validate", str(repo / "configs" / "adas.yaml")]) == 0, capsys.readouterr().err
    assert "algorithm adas, benchmark qa" in capsys.readouterr().out
    monkeypatch.delenv("OPENAI_API_KEY")
    assert main(["validate", str(repo / "configs" / "adas.yaml")]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err
