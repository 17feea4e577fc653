"""`rsi report` and `rsi show --diff/--lineage` on real runs: DarwinX on the table benchmark with
the scripted worker (every outcome known in advance), a killed copy of one (no summary.json, a
torn last decision line), a bin-packing evaluation and a meta-evolve run. The report's PNGs
must decode, its HTML must load nothing from anywhere, and headless Chromium must render it
without a console message."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from rsi.driver.cli import main
from rsi.driver.runner import start_run
from rsi.reporting.data import RunView
from rsi.reporting.html import build_report, fmt
from rsi.reporting.tensorboard import crc32c, export_run, read_events

REPO = Path(__file__).resolve().parents[1]
SPLITS = {"train": ["t1", "t2", "t3"], "dev": [], "test": ["x1"]}
# Run A: the specialist vA loses t1 (rejected), an edit outside every component is declined,
# the merge vAB keeps t1 and gains t2 (admitted, promoted), and the script runs dry (no_change).
TABLE_A = {"splits": SPLITS, "scores": {
    "v0": {"t1": 1.0, "t2": 0.0, "t3": 0.0, "x1": 0.2},
    "vA": {"t1": 0.0, "t2": 1.0, "t3": 0.0, "x1": 0.1},
    "vAB": {"t1": 1.0, "t2": 1.0, "t3": 0.0, "x1": 0.6}}}
# Run B: one edit, admitted.
TABLE_B = {"splits": SPLITS, "scores": {
    "v0": {"t1": 0.5, "t2": 0.5, "t3": 0.5, "x1": 0.5},
    "v1": {"t1": 1.0, "t2": 1.0, "t3": 0.5, "x1": 0.9}}}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def version(v: str) -> dict:
    return {"files": {"VERSION": v + "\n"}, "reply": f"switch to {v}"}


def scenario(root: Path, storage: Path, table: dict, edits: list[dict], algorithm: dict) -> Path:
    """The table benchmark and the scripted worker (as in test_darwinx.py), runs under ``storage``."""
    root.mkdir(parents=True)
    shutil.copytree(REPO / "targets" / "table_demo", root / "target")
    (root / "table.yaml").write_text(yaml.safe_dump(table))
    (root / "script.yaml").write_text(yaml.safe_dump({"edits": edits, "ask_reply": "learned"}))
    cfg = {"name": "dx", "seed": 7, "storage": str(storage),
           "target": {"path": "target", "kind": "program", "entry": "solve.py"},
           "benchmark": {"name": "table", "path": "table.yaml"},
           "algorithm": {"name": "darwinx", "worker": {"type": "scripted", "script": "script.yaml"},
                         "screen_size": 3, **algorithm}}
    path = root / "darwinx.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def execute(config: Path, run_dir: Path) -> Path:
    run = start_run(str(config), run_dir=str(run_dir))
    run.execute()
    return run_dir


def kill_copy(src: Path, dest: Path, keep: int) -> Path:
    """What a SIGKILL leaves: no summary.json, ``keep`` whole decision lines and a torn one."""
    shutil.copytree(src, dest)
    (dest / "summary.json").unlink()
    lines = (dest / "decisions.jsonl").read_text().splitlines(keepends=True)
    (dest / "decisions.jsonl").write_text("".join(lines[:keep]) + lines[keep][: len(lines[keep]) // 2])
    return dest


def age(run_dir: Path, seconds: float) -> None:
    """Set every file's mtime ``seconds`` into the past (a run nobody has written to since)."""
    past = time.time() - seconds
    for p in [run_dir, *run_dir.rglob("*")]:
        os.utime(p, (past, past))


_RUNS: dict = {}


def table_runs(tmp_path_factory) -> dict:
    """Runs A and B and a killed copy of A, under one storage directory; made once per session
    (test_runs_listing.py uses the same ones)."""
    if not _RUNS:
        base = tmp_path_factory.mktemp("report-runs")
        storage = base / "runs"
        a = execute(scenario(base / "a", storage, TABLE_A,
                             [version("vA"), {"files": {"notes.txt": "stray"}, "reply": "oops"}, version("vAB")],
                             {"max_steps": 4, "merge_every": 3}), storage / "dxa")
        b = execute(scenario(base / "b", storage, TABLE_B, [version("v1")], {"max_steps": 1, "merge_every": 0}),
                    storage / "dxb")
        killed = kill_copy(a, storage / "dxk", keep=4)  # seed, screen, confirm, decline; the merge torn
        age(killed, 7200)
        _RUNS.update(storage=storage, a=a, b=b, killed=killed)
    return _RUNS


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ray_session):
    return table_runs(tmp_path_factory)


