"""Helpers shared by the algorithm tests: run a config through the real runner, pick decisions."""

from __future__ import annotations

from pathlib import Path

from rsi.records import RunRecords
from rsi.runner import start_run


def run(path: Path) -> tuple[list[dict], dict, RunRecords]:
    """Run the config at ``path`` to its end -> (decisions, summary, records)."""
    r = start_run(str(path))
    summary = r.execute()
    return r.records.decisions(), summary, r.records


def of(decisions: list[dict], kind: str) -> list[dict]:
    return [d for d in decisions if d["kind"] == kind]
