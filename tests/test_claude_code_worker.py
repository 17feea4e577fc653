"""The claude_code worker against ``tests/fakes/fake-claude``, a scripted stand-in for the
`claude` CLI put on PATH as ``claude``: real subprocesses, real file edits, real commits.

The fake accepts exactly the flags the worker passes, edits the checkout only when the call
allows editing, logs each call (arguments, working directory, variable names) and prints the
JSON object the worker parses. It is a test double, not Claude Code.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from rsi.errors import WorkerError
from rsi.snapshot import Snapshot
from rsi.workers import worker_class
from rsi.workers.base import Usage

FAKE = Path(__file__).resolve().parent / "fakes" / "fake-claude"
KEY = "claude-code-test-key-51e0aa"
PROMPT = "Make main.py print hello."


@pytest.fixture
def fake_cli(tmp_path, monkeypatch):
    """``claude`` on PATH runs the fake with this interpreter; its script and call log live in
    a HOME of its own. Returns a function that writes the script and one that reads the log."""
    bin_dir, home = tmp_path / "bin", tmp_path / "home"
    bin_dir.mkdir()
    (home / ".fake-claude").mkdir(parents=True)
    claude = bin_dir / "claude"
    claude.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    claude.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RSI_TEST_CLAUDE_KEY", KEY)
    monkeypatch.setenv("RSI_TEST_UNNAMED_SECRET", "must-not-reach-the-cli")

    def script(*steps: dict) -> None:
        (home / ".fake-claude" / "script.json").write_text(json.dumps(list(steps)))

    def calls() -> list[dict]:
        log = home / ".fake-claude" / "calls.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return script, calls


@pytest.fixture
def target(make_tree):
    return make_tree({
        "components.yaml": "- {name: code, glob: '*.py'}\n- {name: docs, glob: '*.md'}\n",
        "main.py": "print('hi')\n",
        "README.md": "a demo\n",
    })


def make_worker(**extra):
    cls = worker_class("claude_code")
    config = cls.Config.model_validate({"type": "claude_code", "api_key_env": "RSI_TEST_CLAUDE_KEY",
                                        "model": "claude-test-model", **extra})
    return cls(config, base_dir=os.getcwd(), seed=0)


def test_edit_changes_the_checkout_and_the_commit_holds_it(fake_cli, target):
    script, calls = fake_cli
    script({"write": {"main.py": "print('hello')\n"}, "result": "  Changed main.py to print hello.\n",
            "input_tokens": 1200, "output_tokens": 340, "total_cost_usd": 0.125})
    worker = make_worker()
    assert worker.executable == shutil.which("claude") and worker.kind == "agent"
    snap = Snapshot.from_dir(target)
    with snap.check_out() as checkout:
        reply = worker.edit(checkout, PROMPT)
        child = snap.commit(checkout)
    assert reply == "Changed main.py to print hello."
    assert worker.usage == Usage(calls=1, tokens_in=1200, tokens_out=340, cost_usd=0.125)
    assert child.changed_paths(snap) == ["main.py"]
    assert child.text("main.py") == "print('hello')\n" and child.text("README.md") == "a demo\n"
    assert child.parent_id == snap.snapshot_id and child.files["main.py"].component == "code"
    call, = calls()
    assert call["argv"] == ["-p", PROMPT, "--output-format", "json", "--max-turns", "50",
                            "--permission-mode", "acceptEdits", "--allowedTools", "Read,Edit,Write,Glob,Grep,LS",
                            "--model", "claude-test-model"]
    assert (call["cwd"], call["denied"]) == (str(checkout), [])
    assert "RSI_TEST_CLAUDE_KEY" in call["env"] and "RSI_TEST_UNNAMED_SECRET" not in call["env"]
    assert set(call["env"]) <= {"PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "RSI_TEST_CLAUDE_KEY", "PWD"}


def test_references_are_named_in_the_prompt(fake_cli, target):
    script, calls = fake_cli
    script({"result": "read the donor; nothing to change"})
    worker = make_worker(max_turns=7)
    with Snapshot.from_dir(target).check_out() as checkout:
        assert worker.edit(checkout, PROMPT, {"donor": ".rsi_refs/donor/", "ancestor": ".rsi_refs/ancestor"}) == \
            "read the donor; nothing to change"
    argv = calls()[0]["argv"]
    assert argv[1] == PROMPT + ("\n\nRead-only reference copies of other versions are in: .rsi_refs/ancestor/ "
                                "(ancestor), .rsi_refs/donor/ (donor). Read them for ideas; never edit them.")
    assert argv[argv.index("--max-turns") + 1] == "7"


def test_ask_runs_without_edit_tools_in_an_empty_directory(fake_cli):
    script, calls = fake_cli
    script({"write": {"notes.md": "written by ask\n"}, "result": "  a plain answer  ", "input_tokens": 3,
            "output_tokens": 2, "total_cost_usd": 0.25})
    worker = make_worker()
    assert worker.ask("what now?") == "a plain answer"
    call, = calls()
    assert call["argv"] == ["-p", "what now?", "--output-format", "json", "--max-turns", "50",
                            "--disallowedTools", "Bash,Edit,Write,NotebookEdit", "--model", "claude-test-model"]
    assert call["denied"] == ["notes.md"], "no edit permission: the CLI may not write"
    assert Path(call["cwd"]).name.startswith("rsi-claude-") and not Path(call["cwd"]).exists(), "removed after"
    assert worker.usage == Usage(calls=1, tokens_in=3, tokens_out=2, cost_usd=0.25)


def test_cli_error_is_a_worker_error_and_still_counts_usage(fake_cli, target):
    script, _ = fake_cli
    script({"result": "", "is_error": True, "subtype": "error_max_turns", "input_tokens": 900,
            "output_tokens": 10, "total_cost_usd": 0.5})
    worker = make_worker()
    with Snapshot.from_dir(target).check_out() as checkout:
        with pytest.raises(WorkerError, match=r"claude CLI failed \(exit 1, error_max_turns\)"):
            worker.edit(checkout, PROMPT)
        assert (checkout / "main.py").read_text() == "print('hi')\n"
    assert worker.usage == Usage(calls=1, tokens_in=900, tokens_out=10, cost_usd=0.5)