def decisions(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "decisions.jsonl").read_text().splitlines()
            if line.strip() and line.endswith("}")]


def check_png(path: Path) -> tuple[int, int]:
    import matplotlib.image

    data = Path(path).read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    pixels = matplotlib.image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 50 and pixels.shape[1] > 50
    assert float(np.std(pixels)) > 0.01, f"{path} is blank"
    return pixels.shape[:2]


def check_self_contained(page: str) -> None:
    """No http(s) anywhere; every src/href is a data: URI or an in-page anchor; no script, no
    CSS import or url() other than data:; a CSP that forbids everything else."""
    assert "http://" not in page and "https://" not in page
    for attr, value in re.findall(r"""\b(src|href|srcset|action|poster)\s*=\s*["']?([^"'\s>]*)""", page, re.I):
        assert value.startswith("data:image/png;base64,") or value.startswith("#"), (attr, value[:80])
    assert "<script" not in page.lower() and "@import" not in page
    assert all(u.startswith("data:") for u in re.findall(r"url\(\s*['\"]?([^)'\"]*)", page))
    assert "default-src 'none'" in page


def text_of(page: str) -> str:
    import html as html_mod

    return html_mod.unescape(re.sub(r"<[^>]+>", "", page))


def embedded_pngs(page: str) -> list[bytes]:
    return [base64.b64decode(b) for b in re.findall(r'src="data:image/png;base64,([^"]+)"', page)]


def section(page: str, anchor: str) -> str:
    m = re.search(rf'<section id="{anchor}">(.*?)</section>', page, re.S)
    assert m, f"no section {anchor}"
    return m.group(1)


# ---- the report of a finished run ------------------------------------------------------------
def test_finished_run_report(runs, tmp_path, capsys):
    a = runs["a"]
    out = tmp_path / "rep" / "a.html"
    t0 = time.monotonic()
    assert main(["report", str(a), "--out", str(out)]) == 0
    took = time.monotonic() - t0
    printed = capsys.readouterr().out
    assert printed.startswith(f"report: {out} (finished run; figures: ")
    page = out.read_text()
    check_self_contained(page)
    names = ("score", "lineage", "heatmap", "cost")
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(["a.html", *(f"a-{n}.png" for n in names)])
    for n in names:
        check_png(out.parent / f"a-{n}.png")
    # every figure is in the page itself, byte for byte the PNG beside it
    assert embedded_pngs(page) == [(out.parent / f"a-{n}.png").read_bytes() for n in names]

    ds = decisions(a)
    seed, vA, vAB = ds[0]["snapshot_id"], ds[1]["snapshot_id"], ds[5]["snapshot_id"]
    view = RunView(str(a))
    assert [(c.snapshot_id, c.step, c.status, c.promoted, c.donor_id) for c in view.candidates] == [
        (seed, 0, "seed", False, None), (vA, 1, "rejected", False, None), (vAB, 3, "admitted", True, vA)]
    assert [c.score for c in view.candidates] == pytest.approx([1 / 3, 1 / 3, 2 / 3])
    assert view.task_matrix == {seed: {"t1": 1.0, "t2": 0.0, "t3": 0.0}, vA: {"t1": 0.0, "t2": 1.0, "t3": 0.0},
                                vAB: {"t1": 1.0, "t2": 1.0, "t3": 0.0}}
    assert [(d.step, d.reason) for d in view.declined] == [(2, "unclassified_path"), (4, "no_change")]

    text = text_of(page)
    assert "dxa finished" in text and "promoted snapshot" + vAB in text.replace("\n", "")
    # the decision table: one row per decision, with the gate's figures
    rows = re.findall(r"<tr[ >].*?</tr>", section(page, "decisions"), re.S)
    assert len(rows) == 1 + len(ds) == 11
    confirm_a = text_of(rows[3])
    assert confirm_a.startswith("1confirm" + vA[:8] + seed[:8]) and "lost solved tasks" in confirm_a
    assert "0.0000" in confirm_a and "1.0000" in confirm_a  # gain 0, sign p 1, regression 1
    assert 'class="declined"' in rows[4] and "unclassified_path" in rows[4]
    # the admitted merge's diff against its parent, highlighted by pygments
    diffs = section(page, "diffs")
    assert f"{vAB} ← {seed} (merge, donor {vA})" in text_of(diffs)
    assert '<span class="gd">-v0' in diffs and '<span class="gi">+vAB' in diffs
    assert vA not in re.sub(r"\(merge, donor \w+\)", "", text_of(diffs)), "a rejected candidate has no diff"
    # test table (no bin packing here) and the time breakdown
    assert "mean_score" in section(page, "test") and "binpack" not in page
    cost = view.cost()
    durations = pq.read_table(a / "rollouts")["duration_s"].to_pylist()
    summary = json.loads((a / "summary.json").read_text())
    assert cost["rollout_s"] == pytest.approx(sum(durations)) and cost["rollouts_stored"] == len(durations)
    assert cost["elapsed_s"] == summary["elapsed_s"] and cost["elapsed_from"] == "summary.json"
    assert cost["driver_s"] == pytest.approx(max(0.0, summary["elapsed_s"] - sum(durations)))
    assert cost["model_calls"] == 0 and cost["model_s"] is None
    assert "not recorded" in text_of(section(page, "cost"))
    print(f"report of a finished run: {took:.2f}s")


