"""The run directory on the local filesystem, where a run's durability lives: decision lines
appended and fsynced, every other file written to a temporary name, fsynced and renamed over
the old one, a torn last line read as the end of what was decided, and the refusals that keep a
run from writing over someone's files. test_records.py covers the object-store branch; these
tests were written against the survivors of ``perf/mutation.py records``."""

from __future__ import annotations

import gzip
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from rsi.errors import ClusterError, ConfigError
from rsi.records import RunRecords, dumps, new_run_uri, open_fs
from rsi.results import SCHEMA, rows_to_table
from rsi.snapshot import Snapshot

REPO = Path(__file__).resolve().parents[1]


def local(tmp_path, name: str = "run") -> RunRecords:
    return RunRecords.create(str(tmp_path / "runs"), "n", str(tmp_path / name))


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


# ---- names and opening ------------------------------------------------------------------------
def test_new_run_uri_is_storage_name_stamp_and_four_hex_digits():
    uri = new_run_uri("/abs/runs/", "exp")
    assert re.fullmatch(r"/abs/runs/exp-\d{8}-\d{6}-[0-9a-f]{4}", uri), uri
    assert re.fullmatch(r"/abs/runX/exp-\d{8}-\d{6}-[0-9a-f]{4}", new_run_uri("/abs/runX", "exp")), "only '/' is cut"
    assert re.fullmatch(r"s3://bucket/r/exp-\d{8}-\d{6}-[0-9a-f]{4}", new_run_uri("s3://bucket/r", "exp"))
    assert new_run_uri("/a", "x") != new_run_uri("/a", "x"), "two runs started in one second differ"


def test_open_fs_resolves_a_local_path_and_parses_a_uri(tmp_path):
    fs, path = open_fs(str(tmp_path / "a" / ".." / "b"))
    assert isinstance(fs, pafs.LocalFileSystem) and path == str(tmp_path / "b")
    fs, path = open_fs(f"file://{tmp_path}/c")
    assert isinstance(fs, pafs.LocalFileSystem) and path == f"{tmp_path}/c"
    with pytest.raises(ConfigError) as exc:
        open_fs("nosuchscheme://x/y")
    assert str(exc.value).startswith("storage 'nosuchscheme://x/y': ")


def test_create_names_a_new_run_under_storage_when_no_directory_is_given(tmp_path):
    records = RunRecords.create(str(tmp_path / "runs"), "exp")
    assert re.fullmatch(re.escape(str(tmp_path / "runs")) + r"/exp-\d{8}-\d{6}-[0-9a-f]{4}", records.root)
    assert records.uri == records.root and Path(records.root).is_dir()
    assert records.local_path() == Path(records.root)


def test_create_refuses_a_run_a_non_empty_directory_a_file_and_an_uncreatable_path(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert RunRecords.create("unused", "n", str(empty)).root == str(empty), "an empty directory is fine"
    for marker in ("decisions.jsonl", "run.json"):
        run = tmp_path / f"run-{marker}"
        run.mkdir()
        (run / marker).write_text("")
        with pytest.raises(ConfigError) as exc:
            RunRecords.create("unused", "n", str(run))
        assert str(exc.value) == f"run directory {run} already holds a run; use `rsi resume {run}`"
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError) as exc:
        RunRecords.create("unused", "n", str(busy))
    assert str(exc.value) == (f"run directory {busy} exists and is not empty (and holds no run); "
                              "give a new or empty directory")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError) as exc:
        RunRecords.create("unused", "n", str(tmp_path / "file"))
    assert str(exc.value) == f"run directory {tmp_path / 'file'} is an existing file, not a directory"
    sub = tmp_path / "file" / "sub"
    with pytest.raises(OSError) as os_error:  # what the filesystem says, on one line
        pafs.LocalFileSystem().create_dir(str(sub), recursive=True)
    with pytest.raises(ConfigError) as exc:
        RunRecords.create("unused", "n", str(sub))
    assert str(exc.value) == f"run directory {sub} cannot be created: {' '.join(str(os_error.value).split())}"


