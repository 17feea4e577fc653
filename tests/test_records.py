"""Run records over a filesystem that is not the local one: the object-store code path (every
write a whole object, appends rewrite the object), exercised offline on a ``SubTreeFileSystem``
over a temporary directory. Traces are gzipped JSONL and come back exactly."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.fs as pafs

from rsi.records import RunRecords
from rsi.results import rows_to_table
from rsi.snapshot import Snapshot

REPO = Path(__file__).resolve().parents[1]


def object_store_records(tmp_path) -> RunRecords:
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    fs.create_dir("run", recursive=True)
    records = RunRecords(fs, "run", "subtree://run")
    assert not records._local, "this test is about the non-local branch"
    return records


def test_traces_are_gzipped_once_and_read_back(tmp_path):
    records = object_store_records(tmp_path)
    traces = [{"task_id": f"t{i}", "curve": [0.1 * i] * 50, "note": "ü"} for i in range(20)]
    rel = records.write_traces(traces, "train-1")
    stored = (tmp_path / "run" / rel).read_bytes()
    assert rel.endswith(".jsonl.gz") and stored[:2] == b"\x1f\x8b"
    lines = gzip.decompress(stored).decode().splitlines()  # one layer of gzip: zcat reads it
    assert [json.loads(x) for x in lines] == traces
    assert len(stored) < len("\n".join(lines)) / 3
    assert records.read_trace(f"{rel}#7") == traces[7]
    assert RunRecords(records.fs, "run", "subtree://run").read_trace(f"{rel}#19") == traces[19]


def test_decisions_rollouts_and_snapshots_round_trip(tmp_path):
    records = object_store_records(tmp_path)
    for i in range(3):
        records.decision({"step": i, "kind": "screen"})
    assert [d["step"] for d in records.decisions()] == [0, 1, 2]
    records.truncate_lines("decisions.jsonl", 2)
    assert [d["step"] for d in records.decisions()] == [0, 1]
    row = {
        "run_id": "r",
        "snapshot_id": "s",
        "split": "train",
        "task_id": "t",
        "trial": 0,
        "sample_seed": 0,
        "score": 0.5,
        "status": "ok",
        "duration_s": 0.1,
        "tokens_in": 0,
        "tokens_out": 0,
        "cost_usd": 0.0,
        "trace_ref": None,
    }
    records.write_rollouts(rows_to_table([row, {**row, "task_id": "u", "score": 1.0}]), "train-1")
    assert records.rollouts()["score"].to_pylist() == [0.5, 1.0]
    snap = Snapshot.from_dir(REPO / "targets" / "table_demo")
    records.put_snapshot(snap)
    back = records.get_snapshot(snap.snapshot_id)
    assert back.snapshot_id == snap.snapshot_id and back.text("solve.py") == snap.text("solve.py")


def test_state_is_compact_gzipped_json_and_reads_back(tmp_path):
    records = object_store_records(tmp_path)
    assert records.read_state() == {}, "no state before the first step"
    state = {"step": 3, "rng": [3, list(range(625)), None], "archive": [{"id": f"m{i}"} for i in range(50)]}
    records.write_state(state)
    stored = (tmp_path / "run" / "state" / "latest.json.gz").read_bytes()
    assert stored[:2] == b"\x1f\x8b" and len(stored) < len(json.dumps(state)) / 2
    assert records.read_state() == state
    records.write_state({**state, "step": 4})
    assert records.read_state()["step"] == 4, "each step replaces the state whole"


def test_a_run_with_a_plain_state_file_still_resumes(tmp_path):
    records = object_store_records(tmp_path)
    records.write_json("state/latest.json", {"step": 2, "note": "written before states were compressed"})
    assert records.read_state() == {"step": 2, "note": "written before states were compressed"}


def test_state_lists_are_appended_not_rewritten_and_a_torn_step_is_ignored(tmp_path):
    """A step pays for what it changed: an archive that grows is appended to; a list whose
    earlier items changed is rewritten; lines past the recorded length (a step cut short) are
    never read back."""
    from rsi.records import RunRecords

    records = RunRecords.create(str(tmp_path), "s", str(tmp_path / "run"))
    records.write_config({"name": "s"})
    archive = tmp_path / "run" / "state" / "archive.jsonl"
    for step in range(1, 4):
        state = {"step": step, "archive": [{"i": i} for i in range(step)], "rng": [3, [step], None]}
        records.write_state(state)
        assert records.read_state() == state
    inode, size = archive.stat().st_ino, archive.stat().st_size
    records.write_state({"step": 4, "archive": [{"i": i} for i in range(4)], "rng": [3, [4], None]})
    assert archive.stat().st_ino == inode and archive.stat().st_size == size + len('{"i":3}\n'), "appended in place"
    changed = {"step": 5, "archive": [{"i": -1}] + [{"i": i} for i in range(1, 4)], "rng": [3, [5], None]}
    records.write_state(changed)
    # history changed: kept inline in the small file, the list file the old state reads untouched
    assert records.read_state() == changed and archive.stat().st_ino == inode
    assert archive.read_text() == "".join(f'{{"i":{i}}}\n' for i in range(4))
    assert not (tmp_path / "run" / "state" / "rng.jsonl").exists(), "a list that changes every step stays inline"
    with open(archive, "a") as f:
        f.write('{"i": 99}\n{"torn"')  # a step killed after appending, before its small file
    assert RunRecords.open(str(tmp_path / "run")).read_state() == changed


def test_state_lists_of_any_length_round_trip(tmp_path):
    """Several items appended in one step, an empty list, a key with capitals: all read back."""
    from rsi.records import RunRecords

    records = RunRecords.create(str(tmp_path), "s", str(tmp_path / "run"))
    records.write_config({"name": "s"})
    records.write_state({"step": 1, "Archive": [{"i": 0}], "empty": []})
    grown = {"step": 2, "Archive": [{"i": 0}, {"i": 1}, {"i": 2}], "empty": []}
    records.write_state(grown)
    assert RunRecords.open(str(tmp_path / "run")).read_state() == grown
    assert (tmp_path / "run" / "state" / "Archive.jsonl").read_text() == '{"i":0}\n{"i":1}\n{"i":2}\n'
