"""`rsi ls` and `rsi compare` on real runs (the ones test_report.py makes: two finished DarwinX
runs on the table benchmark and a killed copy of the first), row for row."""

from __future__ import annotations

import json
import os
import time

import pytest
from test_report import check_png, decisions, table_runs

from rsi.driver.cli import main
from rsi.runs import list_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ray_session):
    return table_runs(tmp_path_factory)


def started(run_dir) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.stat(run_dir / "run.json").st_mtime))


def test_ls_lists_every_run_with_its_status(runs, capsys, tmp_path):
    a, b, k = runs["a"], runs["b"], runs["killed"]
    assert main(["ls", str(runs["storage"])]) == 0
    # oldest first: the killed copy's files were aged two hours
    assert capsys.readouterr().out == (
        "name  algorithm  status     steps  best    test    started\n"
        f"dxk   darwinx    resumable  2      0.3333  -       {started(k)}\n"
        f"dxa   darwinx    finished   4      0.6667  0.6000  {started(a)}\n"
        f"dxb   darwinx    finished   1      0.8333  0.9000  {started(b)}\n")
    assert main(["ls", str(runs["storage"]), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["status"], r["run_dir"]) for r in rows] == [
        ("dxk", "resumable", str(k)), ("dxa", "finished", str(a)), ("dxb", "finished", str(b))]
    # an unfinished run written to within --active-s is running; with no run.json it cannot go on
    now = os.stat(k / "decisions.jsonl").st_mtime
    assert [r["status"] for r in list_runs(str(runs["storage"]), now=now + 10)] == ["running", "finished", "finished"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["ls", str(empty)]) == 0 and capsys.readouterr().out == "(no runs)\n"
    assert main(["ls", str(tmp_path / "nowhere")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_ls_failed_run(tmp_path, capsys):
    """A directory with a config but no run.json died before its run began: it cannot resume.
    A folder without config.yaml is not a run and is not listed."""
    run = tmp_path / "runs" / "broken"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("name: broken\nalgorithm: {name: darwinx}\n")
    (tmp_path / "runs" / "not-a-run").mkdir()
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.stat(run / "config.yaml").st_mtime))
    assert main(["ls", str(tmp_path / "runs")]) == 0
    assert capsys.readouterr().out == (
        "name    algorithm  status  steps  best  test  started\n"
        f"broken  darwinx    failed  0      -     -     {when}\n")


def test_compare_two_runs(runs, capsys, tmp_path):
    a, b = runs["a"], runs["b"]
    pa_, pb = decisions(a)[5]["snapshot_id"], decisions(b)[1]["snapshot_id"]
    plot = tmp_path / "cmp" / "curves.png"
    assert main(["compare", str(a), str(b), "--plot", str(plot)]) == 0
    assert capsys.readouterr().out == (
        "                            dxa               dxb\n"
        "algorithm                   darwinx           darwinx\n"
        "status                      finished          finished\n"
        "steps                       4                 1\n"
        f"promoted                    {pa_}  {pb}\n"
        "best train mean (measured)  0.6667            0.8333\n"
        "train mean (promoted)       0.6667            0.8333\n"
        "test mean (promoted)        0.6000            0.9000\n"
        "test: rollouts              1                 1\n"
        "test: mean_score            0.6000            0.9000\n"
        "test: failed                0                 0\n"
        f"curves: {plot}\n")
    check_png(plot)
