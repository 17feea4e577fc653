"""Model-backed workers against the scripted server: real edits, confinement, bounded loops."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from rsi.errors import ConfigError, WorkerError
from rsi.snapshot import Snapshot
from rsi.testing.scripted_server import ScriptedServer
from rsi.workers import worker_class

KEY = "agent-test-key-0c41d2"


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


def step(*calls):
    return {"tool_calls": list(calls)}


def make_worker(srv, type_name="agent", **extra):
    cls = worker_class(type_name)
    llm = {"provider": "openai", "model": "scripted-model", "base_url": srv.base_url,
           "api_key_env": "RSI_TEST_AGENT_KEY", "retry_backoff_s": 0.01, "timeout_s": 5}
    config = cls.Config.model_validate({"type": type_name, "llm": llm, **extra})
    return cls(config, base_dir=os.getcwd(), seed=0)


def tool_results(request) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "tool"]


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("RSI_TEST_AGENT_KEY", KEY)


@pytest.fixture
def target(make_tree):
    return make_tree({
        "components.yaml": "- {name: prompts, glob: 'prompts/**'}\n- {name: code, glob: '*.py'}\n",
        "prompts/system.md": "old prompt\n",
        "main.py": "print('hi')\n",
    })


def test_agent_edits_the_checkout_through_write_file(target):
    steps = [step(call("list_files")), step(call("read_file", path="prompts/system.md")),
             step(call("write_file", path="prompts/system.md", content="new prompt\n")),
             step(call("finish", summary="rewrote the system prompt"))]
    snap = Snapshot.from_dir(target)
    with ScriptedServer(steps, api_key=KEY) as srv, snap.check_out() as checkout:
        worker = make_worker(srv)
        reply = worker.edit(checkout, "Improve the system prompt.")
        assert reply == "rewrote the system prompt"
        assert (checkout / "prompts/system.md").read_text() == "new prompt\n"
        child = snap.commit(checkout)
    assert child.changed_paths(snap) == ["prompts/system.md"]
    assert worker.usage.calls == 4
    first = srv.requests[0]["body"]
    assert first["messages"][1] == {"role": "user", "content": "Improve the system prompt."}
    assert {t["function"]["name"] for t in first["tools"]} == {"list_files", "read_file", "write_file",
                                                              "delete_file", "search", "finish"}
    assert "prompts/system.md" in tool_results(srv.requests[1])[0]
    assert tool_results(srv.requests[2])[-1] == "old prompt\n"
    assert KEY not in json.dumps(srv.requests)


def test_path_escapes_are_refused(tmp_path, target):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("do not read")
    (target / "link").symlink_to(outside)
    (target / "inner_link.md").symlink_to(target / "prompts/system.md")
    attempts = [call("write_file", path="../escape.txt", content="x"),
                call("write_file", path=str(tmp_path / "abs.txt"), content="x"),
                call("write_file", path="link/planted.txt", content="x"),
                call("read_file", path="link/secret.txt"),
                call("write_file", path="inner_link.md", content="x"),
                call("delete_file", path="prompts/../../target/main.py"),
                call("search", pattern="do not", path="link")]
    with ScriptedServer([step(*attempts), step(call("finish", summary="tried"))]) as srv:
        make_worker(srv).edit(target, "escape")
        results = tool_results(srv.requests[1])
    assert len(results) == len(attempts)
    assert all(r.startswith("error:") for r in results), results
    assert "absolute paths are refused" in results[1] and "'..' is refused" in results[0]
    assert "outside the checkout" in results[3] and "through a symlink" in results[4]
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "abs.txt").exists()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (target / "main.py").exists() and (target / "prompts/system.md").read_text() == "old prompt\n"
    assert not any("do not read" in r for r in results)


def test_reference_folders_are_read_only(target):
    shutil.copytree(target, target / "refs/donor", ignore=shutil.ignore_patterns("refs"))
    steps = [step(call("read_file", path="refs/donor/main.py"),
                  call("write_file", path="refs/donor/main.py", content="hacked"),
                  call("delete_file", path="refs/donor/prompts/system.md"),
                  call("write_file", path="components.yaml", content="- {name: all, glob: '**'}\n"),
                  call("write_file", path="main.py", content="print('better')\n")),
             step(call("finish", summary="took the donor's idea"))]
    with ScriptedServer(steps) as srv:
        make_worker(srv).edit(target, "recombine", references={"donor": "refs/donor"})
        results = tool_results(srv.requests[1])
        system = srv.requests[0]["body"]["messages"][0]["content"]
    assert "refs/donor/ (donor)" in system
    assert results[0] == "print('hi')\n"
    assert "read-only reference copy" in results[1] and "read-only reference copy" in results[2]
    assert "components.yaml is not editable" in results[3]
    assert results[4].startswith("wrote main.py")
    assert (target / "refs/donor/main.py").read_text() == "print('hi')\n"
    assert (target / "refs/donor/prompts/system.md").exists()
    assert (target / "main.py").read_text() == "print('better')\n"


def test_malformed_tool_calls_are_reported_then_end_the_edit(target):
    bad = {"tool_calls": [{"name": "write_file", "arguments": '{"path": "main.py", content'}]}
    with ScriptedServer([bad, step(call("finish", summary="ok after one slip"))]) as srv:
        worker = make_worker(srv)
        assert worker.edit(target, "edit") == "ok after one slip"
        assert worker.malformed_calls == 1
        assert "arguments are not valid JSON" in tool_results(srv.requests[1])[0]
    with ScriptedServer([bad] * 3) as srv:
        worker = make_worker(srv, max_bad_tool_calls=3)
        with pytest.raises(WorkerError, match="3 malformed tool calls in a row"):
            worker.edit(target, "edit")
        assert worker.malformed_calls == 3 and len(srv.requests) == 3
    assert (target / "main.py").read_text() == "print('hi')\n"


def test_max_turns_bounds_the_loop(target):
    with ScriptedServer([step(call("search", pattern="print"))], loop=True) as srv:
        reply = make_worker(srv, max_turns=3).edit(target, "look around")
        assert len(srv.requests) == 3
        assert tool_results(srv.requests[1])[0] == "main.py:1: print('hi')"
    assert reply.startswith("(stopped after max_turns=3 without finish)")


def test_a_text_reply_without_tools_ends_the_edit(target):
    with ScriptedServer(["Nothing to change: the prompt is fine."]) as srv:
        assert make_worker(srv).edit(target, "check") == "Nothing to change: the prompt is fine."


def test_llm_worker_asks_and_counts_usage():
    with ScriptedServer([{"text": "  <DESIGN>cache it</DESIGN> ", "tokens_in": 30, "tokens_out": 7}]) as srv:
        worker = make_worker(srv, "llm")
        assert worker.kind == "llm"
        assert worker.ask("propose a design") == "<DESIGN>cache it</DESIGN>"
        assert (worker.usage.calls, worker.usage.tokens_in, worker.usage.tokens_out) == (1, 30, 7)
        assert worker.get_state()["usage"][:3] == [1, 30, 7]
        with pytest.raises(NotImplementedError):
            worker.edit(None, "x")


def test_worker_configs_are_strict():
    with pytest.raises(ValueError, match=r"turns\s+Extra inputs are not permitted"):
        worker_class("agent").Config.model_validate({"type": "agent", "max_turns": 5, "turns": 3,
                                                    "llm": {"model": "m", "base_url": "http://127.0.0.1:1/v1"}})


def test_claude_code_worker_needs_the_cli():
    cls = worker_class("claude_code")
    config = cls.Config(api_key_env=None)
    if shutil.which("claude") is not None:
        pytest.skip("the claude CLI is installed here; its missing-CLI error cannot be shown")
    with pytest.raises(ConfigError, match="needs the `claude` CLI on PATH"):
        cls(config, base_dir=os.getcwd(), seed=0)


@pytest.mark.skipif(shutil.which("claude") is None, reason="the claude CLI is not installed (optional worker)")
def test_claude_code_worker_is_built_when_the_cli_exists():
    cls = worker_class("claude_code")
    worker = cls(cls.Config(api_key_env=None), base_dir=os.getcwd(), seed=0)
    assert worker.kind == "agent" and worker.executable