def test_report_works_on_a_killed_and_on_a_running_run(runs, tmp_path):
    killed = runs["killed"]
    before = {p: p.read_bytes() for p in killed.rglob("*") if p.is_file()}
    out = tmp_path / "k.html"
    result = build_report(str(killed), out)
    assert result["status"] == "resumable" and result["notes"] == []
    page = out.read_text()
    check_self_contained(page)
    assert '<span class="badge resumable">resumable</span>' in page
    assert "No summary.json: the run has not finished" in page
    rows = re.findall(r"<tr[ >].*?</tr>", section(page, "decisions"), re.S)
    assert len(rows) == 1 + 4, "the torn fifth line is the end of the log"
    assert 'id="test"' not in page and "no candidate admitted besides the seed" in page
    assert "file times (no summary.json)" in text_of(section(page, "cost"))
    for name in result["figures"].values():
        check_png(Path(name))
    assert set(result["figures"]) == {"score", "lineage", "heatmap", "cost"}
    view = RunView(str(killed))
    # the merge child's rollouts were stored before its decision was: not a candidate yet
    assert [c.status for c in view.candidates] == ["seed", "rejected"]
    assert view.steps == 2
    # a run written to a moment ago reads as running
    assert view.status(now=view.last_write + 5) == "running"
    assert view.status(now=view.last_write + 601) == "resumable"
    assert RunView(str(killed)).status(now=view.last_write + 60, active_s=30) == "resumable"
    # read-only: the report wrote nothing into the run directory
    assert {p: p.read_bytes() for p in killed.rglob("*") if p.is_file()} == before


def test_show_diff_and_lineage_exact(runs, capsys):
    a = runs["a"]
    ds = decisions(a)
    seed, vA, vAB = ds[0]["snapshot_id"], ds[1]["snapshot_id"], ds[5]["snapshot_id"]
    assert main(["show", str(a), "--diff", vAB[:6]]) == 0
    assert capsys.readouterr().out == (f"--- {seed}/VERSION\n+++ {vAB}/VERSION\n@@ -1 +1 @@\n-v0\n+vAB\n")
    assert main(["show", str(a), "--lineage"]) == 0
    assert capsys.readouterr().out == (
        f"{seed}  step 0  train 0.3333  seed\n"
        f"├── {vA}  step 1  train 0.3333  rejected: lost solved tasks\n"
        f"├── x decline  step 2  unclassified_path\n"
        f"├── {vAB}  step 3  train 0.6667  admitted  merge (donor {vA})  [promoted]\n"
        f"└── x decline  step 4  no_change\n")
    assert main(["show", runs["a"].as_uri(), "--lineage"]) == 0, "any pyarrow.fs URI"
    assert "[promoted]" in capsys.readouterr().out
    assert main(["show", str(runs["killed"]), "--lineage"]) == 0
    assert capsys.readouterr().out == (
        f"{seed}  step 0  train 0.3333  seed\n"
        f"├── {vA}  step 1  train 0.3333  rejected: lost solved tasks\n"
        f"└── x decline  step 2  unclassified_path\n")
    assert main(["show", str(a), "--diff", seed]) == 2
    assert capsys.readouterr().err == f"rsi: error: {a}: snapshot {seed} has no parent (it is the seed)\n"
    assert main(["show", str(a), "--diff", "zz"]) == 2
    assert "no snapshot 'zz'" in capsys.readouterr().err