def test_create_makes_missing_parents_and_open_needs_a_config(tmp_path):
    deep = tmp_path / "a" / "b" / "run"
    records = RunRecords.create("unused", "n", str(deep))
    assert deep.is_dir() and records.root == str(deep) and records.uri == str(deep)
    with pytest.raises(ConfigError) as exc:
        RunRecords.open(str(deep))
    assert str(exc.value) == f"{deep} is not a run directory (no config.yaml)"
    records.write_config({"name": "n", "b": 1, "a": 2})
    opened = RunRecords.open(str(deep))
    assert (opened.root, opened.uri, opened.local_path()) == (str(deep), str(deep), deep)
    by_uri = RunRecords.open(f"file://{deep}")
    assert (by_uri.root, by_uri.uri) == (str(deep), f"file://{deep}")
    assert by_uri.read_config() == {"name": "n", "b": 1, "a": 2}
    # a local path is named resolved; a URI as given
    roundabout = str(tmp_path / "a" / ".." / "a" / "b" / "run")
    assert RunRecords.open(roundabout).uri == str(deep)
    made = RunRecords.create("unused", "n", str(tmp_path / "x" / ".." / "made"))
    assert (made.root, made.uri) == (str(tmp_path / "made"), str(tmp_path / "made"))
    made_uri = RunRecords.create("unused", "n", f"file://{tmp_path}/made2")
    assert (made_uri.root, made_uri.uri) == (f"{tmp_path}/made2", f"file://{tmp_path}/made2")


def test_a_root_keeps_its_leading_slash_and_loses_a_trailing_one(tmp_path):
    records = RunRecords(pafs.LocalFileSystem(), f"{tmp_path}/run/", "u")
    assert records.root == f"{tmp_path}/run" and records.path("x") == f"{tmp_path}/run/x"
    assert RunRecords(pafs.LocalFileSystem(), f"{tmp_path}/runX", "u").root == f"{tmp_path}/runX"
    sub = RunRecords(pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()), "run", "subtree://run")
    with pytest.raises(ClusterError) as exc:
        sub.local_path()
    assert str(exc.value) == "subtree://run is not on the local filesystem"


# ---- writes -------------------------------------------------------------------------------------
def test_decision_lines_are_compact_utf8_json_appended_one_per_line(tmp_path):
    records = local(tmp_path)
    records.decision({"step": 0, "reason": "größer", "ids": {"b", "a"}, "n": np.int64(3)})
    records.decision({"step": 1})
    assert (tmp_path / "run" / "decisions.jsonl").read_bytes() == \
        '{"step":0,"reason":"größer","ids":["a","b"],"n":3}\n{"step":1}\n'.encode()
    assert records.decisions() == [{"step": 0, "reason": "größer", "ids": ["a", "b"], "n": 3}, {"step": 1}]
    records.append_line("deep/er/log.jsonl", {"x": 1})  # missing parents are made
    records.append_line("deep/er/other.jsonl", {"x": 2})  # ... and existing ones are fine
    assert records.read_lines("deep/er/log.jsonl") == [{"x": 1}]
    assert records.read_lines("deep/er/other.jsonl") == [{"x": 2}]
    records.archive_entry({"id": "m1"})
    records.archive_entry({"id": "m2"})
    assert (tmp_path / "run" / "archive.jsonl").read_text() == '{"id":"m1"}\n{"id":"m2"}\n'


def test_dumps_converts_numpy_scalars_and_sets_and_refuses_the_rest():
    assert dumps({"f": np.float32(0.5), "i": np.int64(-2), "s": frozenset({3, 1}), "u": "é"}) == \
        '{"f":0.5,"i":-2,"s":[1,3],"u":"é"}'
    with pytest.raises(TypeError) as exc:
        dumps({"o": object()})
    assert str(exc.value) == "not JSON serialisable: object"


def test_write_bytes_replaces_atomically_and_leaves_no_temporary_file(tmp_path):
    records = local(tmp_path)
    records.write_bytes("a/b/c.bin", b"first")
    records.write_bytes("a/b/c.bin", b"second")
    assert (tmp_path / "run" / "a" / "b" / "c.bin").read_bytes() == b"second"
    assert files_under(tmp_path / "run") == ["a/b/c.bin"]
    assert records.read_bytes("a/b/c.bin") == b"second" and records.exists("a/b/c.bin")
    assert not records.exists("a/b/none")


