"""AHE through the real runner: the table benchmark with the scripted worker for exact verdict
and decline scenarios, and one end-to-end run of a real MiniAgent subprocess on the qa
benchmark, edited by the built-in agent worker, both models served by scripted servers on
127.0.0.1 through the real openai SDK."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from _runs import agent_worker, assert_no_secret, of, run, table_scenario
from _runs import scripted_edit as edit

from algorithms.ahe.manifest import ManifestError, parse_manifest
from rsi.driver.cli import main
from rsi.driver.evaluate import evaluate_target
from rsi.driver.runner import start_run
from rsi.errors import WorkerError
from rsi.records import RunRecords
from rsi.testing.scripted_server import ScriptedServer, request_text

REPO = Path(__file__).resolve().parents[1]
SPLITS = {"train": ["t1", "t2", "t3"], "dev": [], "test": ["x1"]}
SCORES = {
    "v0": {"t1": 1.0, "t2": 0.0, "t3": 0.0, "x1": 0.0},
    "v1": {"t1": 1.0, "t2": 1.0, "t3": 0.0, "x1": 1.0},
    "v2": {"t1": 0.0, "t2": 1.0, "t3": 0.0, "x1": 0.5},
}
SECRET = "ahe-secret-value-7d1c0b"
WORKER_KEY, TARGET_KEY = "ahe-worker-key-41f9aa", "ahe-target-key-93be07"
# Ray worker processes get the environment Ray started with, so the key variables are set when
# this module is collected, before the session's Ray starts (as a user exports them before
# `rsi run`): the worker actor and the MiniAgent rollouts read them there.
os.environ.update({"RSI_TEST_AHE_SECRET": SECRET, "RSI_TEST_AHE_WORKER_KEY": WORKER_KEY,
                   "RSI_TEST_AHE_TARGET_KEY": TARGET_KEY})


def manifest(changes=None, drop: str | None = None, **extra) -> str:
    body = {"failure_evidence": ["t2 answered v0"], "root_cause": "the wrong version", "targeted_fix": "switch",
            **({"changes": changes} if changes is not None else {}), **extra}
    body.pop(drop, None)
    return f"Edited.\n<MANIFEST>\n{json.dumps(body)}\n</MANIFEST>"


def change(path: str, fix=(), risk=()) -> dict:
    return {"path": path, "fix_tasks": list(fix), "risk_tasks": list(risk)}


def scenario(tmp_path: Path, algorithm: dict, edits: list[dict], splits=SPLITS, replicas: int = 1,
             worker: dict | None = None) -> Path:
    return table_scenario(tmp_path, "ahe", name="ahe", seed=5, table={"splits": splits, "scores": SCORES},
                          edits=edits, ask_reply="scripted report", params=algorithm,
                          worker=worker or {"type": "scripted", "script": "script.yaml", "replicas": replicas},
                          # A key variable named anywhere in the config makes its value a secret no
                          # commit may hold.
                          target={"model": {"api_key_env": "RSI_TEST_AHE_SECRET"}})


def prompt(records: RunRecords, name: str) -> str:
    return (records.local_path() / "prompts" / f"{name}.md").read_text()


def test_every_edit_kept_with_verdicts_rollback_sources_and_debugger(tmp_path, ray_session):
    edits = [edit(manifest([change("VERSION", fix=["t2"])]), "v1"),
             edit(manifest([change("VERSION", fix=["t3"]), change("notes.md")]), "v2", **{"notes.md": "idea\n"}),
             edit(manifest(predicted_impact={"fix_tasks": ["t1"], "risk_tasks": ["t2"]}), "v1", **{"notes.md": None})]
    decisions, summary, records = run(scenario(tmp_path, {"max_steps": 3, "debugger_max_tasks": 2}, edits, replicas=2))
    seed, = of(decisions, "seed")
    k1, k2, k3 = of(decisions, "keep")
    assert (k1["parent_id"], k2["parent_id"], k3["parent_id"]) == (seed["snapshot_id"], k1["snapshot_id"],
                                                                  k2["snapshot_id"])
    assert k1["fail_to_pass"] == ["t2"] and [v["verdict"] for v in k1["verdicts"]] == ["EFFECTIVE"]
    assert records.get_snapshot(k1["snapshot_id"]).text("VERSION") == "v1\n", "the worker's edit is adopted"
    # Worse (t1 regressed) and kept all the same; the regression nobody predicted is reported
    # apart, not folded into a change's verdict.
    assert k2["accepted"] is True and k2["train_mean"] < k2["parent_train_mean"]
    assert k2["pass_to_fail"] == ["t1"] and k2["unattributed_regressions"] == ["t1"]
    assert [(v["path"], v["verdict"]) for v in k2["verdicts"]] == [("VERSION", "INEFFECTIVE"), ("notes.md", "INEFFECTIVE")]
    assert records.get_snapshot(k2["snapshot_id"]).files["notes.md"].component == "docs"
    # Step 3 sees step 2's verdicts and the original contents to roll back to.
    evolve3 = prompt(records, "0003-evolve")
    assert '"unattributed_regressions": [\n  "t1"\n ]' in evolve3 and '"verdict": "INEFFECTIVE"' in evolve3
    assert "### VERSION\n```\nv1\n\n```" in evolve3 and "### notes.md\n(did not exist before" in evolve3
    assert "KEEP it, IMPROVE it, or ROLLBACK it" in evolve3
    # predicted_impact without changes expands to every changed file (the deletion included).
    assert k3["changed_paths"] == ["VERSION", "notes.md"]
    assert [(v["path"], v["fix_tasks"], v["risk_tasks"], v["verdict"]) for v in k3["verdicts"]] == [
        ("VERSION", ["t1"], ["t2"], "EFFECTIVE"), ("notes.md", ["t1"], ["t2"], "EFFECTIVE")]
    # Debugger: failures first, capped, one synthesis, both in the Evolve Agent's prompt.
    names = sorted(p.name for p in (records.local_path() / "prompts").glob("0001-*"))
    assert names == ["0001-debug-000-t2.md", "0001-debug-001-t3.md", "0001-evolve.md", "0001-synthesis.md"]
    synthesis = prompt(records, "0001-synthesis")
    assert synthesis.index("### t2 (0.000, ok)\nscripted report") < synthesis.index("### t3 (0.000, ok)")
    assert "### t1" not in synthesis
    evolve1 = prompt(records, "0001-evolve")
    assert "### Debugger synthesis\nscripted report" in evolve1 and "| version | `VERSION` |" in evolve1
    assert "(none yet: this is the first edit)" in evolve1
    promote, = of(decisions, "promote")
    assert promote["snapshot_id"] == k3["snapshot_id"] == summary["snapshot_id"]
    assert [e["snapshot_id"] for e in promote["lineage"]] == [seed["snapshot_id"]] + [k["snapshot_id"] for k in (k1, k2, k3)]
    assert summary["means"]["test"] == 1.0
    assert not of(decisions, "stop")


def test_invalid_edits_declined_then_early_stop(tmp_path, ray_session):
    valid = manifest([change("VERSION", fix=["t2"])])
    edits = [edit("I switched the version.", "v1"),
             edit(manifest([change("VERSION", fix=["t2"])], drop="root_cause"), "v1"),
             edit(valid, "v1", **{"notes.md": "undeclared\n"}),
             edit(manifest([change("VERSION", fix=["t2"]), change("solve.py")]), "v1"),
             edit(valid),
             edit(valid, **{"stray.txt": "matches no rule\n"}),
             edit(valid, "v1", **{"notes.md": f"key={SECRET}\n"}),
             edit(valid, "v1", **{"__pycache__/solve.cpython-311.pyc": "bytecode"}),
             edit(valid, "v2")]
    decisions, summary, records = run(scenario(tmp_path, {"max_steps": 9, "target_score": 0.6, "use_debugger": False},
                                               edits))
    declines = of(decisions, "decline")
    assert [(d["step"], d["reason"]) for d in declines] == [
        (1, "manifest_not_json"), (2, "manifest_missing_fields"), (3, "manifest_path_mismatch"),
        (4, "manifest_path_mismatch"), (5, "no_change"), (6, "unclassified_path"), (7, "secret_leak")]
    assert "changed but not declared: ['notes.md']" in declines[2]["detail"]
    assert "declared but not changed: ['solve.py']" in declines[3]["detail"]
    assert "root_cause" in declines[1]["detail"]
    keep, = of(decisions, "keep")
    assert keep["step"] == 8 and keep["discarded_runtime_files"] == ["__pycache__"]
    assert list(records.get_snapshot(keep["snapshot_id"]).files) == ["README.md", "VERSION", "components.yaml", "solve.py"]
    stop, = of(decisions, "stop")
    assert stop["step"] == 8 and stop["train_mean"] == pytest.approx(2 / 3), "target_score stops before step 9"
    evolve8 = prompt(records, "0008-evolve")
    declined = evolve8.split("## Declined edits")[1].split("## Components")[0]
    shown = [json.loads(line)["step"] for line in declined.splitlines() if line.startswith("{")]
    assert shown == [4, 5, 6, 7], "the latest 4 declines reach the next prompt"
    assert "Raw traces of the current version" in evolve8 and '### t2 (0.000, ok)\n{' in evolve8
    assert not list((records.local_path() / "prompts").glob("*debug*"))
    assert_no_secret(records.local_path(), SECRET)
    assert summary["snapshot_id"] == keep["snapshot_id"]


def test_a_failing_debugger_call_ends_the_run_visibly(tmp_path, ray_session):
    with ScriptedServer([{"status": 503, "message": "overloaded"}], loop=True, api_key=WORKER_KEY) as srv:
        worker = {**agent_worker(srv.base_url, "RSI_TEST_AHE_WORKER_KEY", "scripted-agent", max_retries=1),
                  "replicas": 2}
        r = start_run(str(scenario(tmp_path, {"max_steps": 2}, [], worker=worker)))
        with pytest.raises(WorkerError, match="gave up after 2 attempts"):
            r.execute()
    assert [d["kind"] for d in r.records.decisions()] == ["seed"], "no edit and no placeholder report"
    assert not (r.records.local_path() / "prompts/0001-evolve.md").exists()


def test_manifest_inheritance_rules():
    m = parse_manifest(manifest([{"path": "a.py"}, {"path": "b.py", "fix_tasks": []}, change("c.py", risk=["t9"])],
                                predicted_impact={"fix_tasks": ["t1"], "risk_tasks": ["t2"]}), ["a.py", "b.py", "c.py"])
    assert [(c.path, c.fix_tasks, c.risk_tasks) for c in m.changes] == [
        ("a.py", ["t1"], ["t2"]), ("b.py", [], ["t2"]), ("c.py", [], ["t9"])]
    with pytest.raises(ManifestError, match="changes \\(or predicted_impact\\)"):
        parse_manifest(manifest(), ["a.py"])
    with pytest.raises(ManifestError) as exc:
        parse_manifest("<MANIFEST>[1, 2]</MANIFEST>", ["a.py"])
    assert exc.value.reason == "manifest_not_json"


@pytest.mark.parametrize("override,needle", [
    (["--algorithm.mode", "conservative"], "unknown key 'algorithm.mode'"),
    (["--algorithm.max_steps", "0"], "max_steps"),
    (["--algorithm.target_score", "0"], "target_score"),
    (["--algorithm.target_score", "1.5"], "target_score"),
    (["--algorithm.debugger_max_tasks", "0"], "debugger_max_tasks"),
    (["--algorithm.max_evidence_chars", "10"], "max_evidence_chars"),
    (["--algorithm.worker", "{type: llm, llm: {provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1'}}"],
     "text-only worker"),
])
def test_bad_parameters_exit_2_before_anything_starts(tmp_path, capsys, override, needle):
    assert main(["run", str(scenario(tmp_path, {}, [])), *override]) == 2
    err = capsys.readouterr().err
    assert needle in err, err
    assert not (tmp_path / "runs").exists()


def test_duplicate_train_task_ids_exit_2(tmp_path, capsys):
    path = scenario(tmp_path, {}, [], splits={"train": ["t1", "t2", "t1"], "dev": [], "test": ["x1", "t3"]})
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "more than once" in err and "t1" in err, err
    assert not (tmp_path / "runs").exists()


def test_config_validates_with_its_key_variables_set(repo, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "dummy-value-for-validation")
    assert main(["validate", str(repo / "configs" / "ahe.yaml")]) == 0, capsys.readouterr().err
    assert "algorithm ahe, benchmark qa" in capsys.readouterr().out


# ---- end to end: a real MiniAgent, the agent worker, two scripted model servers ----------------
MARKER = "Copy the answer from the documents, word for word."
TRAIN = {"Who built the lighthouse of Port Amberly?": "Tomas Vell",
         "What is the capital of the Keldar Isles?": "Ostrava Minor"}
TEST = {"How many stone arches does the Selk Bridge have?": "seven",
        "Who founded St. Brenna's Hospital?": "Agnes Tully"}


def target_model() -> dict:
    """Answers correctly only when the harness's system prompt carries MARKER: the edit the
    Evolve Agent makes is what moves the score, and only if MiniAgent really loads it."""
    rules = [{"match": f"(?s){re.escape(MARKER)}.*{re.escape(question)}", "reply": answer}
             for question, answer in {**TRAIN, **TEST}.items()]
    return {"rules": rules, "default": "I do not know."}


def worker_model(system_prompt: str):
    def reply(body: dict):
        text = request_text(body)
        if "You are the Agent Debugger. Below is one rollout" in text:
            return "The model answered 'I do not know.' although the document was in the prompt."
        if "cross-task synthesis" in text:
            return "Every failure: the system prompt never tells the model to copy the answer from the documents."
        if any(m["role"] == "tool" for m in body["messages"]):
            impact = {"failure_evidence": ["train-01 and train-02 answered 'I do not know.'"],
                      "root_cause": "prompts/system.md does not say to copy the answer",
                      "targeted_fix": "tell the model to copy the answer from the documents",
                      "changes": [{"path": "prompts/system.md", "fix_tasks": ["train-01", "train-02"],
                                   "risk_tasks": []}]}
            summary = f"<MANIFEST>{json.dumps(impact)}</MANIFEST>"
            return {"tool_calls": [{"name": "finish", "arguments": {"summary": summary}}]}
        return {"tool_calls": [{"name": "write_file",
                                "arguments": {"path": "prompts/system.md", "content": f"{system_prompt}\n{MARKER}\n"}}]}
    return reply


@pytest.mark.slow
def test_end_to_end_miniagent_edited_by_the_agent_worker(tmp_path, ray_session):
    target = tmp_path / "miniagent"
    shutil.copytree(REPO / "targets" / "miniagent", target, ignore=shutil.ignore_patterns("__pycache__"))
    system_prompt = (target / "prompts" / "system.md").read_text().strip()
    with ScriptedServer([target_model()], loop=True, api_key=TARGET_KEY) as answers, \
            ScriptedServer([worker_model(system_prompt)], loop=True, api_key=WORKER_KEY) as agent:
        llm = {"provider": "openai", "model": "scripted-target", "base_url": answers.base_url,
               "api_key_env": "RSI_TEST_AHE_TARGET_KEY", "timeout_s": 20, "max_retries": 1}
        cfg = {"name": "ahe-e2e", "seed": 1, "storage": str(tmp_path / "runs"),
               "target": {"path": "miniagent", "kind": "miniagent", "model": llm, "limits": {"timeout_s": 60}},
               "benchmark": {"name": "qa", "limit": 2},
               "algorithm": {"name": "ahe", "max_steps": 3, "worker": {
                   **agent_worker(agent.base_url, "RSI_TEST_AHE_WORKER_KEY", "scripted-agent"),
                   "replicas": 2, "max_turns": 5}}}
        path = tmp_path / "ahe.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        decisions, summary, records = run(path)
        worker_requests = [request_text(r["body"]) for r in agent.requests]
        target_requests = [request_text(r["body"]) for r in answers.requests]
        seed_test = evaluate_target(str(target), "qa", "test", "miniagent",
                                    overrides=[("target.model", json.dumps(llm)), ("benchmark.limit", "2")])
    seed, = of(decisions, "seed")
    keep, = of(decisions, "keep")
    assert seed["train_mean"] == 0.0 and keep["train_mean"] == 1.0
    assert keep["changed_paths"] == ["prompts/system.md"]
    assert [(v["path"], v["verdict"]) for v in keep["verdicts"]] == [("prompts/system.md", "EFFECTIVE")]
    assert keep["fail_to_pass"] == ["train-01", "train-02"] and keep["unattributed_regressions"] == []
    assert of(decisions, "stop")[0]["step"] == 1, "train mean 1.0 reaches the default target_score"
    # The worker wrote the file with its own tool; the committed version is what MiniAgent loaded.
    committed = records.get_snapshot(keep["snapshot_id"])
    assert committed.text("prompts/system.md") == f"{system_prompt}\n{MARKER}\n"
    assert summary["snapshot_id"] == keep["snapshot_id"] and summary["means"]["test"] == 1.0
    assert [r["mean_score"] for r in seed_test["rows"]] == [0.0], "the same test tasks score 0 before the edit"
    assert sum(MARKER in r for r in target_requests) == 4, "candidate train (2) and final test (2) rollouts"
    assert len(worker_requests) == 2 + 1 + 2, "two debugger reports, one synthesis, a write and a finish"
    assert not any(q in r for q in TEST for r in worker_requests), "test questions never reach the worker"
    assert_no_secret(records.local_path(), WORKER_KEY, TARGET_KEY)
    assert all(r["authorized"] for r in agent.requests + answers.requests)
