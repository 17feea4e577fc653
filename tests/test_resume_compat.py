"""A run directory written before decisions were typed still resumes, with today's code.

The stored run (``tests/fixtures/run_v1``, see its README) was killed after step 2 of 4: its
decision lines have no ``reason_code``, its rollout rows no fingerprint (so every rollout it asks
for again is re-executed, never trusted), its ``run.json`` no schema version."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rsi.decisions import Decision
from rsi.driver.cli import main

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "run_v1"
SAME = ("step", "kind", "snapshot_id", "parent_id", "accepted")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_version_1_run_resumes_to_the_decisions_of_an_uninterrupted_run(tmp_path, ray_session, monkeypatch,
                                                                          capsys):
    shutil.copytree(FIXTURE, tmp_path / "v1")
    monkeypatch.chdir(tmp_path / "v1")  # the run's own base_dir is gone: paths resolve here
    run_dir = tmp_path / "v1" / "stored_run"
    before = lines(run_dir / "decisions.jsonl")
    assert before and all("reason_code" not in d for d in before)
    assert main(["resume", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "measured under another target fingerprint (or none) run again" in out

    after = lines(run_dir / "decisions.jsonl")
    # The same config run to its end by today's code: DarwinX has changed since the stored run
    # (a duplicate edit is now asked again before it is declined), so what follows the kill is
    # today's behaviour; before the kill, today's code and the code of that time agree.
    assert main(["run", "darwinx.yaml", "--run-dir", str(tmp_path / "uninterrupted")]) == 0
    expected = lines(tmp_path / "uninterrupted" / "decisions.jsonl")
    then = lines(FIXTURE / "uninterrupted_decisions.jsonl")
    same = lambda ds: [{k: d[k] for k in SAME} for d in ds]  # noqa: E731
    assert same(expected)[: len(before)] == same(then)[: len(before)] == same(before)
    assert same(after) == same(expected)
    assert after[: len(before)] == before, "the decisions made before the kill stay as written"
    new = [Decision.read(d) for d in after[len(before):]]
    assert all(d.v == 2 and d.reason_code for d in new)
    old = [Decision.read(d) for d in before]
    assert [d.reason_code for d in old] == ["seed", "screen", "confirm", "screen"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["snapshot_id"] == expected[-1]["snapshot_id"]
