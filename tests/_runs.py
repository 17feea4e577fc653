"""Helpers shared by the algorithm tests: run a config through the real runner, pick decisions."""

from __future__ import annotations

import gzip
from pathlib import Path

from rsi.records import RunRecords
from rsi.driver.runner import start_run


def run(path: Path) -> tuple[list[dict], dict, RunRecords]:
    """Run the config at ``path`` to its end -> (decisions, summary, records)."""
    r = start_run(str(path))
    summary = r.execute()
    return r.records.decisions(), summary, r.records


def of(decisions: list[dict], kind: str) -> list[dict]:
    return [d for d in decisions if d["kind"] == kind]


def assert_no_secret(run_dir: Path, *secrets: str) -> None:
    """No secret value in any file of a run directory, read as stored and, for gzipped files
    (traces), as decompressed: a compressed trace must not hide a leaked key."""
    checked = 0
    for path in Path(run_dir).rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if path.suffix == ".gz":
            data += gzip.decompress(data)
        for secret in secrets:
            assert secret.encode() not in data, f"{secret[:4]}… found in {path}"
        checked += 1
    assert checked, f"{run_dir} holds no files"