def test_write_bytes_makes_nested_directories_on_an_object_store_too(tmp_path):
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    fs.create_dir("run", recursive=True)
    records = RunRecords(fs, "run", "subtree://run")
    records.write_bytes("x/y/z.bin", b"data")
    assert (tmp_path / "run" / "x" / "y" / "z.bin").read_bytes() == b"data"


def test_write_json_is_indented_utf8_with_numpy_values(tmp_path):
    records = local(tmp_path)
    records.write_json("s.json", {"a": [1], "n": np.int64(2), "u": "ü"})
    assert (tmp_path / "run" / "s.json").read_text(encoding="utf-8") == \
        '{\n  "a": [\n    1\n  ],\n  "n": 2,\n  "u": "ü"\n}'
    assert records.read_json("s.json") == {"a": [1], "n": 2, "u": "ü"}


def test_config_keeps_key_order(tmp_path):
    records = local(tmp_path)
    records.write_config({"name": "n", "b": 1, "a": [2, 3]})
    assert (tmp_path / "run" / "config.yaml").read_text() == "name: n\nb: 1\na:\n- 2\n- 3\n"


def test_state_and_traces_are_gzipped_at_the_fastest_level(tmp_path):
    records = local(tmp_path)
    records.write_state({"step": 1})
    rel = records.write_traces([{"t": 1}], "train")
    for stored in ((tmp_path / "run" / "state" / "latest.json.gz").read_bytes(), (tmp_path / "run" / rel).read_bytes()):
        assert stored[:2] == b"\x1f\x8b" and stored[8] == 4  # gzip header XFL 4: compressed at level 1
    assert gzip.decompress((tmp_path / "run" / rel).read_bytes()) == b'{"t":1}\n'


# ---- reads after a kill ------------------------------------------------------------------------
def test_a_torn_last_line_ends_what_was_decided(tmp_path):
    records = local(tmp_path)
    (tmp_path / "run" / "decisions.jsonl").write_text('{"step":0}\n\n{"step":1}\n{"step":2,"ki')
    assert records.decisions() == [{"step": 0}, {"step": 1}]
    assert records.read_lines("missing.jsonl") == []


def test_truncate_drops_lines_past_keep_and_leaves_an_intact_file_alone(tmp_path):
    records = local(tmp_path)
    path = tmp_path / "run" / "decisions.jsonl"
    path.write_text('{"step":0}\n{"step":1}\n{"step":2,"ki')
    records.truncate_lines("decisions.jsonl", 2)
    assert path.read_text() == '{"step":0}\n{"step":1}\n'
    # nothing past keep and the last line whole: not rewritten (a rewrite is a new inode)
    for keep in (2, 5):
        inode = path.stat().st_ino
        records.truncate_lines("decisions.jsonl", keep)
        assert path.stat().st_ino == inode and path.read_text() == '{"step":0}\n{"step":1}\n'
    records.truncate_lines("decisions.jsonl", 1)
    assert path.read_text() == '{"step":0}\n'
    inode = path.stat().st_ino
    records.truncate_lines("decisions.jsonl", 1)  # one whole line, keep 1
    assert path.stat().st_ino == inode
    records.truncate_lines("decisions.jsonl", 0)
    assert path.read_text() == ""
    inode = path.stat().st_ino
    records.truncate_lines("decisions.jsonl", 0)  # an empty file stays as it is
    assert path.stat().st_ino == inode
    records.truncate_lines("never-written.jsonl", 0)
    assert not records.exists("never-written.jsonl")


def test_a_last_decision_that_lost_only_its_newline_survives_resume(tmp_path):
    records = local(tmp_path)
    (tmp_path / "run" / "decisions.jsonl").write_text('{"step":0}\n{"step":1}')  # killed before the "\n"
    kept = records.decisions()
    assert kept == [{"step": 0}, {"step": 1}]
    records.truncate_lines("decisions.jsonl", len(kept))
    records.decision({"step": 2})
    assert records.decisions() == [{"step": 0}, {"step": 1}, {"step": 2}]


