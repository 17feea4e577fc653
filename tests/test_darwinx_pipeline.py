"""DarwinX starts a candidate's confirm as soon as its own screen is in, while the round's other
screens still run. The decisions must be exactly those of screening every candidate first and
confirming after: the same seeded run, once as it runs and once with the evaluator's chained
call replaced by that sequential order, decides identically."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from _cluster import comparable
from _runs import run, scripted_edit, table_scenario

from actors.client import EvaluatorClient

TRAIN = ["t1", "t2", "t3"]
SLOW = ("vSlow", "vSlowB")  # versions whose rollouts take long: their screens end last


def _table() -> dict:
    def flat(v: float) -> dict:
        return dict.fromkeys(TRAIN, v)

    return {"splits": {"train": TRAIN, "dev": [], "test": ["x1"]}, "scores": {
        "v0": flat(0.5),
        "v1": {"t1": 1.0, "t2": 0.5, "t3": 0.5},
        "v2": {"t1": 1.0, "t2": 1.0, "t3": 0.5},
        "vSlow": flat(0.5),
        "vBad": flat(0.25),
        "v3": flat(1.0),
        "vSlowB": {"t1": 1.0, "t2": 1.0, "t3": 0.5},
        "vBadB": flat(0.25),
        "v4": {"t1": 0.5, "t2": 1.0, "t3": 1.0}}}


def _scenario(root: Path) -> Path:
    edits = [scripted_edit(f"switch to {v}", v) for v in ("v1", "vSlow", "vBad", "v2", "v3", "vSlowB", "vBadB", "v4")]
    path = table_scenario(root, "darwinx", name="pipe", seed=5, table=_table(), edits=edits, ask_reply="learned",
                          params={"screen_size": 2, "screen_samples": 1, "confirm_samples": 2, "max_steps": 8,
                                  "parallel_candidates": 4, "merge_every": 0, "duplicate_retries": 0,
                                  "exploration_probability": 0.5})
    # A slow version sleeps on one task only (t2, in both slow versions' screens), so one of the
    # session's two CPUs always stays free for the other rollouts: a fast candidate's screen,
    # its parent's rows and its confirm's sizing then finish seconds before the slow screen
    # ends, even on a loaded machine. (Sleeping on every task let the slow rollouts hold both
    # CPUs while the fast candidate's parent rows queued behind them: the overlap then hung on
    # tens of milliseconds and was once missed by 80 ms.)
    solve = root / "target" / "solve.py"
    solve.write_text(solve.read_text().replace(
        "    sys.stdin.read()",
        "    task = json.loads(sys.stdin.read())\n"
        "    slow = (Path(__file__).resolve().parent / 'VERSION').read_text().strip()"
        f" in {SLOW!r} and task['task_id'] == 't2'\n"
        "    __import__('time').sleep(6.0 if slow else 0.02)"))
    return path


def _sequential(self, groups, follow, label=""):
    """The order before the overlap: every group, then every follow-up."""
    flat = iter(self.evaluate_many([r for g in groups for r in g], label=label))
    first = [[next(flat) for _ in g] for g in groups]
    later = [list(follow(i, tables)) for i, tables in enumerate(first)]
    rest = iter(self.evaluate_many([r for g in later for r in g], label=label) if any(later) else [])
    return first, [[next(rest) for _ in g] for g in later]


def _archive(uri: str) -> list[tuple]:
    rows = [json.loads(line) for line in (Path(uri) / "archive.jsonl").read_text().splitlines()]
    return [(r["snapshot_id"], r["level"], r["admitted"], r["learning"]) for r in rows]


def _stages(run_dir: Path) -> list[list[tuple[float, float]]]:
    """Per stored measurement call after the seed's, in order: its batches' (sized_at, returned_at)."""
    files = sorted((run_dir / "traces").glob("*-train-*.jsonl.gz"), key=lambda f: int(f.name.split("-")[-1][:-9]))
    out = []
    for f in files[1:]:
        with gzip.open(f, "rt") as fh:
            rows = [json.loads(line)["batch"] for line in fh]
        out.append(sorted({(b["sized_at"], b["returned_at"]) for b in rows}))
    return out


def test_confirms_overlap_screens_and_decide_as_screen_then_confirm(tmp_path, ray_session, monkeypatch):
    overlapped, _, records = run(_scenario(tmp_path / "overlap"))
    with monkeypatch.context() as m:
        m.setattr(EvaluatorClient, "evaluate_chained", _sequential)
        sequential, _, seq_records = run(_scenario(tmp_path / "sequential"))

    assert comparable(overlapped) == comparable(sequential)
    assert [(d["step"], d["kind"], d["accepted"]) for d in overlapped if d["kind"] in ("screen", "confirm")] == [
        (1, "screen", True), (2, "screen", False), (3, "screen", False), (4, "screen", True),
        (1, "confirm", True), (4, "confirm", True),
        (5, "screen", False), (6, "screen", True), (7, "screen", False), (8, "screen", True),
        (6, "confirm", True), (8, "confirm", False)]
    assert _archive(records.uri) == _archive(seq_records.uri)

    # The overlap happened: in each round a confirm batch was sized before the last (slow)
    # screen batch came back; run sequentially, every confirm starts after every screen.
    for got, overlap in ((_stages(Path(records.uri)), True), (_stages(Path(seq_records.uri)), False)):
        screens, confirms = got[0::2], got[1::2]
        assert len(screens) == len(confirms) == 2
        for s, c in zip(screens, confirms):
            assert (min(a for a, _ in c) < max(b for _, b in s)) is overlap