def test_tensorboard_scalars(runs, tmp_path):
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value TFRecord framing relies on
    path, n = export_run(str(runs["a"]), tmp_path / "tb")
    assert Path(path).parent == tmp_path / "tb" / "dxa"
    events = read_events(path)
    assert events[0]["file_version"] == "brain.Event:2"
    series: dict[str, list] = {}
    for e in events[1:]:
        for tag, v in e["values"].items():
            series.setdefault(tag, []).append((e["step"], round(v, 4)))
    assert n == sum(len(v) for v in series.values())
    assert series["confirm/gain"] == [(1, 0.0), (3, 1.0)]
    assert series["confirm/accepted"] == [(1, 0.0), (3, 1.0)]
    assert series["confirm/uncertainty.sign_test_p"] == [(1, 1.0), (3, 1.0)]
    assert series["screen/regression_mass"] == [(1, 1.0), (3, 0.0)]
    assert series["candidate/train_mean"] == [(0, 0.3333), (1, 0.3333), (3, 0.6667)]
    assert not any("means" in t for t in series), "per-task maps are not scalars"
    export_run(str(runs["a"]), tmp_path / "tb")  # a second export replaces the first
    assert len(list((tmp_path / "tb" / "dxa").iterdir())) == 1
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        return
    acc = EventAccumulator(str(tmp_path / "tb" / "dxa"))
    acc.Reload()
    assert [(s.step, round(s.value, 4)) for s in acc.Scalars("confirm/gain")] == [(1, 0.0), (3, 1.0)]


# ---- bin packing and meta-evolve ----------------------------------------------------------------
def test_binpack_report_has_the_baselines(tmp_path, ray_session):
    cfg = {"name": "bp", "seed": 1, "storage": str(tmp_path / "runs"),
           "target": {"path": str(REPO / "targets" / "binpack_bestfit"), "kind": "program", "deterministic": True},
           "benchmark": {"name": "binpack", "limit": 1, "test": ["OR1"]}, "algorithm": {"name": "evaluate"}}
    (tmp_path / "bp.yaml").write_text(yaml.safe_dump(cfg))
    run_dir = execute(tmp_path / "bp.yaml", tmp_path / "runs" / "bp")
    out = tmp_path / "rep" / "bp.html"
    result = build_report(str(run_dir), out)
    page = out.read_text()
    check_self_contained(page)
    assert set(result["figures"]) == {"score", "lineage", "heatmap", "binpack", "cost"}
    for p in result["figures"].values():
        check_png(Path(p))
    row, = json.loads((run_dir / "summary.json").read_text())["test_report"]
    assert row["dataset"] == "OR1" and row["funsearch_pct"] == 5.3
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", section(page, "test"))
    assert cells == ["OR1", f"{row['excess_pct']:.4f}", "1", "1", "0", f"{row['first_fit_pct']:.4f}",
                     f"{row['best_fit_pct']:.4f}", "5.3000", fmt(row["sum_of_squares_pct"]), "generated weibull"]