# ---- rollouts and traces ------------------------------------------------------------------------
def row(task_id: str, score: float) -> dict:
    return {"run_id": "r", "snapshot_id": "s", "split": "train", "task_id": task_id, "trial": 0,
            "sample_seed": 0, "score": score, "status": "ok"}


def test_rollouts_of_a_new_run_are_an_empty_table_of_the_schema(tmp_path):
    t = local(tmp_path).rollouts()
    assert t.num_rows == 0 and t.schema == SCHEMA


def test_rollouts_read_files_of_an_older_schema_into_this_one(tmp_path):
    records = local(tmp_path)
    legacy = rows_to_table([row("a", 0.5)]).drop_columns(["fingerprint"])  # a run from before the column
    (tmp_path / "run" / "rollouts").mkdir()
    pq.write_table(legacy, tmp_path / "run" / "rollouts" / "1-old.parquet")
    records.write_rollouts(rows_to_table([{**row("b", 1.0), "fingerprint": "fp"}]), "train")
    t = records.rollouts()
    assert t.schema == SCHEMA
    assert t["task_id"].to_pylist() == ["a", "b"] and t["fingerprint"].to_pylist() == [None, "fp"]


def test_a_trace_file_named_with_a_hash_and_a_plain_one_read_back(tmp_path):
    records = local(tmp_path)
    rel = records.write_traces([{"i": 0}, {"i": 1}], "dev#2")
    assert records.read_trace(f"{rel}#1") == {"i": 1}
    records.write_bytes("traces/old.jsonl", b'{"i": 10}\n{"i": 11}\n')  # a run from before gzip
    assert records.read_trace("traces/old.jsonl#1") == {"i": 11}


def test_the_trace_cache_holds_at_most_65_files_then_starts_over(tmp_path):
    records = local(tmp_path)
    rels = [records.write_traces([{"i": i}], f"t{i}") for i in range(66)]
    for i, rel in enumerate(rels[:65]):
        assert records.read_trace(f"{rel}#0") == {"i": i}
    assert len(records._trace_cache) == 65
    assert records.read_trace(f"{rels[65]}#0") == {"i": 65}
    assert list(records._trace_cache) == [rels[65]]


# ---- snapshots ----------------------------------------------------------------------------------
@pytest.fixture
def two_snapshots(tmp_path) -> tuple[Snapshot, Snapshot]:
    """table_demo twice, the second with another VERSION: every other file's blob is shared."""
    shutil.copytree(REPO / "targets" / "table_demo", tmp_path / "a")
    shutil.copytree(REPO / "targets" / "table_demo", tmp_path / "b")
    (tmp_path / "b" / "VERSION").write_text("v9\n")
    return Snapshot.from_dir(tmp_path / "a"), Snapshot.from_dir(tmp_path / "b")


def test_put_snapshot_writes_each_blob_and_manifest_once(tmp_path, two_snapshots):
    records = local(tmp_path, "store")
    a, b = two_snapshots
    records.put_snapshot(a)
    manifest = tmp_path / "store" / "snapshots" / f"{a.snapshot_id}.json"
    shared = tmp_path / "store" / "blobs" / a.files["solve.py"].digest
    inodes = manifest.stat().st_ino, shared.stat().st_ino
    records.put_snapshot(a)
    records.put_snapshot(b)  # shares solve.py's blob
    assert (manifest.stat().st_ino, shared.stat().st_ino) == inodes
    assert len(list((tmp_path / "store" / "blobs").iterdir())) == len(a.files) + 1
    assert sorted(records.iter_snapshot_ids()) == sorted([a.snapshot_id, b.snapshot_id])
    got = records.get_snapshot(b.snapshot_id)
    assert got.snapshot_id == b.snapshot_id and got.text("VERSION") == "v9\n"


def test_iter_snapshot_ids_of_a_new_run_is_empty(tmp_path):
    assert list(local(tmp_path).iter_snapshot_ids()) == []


