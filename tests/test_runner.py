"""The runner end to end on local Ray: run directory contents, CLI show/export, rsi eval, and
hostile candidates that must end as statuses without disturbing the driver or other rollouts."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from _runs import assert_no_secret

from rsi.driver.cli import main
from rsi.driver.runner import start_run
from rsi.records import RunRecords
from rsi.results import SCHEMA

REPO = Path(__file__).resolve().parents[1]


def table_run(tmp_path: Path, scores: dict, splits: dict, solve: str | None = None, extra: dict | None = None) -> Path:
    target = tmp_path / "target"
    shutil.copytree(REPO / "targets" / "table_demo", target)
    if solve is not None:
        (target / "solve.py").write_text(textwrap.dedent(solve))
    (tmp_path / "table.yaml").write_text(yaml.safe_dump({"splits": splits, "scores": scores}))
    cfg = {"name": "r", "storage": str(tmp_path / "runs"),
           "target": {"path": "target", "kind": "program", "entry": "solve.py"},
           "benchmark": {"name": "table", "path": "table.yaml"},
           "algorithm": {"name": "evaluate", "trials": 2}, **(extra or {})}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_evaluate_run_directory_is_complete(tmp_path, ray_session, capsys, monkeypatch):
    monkeypatch.setenv("RSI_TEST_SECRET", "sk-should-never-appear-0123456789")
    splits = {"train": ["t1", "t2"], "dev": ["d1"], "test": ["x1", "x2"]}
    scores = {"v0": {"t1": 1.0, "t2": [1.0, 0.0], "d1": 0.5, "x1": 0.25, "x2": 0.75}}
    cfg = table_run(tmp_path, scores, splits,
                    extra={"target": {"path": "target", "kind": "program", "entry": "solve.py",
                                      "model": {"provider": "openai", "model": "m", "api_key_env": "RSI_TEST_SECRET"}}})
    run_dir = tmp_path / "runs" / "one"
    assert main(["run", str(cfg), "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("run directory:") and str(run_dir) in out.splitlines()[0]
    for rel in ("config.yaml", "decisions.jsonl", "summary.json", "run.json"):
        assert (run_dir / rel).is_file(), rel
    decisions = [json.loads(line) for line in (run_dir / "decisions.jsonl").read_text().splitlines()]
    assert [d["kind"] for d in decisions] == ["seed", "measure", "measure", "promote", "test"]
    for d in decisions:
        assert {"step", "kind", "snapshot_id", "parent_id", "accepted", "reason"} <= set(d)
    rollouts = pq.read_table(run_dir / "rollouts")
    assert rollouts.schema.names == SCHEMA.names
    assert rollouts.num_rows == 2 * 2 + 1 * 2 + 2  # train, dev with 2 trials; test once
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["means"]["train"] == pytest.approx(0.75)
    assert summary["means"]["dev"] == pytest.approx(0.5)
    assert summary["means"]["test"] == pytest.approx(0.5)
    assert summary["snapshot_id"] == decisions[0]["snapshot_id"]
    assert_no_secret(run_dir, "sk-should-never-appear")
    # traces are separate gzipped JSONL files named by trace_ref
    ref = rollouts["trace_ref"][0].as_py()
    trace_file = ref.partition("#")[0]
    assert trace_file.endswith(".jsonl.gz") and (run_dir / trace_file).read_bytes()[:2] == b"\x1f\x8b"
    assert RunRecords.open(str(run_dir)).read_trace(ref)["status"] == "ok"

    assert main(["show", str(run_dir)]) == 0
    shown = capsys.readouterr().out
    assert "promote" in shown and summary["snapshot_id"] in shown
    dest = tmp_path / "exported"
    assert main(["export", str(run_dir), "--best", str(dest)]) == 0
    assert (dest / "VERSION").read_text().strip() == "v0"
    assert main(["export", str(run_dir), "--snapshot", "nope", str(tmp_path / "x")]) == 2


HOSTILE = """
    import json, os, sys, time
    task = json.load(sys.stdin)["task_id"]
    if task == "loop":
        while True:
            pass
    if task == "memory":
        x = bytearray(8 * 1024 ** 3)
    if task == "fork":
        while True:
            try:
                os.fork()
            except OSError:
                pass
    if task == "flood":
        chunk = "x" * (1 << 20)
        for _ in range(100):
            sys.stdout.write(chunk)
        sys.exit(0)
    if task == "garbage":
        print("this is not json")
        sys.exit(0)
    if task == "crash":
        sys.exit(3)
    if task == "env":
        leaked = [k for k in os.environ if "KEY" in k or "SECRET" in k]
        print(json.dumps({"answer": "v0" if not leaked else "leak:" + ",".join(leaked)}))
        sys.exit(0)
    print(json.dumps({"answer": open("VERSION").read().strip()}))
"""


@pytest.mark.slow
def test_hostile_programs_end_as_statuses(tmp_path, ray_session, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-hostile-test-0123456789")
    ids = ["loop", "memory", "fork", "flood", "garbage", "crash", "env", "good"]
    splits = {"train": ids, "dev": [], "test": []}
    scores = {"v0": {t: 1.0 for t in ids}}
    cfg = table_run(tmp_path, scores, splits, solve=HOSTILE, extra={
        "target": {"path": "target", "kind": "program", "entry": "solve.py",
                   "limits": {"timeout_s": 4, "memory_mb": 512, "max_procs": 16}},
        "algorithm": {"name": "evaluate", "trials": 1}})
    run = start_run(str(cfg))
    summary = run.execute()
    rows = {r["task_id"]: r for r in run.records.rollouts().to_pylist() if r["split"] == "train"}
    expected = {"loop": "timeout", "memory": "error", "flood": "protocol_error", "garbage": "protocol_error",
                "crash": "error", "env": "ok", "good": "ok"}
    for task, status in expected.items():
        assert rows[task]["status"] == status, (task, rows[task])
    assert rows["fork"]["status"] in ("error", "timeout")
    for task in ids:
        assert rows[task]["score"] == (1.0 if task in ("env", "good") else 0.0), task
    assert summary["means"]["train"] == pytest.approx(2 / 8)


@pytest.mark.slow
def test_rsi_eval_prints_table1_best_fit_through_ray(tmp_path, ray_session, capsys):
    out_json = tmp_path / "eval.json"
    assert main(["eval", str(REPO / "targets" / "binpack_bestfit"), "--benchmark", "binpack",
                 "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out_json.read_text())
    got = {r["dataset"]: round(r["excess_pct"], 2) for r in result["rows"]}
    assert got == {"OR1": 5.81, "OR2": 6.06, "OR3": 5.37, "OR4": 4.94, "Weibull 5k": 3.98}
    assert "5.81" in printed and "3.98" in printed
    assert result["statuses"] == {"ok": 85}
