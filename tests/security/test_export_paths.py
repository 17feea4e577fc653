"""A run directory is data, possibly hand-made: a snapshot manifest naming ``../`` or absolute
paths (or a blob name that walks out of ``blobs/``) must be refused before anything is written
or read outside the run. The check lives in Snapshot.from_manifest / materialize, so every
consumer (export, resume, the rollout checkout) is covered, not only ``rsi export``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsi.driver.cli import main
from rsi.errors import ConfigError
from rsi.snapshot import FileEntry, Snapshot, sha256

COMPONENTS = b"- {name: code, glob: '**'}\n"


def hand_made_run(root: Path, files: dict[str, bytes], digests: dict[str, str] | None = None) -> tuple[Path, str]:
    """A run directory written by hand: config.yaml, blobs/, snapshots/ID.json with a valid id."""
    run = root / "run"
    (run / "blobs").mkdir(parents=True)
    (run / "snapshots").mkdir()
    (run / "config.yaml").write_text("name: hand\n")
    files = {"components.yaml": COMPONENTS, **files}
    entries = {}
    for rel, data in files.items():
        digest = (digests or {}).get(rel, sha256(data))
        (run / "blobs" / sha256(data)).write_bytes(data)
        entries[rel] = FileEntry(digest, "_components" if rel == "components.yaml" else "code", False)
    sid = Snapshot.compute_id(entries)
    manifest = {"snapshot_id": sid, "parent_id": None,
                "files": {p: [e.digest, e.component, e.executable] for p, e in sorted(entries.items())}}
    (run / "snapshots" / f"{sid}.json").write_text(json.dumps(manifest))
    return run, sid


def export(run: Path, sid: str, dest: Path, capsys) -> tuple[int, list[str]]:
    code = main(["export", str(run), "--snapshot", sid, str(dest)])
    return code, capsys.readouterr().err.strip().splitlines()


def written(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.parametrize("rel, why", [
    ("../escape.txt", "has an empty, '.' or '..' part"),
    ("sub/../../escape.txt", "has an empty, '.' or '..' part"),
    ("ABSOLUTE", "is absolute"),
    ("sub/\0escape.txt", "contains a NUL byte"),
    ("sub//escape.txt", "has an empty, '.' or '..' part"),
])
def test_export_refuses_a_manifest_path_outside_the_destination(tmp_path, capsys, rel, why):
    rel = str(tmp_path / "escape.txt") if rel == "ABSOLUTE" else rel
    run, sid = hand_made_run(tmp_path, {rel: b"owned\n", "ok.py": b"x = 1\n"})
    before = written(tmp_path)
    dest = tmp_path / "out" / "dest"
    code, err = export(run, sid, dest, capsys)
    assert code == 2, err
    assert err == [f"rsi: error: snapshot {sid}: unsafe path {rel!r}: {why}"]
    assert written(tmp_path) == before, "nothing may be written, inside the destination or out of it"
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "out" / "escape.txt").exists()


def test_export_refuses_a_blob_name_outside_blobs(tmp_path, capsys):
    """A digest such as ``../../secret`` would read a file outside the run into the export."""
    (tmp_path / "secret").write_bytes(b"not yours\n")
    run, sid = hand_made_run(tmp_path, {"ok.py": b"x = 1\n"}, digests={"ok.py": "../../secret"})
    dest = tmp_path / "dest"
    code, err = export(run, sid, dest, capsys)
    assert code == 2, err
    assert err == [f"rsi: error: snapshot {sid}: malformed manifest entry for 'ok.py'"]
    assert not dest.exists()


def test_export_refuses_a_snapshot_id_that_is_a_path(tmp_path, capsys):
    run, _ = hand_made_run(tmp_path, {"ok.py": b"x = 1\n"})
    (tmp_path / "other.json").write_text("{}")
    code, err = export(run, "../../other", tmp_path / "dest", capsys)
    assert code == 2 and len(err) == 1 and "'../../other' is not a snapshot id" in err[0], err
    assert not (tmp_path / "dest").exists()


def test_export_refuses_a_file_that_is_also_a_folder(tmp_path, capsys):
    run, sid = hand_made_run(tmp_path, {"a": b"1\n", "a/b.py": b"2\n"})
    code, err = export(run, sid, tmp_path / "dest", capsys)
    assert (code, err) == (2, [f"rsi: error: snapshot {sid}: 'a' is both a file and a folder"])
    assert not (tmp_path / "dest").exists()


def test_export_of_a_sound_hand_made_snapshot_still_works(tmp_path, capsys):
    run, sid = hand_made_run(tmp_path, {"src/ok.py": b"x = 1\n"})
    dest = tmp_path / "dest"
    code, err = export(run, sid, dest, capsys)
    assert code == 0, err
    assert written(dest) == {"components.yaml", "src", "src/ok.py"}
    assert (dest / "src" / "ok.py").read_bytes() == b"x = 1\n"


def test_from_manifest_and_materialize_check_every_path(tmp_path):
    """Any consumer: from_manifest refuses the manifest; a Snapshot built in memory with such a
    path refuses to materialise before writing anything."""
    bad = {"components.yaml": FileEntry(sha256(COMPONENTS), "_components", False),
           "../up.txt": FileEntry(sha256(b"x"), "code", False)}
    blobs = {sha256(COMPONENTS): COMPONENTS, sha256(b"x"): b"x"}
    manifest = {"snapshot_id": Snapshot.compute_id(bad), "parent_id": None,
                "files": {p: [e.digest, e.component, e.executable] for p, e in bad.items()}}
    with pytest.raises(ConfigError, match=r"unsafe path '\.\./up\.txt'"):
        Snapshot.from_manifest(manifest, blobs)
    good = Snapshot.from_manifest({**manifest, "files": {"components.yaml": manifest["files"]["components.yaml"]},
                                   "snapshot_id": Snapshot.compute_id({"components.yaml": bad["components.yaml"]})},
                                  blobs)
    forged = Snapshot(files=bad, blobs=blobs, components=good.components)
    dest = tmp_path / "d" / "dest"
    with pytest.raises(ConfigError, match="unsafe path"):
        forged.materialize(dest)
    assert not (tmp_path / "d").exists() and not (tmp_path / "d" / "up.txt").exists()


def test_from_manifest_checks_blob_digests(tmp_path):
    entries = {"components.yaml": FileEntry(sha256(COMPONENTS), "_components", False)}
    manifest = {"snapshot_id": Snapshot.compute_id(entries), "parent_id": None,
                "files": {p: [e.digest, e.component, e.executable] for p, e in entries.items()}}
    with pytest.raises(ConfigError, match="does not match its digest"):
        Snapshot.from_manifest(manifest, {sha256(COMPONENTS): COMPONENTS + b"# tampered\n"})
