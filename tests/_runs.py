"""Helpers shared by the algorithm tests: build a table-benchmark scenario, run a config
through the real runner, pick decisions."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import yaml

from rsi.driver.runner import start_run
from rsi.records import RunRecords

REPO = Path(__file__).resolve().parents[1]


def table_scenario(tmp_path: Path, algorithm: str, *, name: str, seed: int, table: dict, edits: list[dict],
                   ask_reply: str, params: dict, worker: dict | None = None, target: dict | None = None,
                   budget: dict | None = None) -> Path:
    """A run of ``algorithm`` on the table benchmark, scored as ``table`` says, from a copy of
    ``targets/table_demo``; the worker is the scripted one replaying ``edits`` (and answering
    every ask with ``ask_reply``) unless ``worker`` is given. Returns the config's path."""
    shutil.copytree(REPO / "targets" / "table_demo", tmp_path / "target")
    (tmp_path / "table.yaml").write_text(yaml.safe_dump(table))
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"edits": edits, "ask_reply": ask_reply}))
    cfg = {"name": name, "seed": seed, "storage": str(tmp_path / "runs"),
           "target": {"path": "target", "kind": "program", "entry": "solve.py", **(target or {})},
           "benchmark": {"name": "table", "path": "table.yaml"},
           "algorithm": {"name": algorithm, "worker": worker or {"type": "scripted", "script": "script.yaml"},
                         **params},
           **({"budget": budget} if budget else {})}
    path = tmp_path / f"{algorithm}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def scripted_edit(reply: str = "", version: str | None = None, **files) -> dict:
    """One step of the scripted worker's script: write ``files`` (``None`` deletes one), with
    ``VERSION`` set to ``version`` when given, and answer ``reply``."""
    if version is not None:
        files["VERSION"] = version + "\n"
    return {"files": files, "reply": reply}


def tool_call(name: str, **arguments) -> dict:
    """A scripted model server step: one tool call."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def agent_worker(base_url: str, api_key_env: str, model: str = "scripted-model", **llm) -> dict:
    """The built-in agent worker against a scripted model server (``llm`` adds client settings)."""
    return {"type": "agent", "llm": {"provider": "openai", "model": model, "base_url": base_url,
                                     "api_key_env": api_key_env, "retry_backoff_s": 0.01, **llm}}


def run(path: Path, run_dir: Path | None = None) -> tuple[list[dict], dict, RunRecords]:
    """Run the config at ``path`` to its end (in ``run_dir`` when given) -> (decisions, summary,
    records)."""
    r = start_run(str(path), run_dir=None if run_dir is None else str(run_dir))
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