@pytest.mark.parametrize("bad", [5, None, "ABC", "../x", "a" * 65, ""])
def test_get_snapshot_refuses_what_is_not_an_id(tmp_path, bad):
    records = local(tmp_path)
    with pytest.raises(ConfigError) as exc:
        records.get_snapshot(bad)
    assert str(exc.value) == f"{records.uri}: {bad!r} is not a snapshot id"


def test_get_snapshot_errors_name_the_run_and_the_id(tmp_path):
    records = local(tmp_path)
    with pytest.raises(ConfigError) as exc:
        records.get_snapshot("abc")
    assert str(exc.value) == f"{records.uri}: no snapshot abc"
    records.write_bytes("snapshots/abc.json", b"{not json")
    with pytest.raises(ConfigError) as exc:
        records.get_snapshot("abc")
    assert str(exc.value).startswith(f"{records.uri}: snapshot abc: manifest is not JSON (")
    records.write_json("snapshots/abc.json", {"snapshot_id": "def", "files": {}})
    with pytest.raises(ConfigError) as exc:
        records.get_snapshot("abc")
    assert str(exc.value) == f"{records.uri}: snapshots/abc.json holds another snapshot id"


@pytest.mark.parametrize("manifest, reason", [
    ([1, 2], "snapshot None: manifest has no files mapping"),
    ({"snapshot_id": "abc", "files": [1]}, "snapshot abc: manifest has no files mapping"),
    ({"snapshot_id": "abc", "files": {"a.py": []}}, "snapshot abc: malformed manifest entry for 'a.py'"),
    ({"snapshot_id": "abc", "files": {"a.py": "x"}}, "snapshot abc: malformed manifest entry for 'a.py'"),
])
def test_a_malformed_manifest_is_a_config_error_not_a_crash(tmp_path, manifest, reason):
    records = local(tmp_path)
    records.write_json("snapshots/abc.json", manifest)
    with pytest.raises(ConfigError) as exc:
        records.get_snapshot("abc")
    assert str(exc.value) == reason


# ---- typed decisions and the decision count ----------------------------------------------------
def test_a_typed_decision_is_stored_as_its_record_and_counted(tmp_path):
    from rsi.decisions import Decision

    records = local(tmp_path)
    assert records.decision_count() == 0
    records.decision(Decision(step=0, kind="seed", reason_code="seed", gain=0.5))
    records.decision({"step": 1, "kind": "stop"})
    assert records.decisions() == [
        {"v": 2, "step": 0, "kind": "seed", "snapshot_id": None, "parent_id": None, "donor_id": None,
         "accepted": None, "reason_code": "seed", "reason": "", "gain": 0.5},
        {"step": 1, "kind": "stop"},
    ]
    assert records.decision_count() == 2
    # counted from storage once, then kept by decision(): another writer's lines are not re-read
    (tmp_path / "run" / "decisions.jsonl").write_text('{"step":0}\n{"step":1}\n{"step":2}\n')
    assert records.decision_count() == 2
    records.decision({"step": 3})
    assert records.decision_count() == 3
    assert RunRecords(records.fs, records.root, records.uri).decision_count() == 4, "a new reader counts storage"


def test_truncate_decisions_cuts_the_file_and_recounts(tmp_path):
    records = local(tmp_path)
    for i in range(4):
        records.decision({"step": i})
    records.truncate_decisions(2)
    assert records.decision_count() == 2 and records.decisions() == [{"step": 0}, {"step": 1}]
    records.decision({"step": 9})
    assert records.decision_count() == 3 and records.decisions()[-1] == {"step": 9}
    assert (tmp_path / "run" / "decisions.jsonl").read_text() == '{"step":0}\n{"step":1}\n{"step":9}\n'


def test_decision_listeners_get_each_record_once_it_is_stored(tmp_path):
    records = local(tmp_path)
    if not hasattr(records, "decision_listeners"):
        pytest.skip("RunRecords has no decision listeners in this tree")
    heard = []
    records.decision_listeners.append(lambda record: heard.append((record, records.decision_count())))
    records.decision({"step": 0, "kind": "seed"})
    assert heard == [({"step": 0, "kind": "seed"}, 1)], "after the line is stored and counted"