def test_meta_report_has_the_source_target_scatter(tmp_path, ray_session):
    shutil.copytree(REPO / "targets" / "meta_policy", tmp_path / "target")
    cfg = {"name": "meta", "seed": 3, "storage": str(tmp_path / "runs"),
           "target": {"path": "target", "kind": "policy", "deterministic": True}, "evaluator": {"batch_size": 8},
           "benchmark": {"name": "meta_landscape", "holdout": 12, "oracle": 8, "validation": 6, "budget": 20},
           "algorithm": {"name": "meta", "max_rounds": 1, "candidates_per_round": 1}}
    (tmp_path / "meta.yaml").write_text(yaml.safe_dump(cfg))
    run_dir = execute(tmp_path / "meta.yaml", tmp_path / "runs" / "meta")
    report = json.loads((run_dir / "meta_report.json").read_text())
    out = tmp_path / "rep" / "meta.html"
    result = build_report(str(run_dir), out)
    page = out.read_text()
    check_self_contained(page)
    assert {"meta", "score", "lineage", "heatmap", "cost"} <= set(result["figures"])
    check_png(Path(result["figures"]["meta"]))
    meta = section(page, "meta")
    assert "SOURCE vs TARGET" in page
    sweep_rows = re.findall(r"<tr>(.*?)</tr>", meta.split("c-family sweep")[1], re.S)
    assert [text_of(r.split("</td>")[0]) for r in sweep_rows[1:]] == [s["rule"] for s in report["c_sweep"]]
    assert f"placement{report['placement']['verdict']}" in text_of(meta).replace("\n", "")
    # the validation and ceiling tables of the summary's algorithm report
    for t in json.loads((run_dir / "summary.json").read_text())["algorithm_report"]["tables"]:
        assert t["title"] in text_of(page)


# ---- a browser renders it ---------------------------------------------------------------------
def chromium(args: list[str], home: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    cmd = [exe, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--hide-scrollbars",
           f"--user-data-dir={home / 'profile'}", "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(home)})


def console_lines(stderr: str) -> list[str]:
    """Console messages of the page. Chromium's own interventions from its internal pages
    ("Slow network is detected", source chrome://) say nothing about the report: not counted."""
    return [line for line in stderr.splitlines() if re.search(r":CONSOLE[:(]", line)
            and "Slow network is detected" not in line and "source: chrome" not in line]


def test_report_renders_in_headless_chromium(runs, tmp_path):
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)")
    out = tmp_path / "a.html"
    build_report(str(runs["a"]), out)
    # the check sees a console message: the same CSP refuses a remote image, loudly
    control = tmp_path / "control.html"
    control.write_text(out.read_text().replace("<main>", '<main><img src="https://example.invalid/x.png">', 1))
    got = chromium(["--screenshot=" + str(tmp_path / "control.png"), control.as_uri()], tmp_path)
    assert any("Content Security Policy" in line for line in console_lines(got.stderr)), got.stderr[-2000:]

    shot = tmp_path / "report-screenshot.png"
    got = chromium(["--window-size=1280,3600", f"--screenshot={shot}", out.as_uri()], tmp_path)
    assert got.returncode == 0, got.stderr[-2000:]
    assert console_lines(got.stderr) == []
    assert check_png(shot) == (3600, 1280)
    dom = chromium(["--dump-dom", out.as_uri()], tmp_path)
    assert dom.returncode == 0 and console_lines(dom.stderr) == []
    assert len(re.findall(r"<img ", dom.stdout)) == 4 and "Admitted candidates" in dom.stdout
    print(f"screenshot: {shot}")



def test_tracker_tensorboard_writes_each_decision_live(tmp_path, ray_session):
    """``tracker: tensorboard``: one event per decision with numbers, written as decided, beside
    the run; the same scalars an after-the-fact export gives."""
    config = scenario(tmp_path / "b", tmp_path / "runs", TABLE_B, [version("v1")], {"max_steps": 1, "merge_every": 0})
    cfg = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**cfg, "tracker": "tensorboard"}, sort_keys=False))
    run_dir = execute(config, tmp_path / "runs" / "tracked")
    (live,) = (run_dir / "tensorboard").glob("events.out.tfevents.*")
    exported, _ = export_run(str(run_dir), tmp_path / "exported")
    def scalars(path) -> list[tuple]:
        return sorted((e.get("step", 0), tag, value) for e in read_events(path) for tag, value in e["values"].items()
                      if not tag.startswith(("candidate/", "usage/")))  # the export's extra series

    assert scalars(live) and scalars(live) == scalars(exported)
    assert {"seed/accepted", "confirm/accepted", "confirm/gain", "test/mean"} <= {tag for _, tag, _ in scalars(live)}
