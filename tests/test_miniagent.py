"""MiniAgent as the runner runs it: a jailed subprocess per task, the model behind the
RSI_MODEL_* contract, here a scripted endpoint on 127.0.0.1 reached through the rollout's model
proxy (a Unix socket bound into the jail) by the real openai SDK."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.qa import QA, QAParams
from rsi.config import TargetConfig
from rsi.errors import ConfigError
from rsi.llm import LLMConfig
from rsi.model_proxy import ModelProxy
from rsi.sandbox import Limits, run_program
from rsi.snapshot import Snapshot
from rsi.target import MiniAgentTarget
from rsi.testing.scripted_server import ScriptedServer

MINIAGENT = Path(__file__).resolve().parents[1] / "targets" / "miniagent"
KEY = "miniagent-test-key-58be17"
KEY_ENV = "RSI_TEST_MINIAGENT_KEY"


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture(scope="module")
def bench():
    return QA(QAParams(name="qa"))


def model(srv, **caps) -> dict:
    return dict(provider="openai", model="scripted-model", base_url=srv.base_url, api_key_env=KEY_ENV,
                max_tokens=64, max_retries=0, **caps)


def rollout(checkout: Path, bench, task, srv):
    """One jailed rollout with its own model proxy, as MiniAgentTarget runs it."""
    with ModelProxy(LLMConfig(**model(srv))) as proxy:
        env = proxy.env()
        assert KEY not in json.dumps(env) and KEY_ENV not in env
        return run_program([sys.executable, "runtime/main.py"], checkout, bench.payload(task, 0, 7),
                           Limits(timeout_s=60), env=env, binds=proxy.binds, required_keys=("answer", "trace"))


def assert_no_key(*things):
    for thing in things:
        assert KEY not in (thing if isinstance(thing, str) else json.dumps(thing, default=str))


def test_components_classify_every_file():
    snap = Snapshot.from_dir(MINIAGENT)
    assert snap.components.names == ["runtime", "prompts", "skills", "tools", "config"]
    globs = {r.name: r.glob for r in snap.components.rules}
    assert globs == {"runtime": "runtime/**", "prompts": "prompts/**", "skills": "skills/**", "tools": "tools/**",
                     "config": "agent.yaml"}
    labels = {p: e.component for p, e in snap.files.items()}
    assert labels["runtime/main.py"] == "runtime" and labels["agent.yaml"] == "config"
    assert labels["tools/search.py"] == "tools" and labels["skills/answering.md"] == "skills"
    assert snap.components.label("runtime/lib/deep/helper.py") == "runtime"


def test_answers_a_qa_task_from_the_prefetched_documents(bench):
    task = bench.split("train")[0]  # Who built the lighthouse of Port Amberly?
    rules = {"rules": [{"match": "built in 1871 by the engineer Tomas Vell", "reply": "Answer: Tomas Vell."}],
             "default": "I do not know"}
    with ScriptedServer([rules], loop=True, api_key=KEY) as srv, Snapshot.from_dir(MINIAGENT).check_out() as co:
        out = rollout(co, bench, task, srv)
        assert out.status == "ok", out.reason + out.stderr_tail
        assert out.output["answer"] == "Tomas Vell"
        assert bench.score(task, out.output, 0).primary == 1.0
        kinds = [step["kind"] for step in out.output["trace"]]
        assert kinds == ["prefetch", "model", "answer"]
        assert out.output["usage"]["calls"] == 1 and out.output["usage"]["tokens_in"] > 0
        request = srv.requests[0]
        assert request["authorized"]  # the proxy added the real key; the jail only had a token
        system = request["body"]["messages"][0]["content"]
        assert "Keldar Isles" in system and "# Answering" in system  # prompt and skill loaded
        assert task.input["question"] in request["body"]["messages"][1]["content"]
        assert request["body"]["max_tokens"] == 64
        assert_no_key(srv.requests, out.output, out.stdout_tail, out.stderr_tail)


def test_model_calls_the_search_tool_then_answers(bench):
    task = bench.split("test")[6]  # Who built the clock tower of Lantern Hall?
    assert task.meta["private"]["answers"] == ["Jonas Pell"]
    steps = [{"tool_calls": [{"name": "search", "arguments": {"query": "clock tower Lantern Hall", "k": 1}}]},
             {"rules": [{"match": "clockmaker Jonas Pell", "reply": "Jonas Pell"}], "default": "unknown"}]
    with ScriptedServer(steps, api_key=KEY) as srv, Snapshot.from_dir(MINIAGENT).check_out() as co:
        config = yaml.safe_load((co / "agent.yaml").read_text())
        (co / "agent.yaml").write_text(yaml.safe_dump({**config, "prefetch": None}))
        out = rollout(co, bench, task, srv)
        assert out.status == "ok", out.reason + out.stderr_tail
        assert out.output["answer"] == "Jonas Pell"
        trace = out.output["trace"]
        assert [s["kind"] for s in trace] == ["model", "tool", "model", "answer"]
        assert trace[1]["result"].startswith("[clock_tower]") and trace[1]["result"].count("\n") == 0
        assert srv.requests[0]["body"]["tools"][0]["function"]["name"] == "search"
        tool_msg = srv.requests[1]["body"]["messages"][-1]
        assert tool_msg["role"] == "tool" and "Jonas Pell" in tool_msg["content"]
        assert_no_key(srv.requests, out.output)


def test_unreachable_model_and_missing_environment_are_errors(bench, tmp_path):
    task = bench.split("dev")[0]
    with ScriptedServer(["never used"], api_key="a-different-key") as srv, \
            Snapshot.from_dir(MINIAGENT).check_out() as co:
        out = rollout(co, bench, task, srv)
        assert out.status == "error" and out.returncode == 1
        assert "model call failed" in out.stderr_tail and "401" in out.stderr_tail
        assert_no_key(out.stderr_tail, out.stdout_tail)
        bare = run_program([sys.executable, "runtime/main.py"], co, bench.payload(task, 0, 0), Limits(timeout_s=60),
                           required_keys=("answer", "trace"))
        assert bare.status == "error" and bare.returncode == 2 and "RSI_MODEL_BASE_URL" in bare.stderr_tail


def test_target_records_the_proxys_count_not_the_harness_report(bench):
    """MiniAgentTarget.run: a proxy per rollout; the rollout's tokens are what the endpoint
    reported to the proxy, for an answer and for a rollout cut short by the call cap alike."""
    task = bench.split("train")[0]
    rules = {"rules": [{"match": "Tomas Vell", "reply": {"text": "Tomas Vell", "tokens_in": 321, "tokens_out": 12}}],
             "default": "I do not know"}
    prices = {"scripted-model": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}
    with ScriptedServer([rules], loop=True, api_key=KEY) as srv, Snapshot.from_dir(MINIAGENT).check_out() as co:
        snap = Snapshot.from_dir(MINIAGENT)
        target = MiniAgentTarget(TargetConfig(path=str(MINIAGENT), kind="miniagent",
                                              model=model(srv, prices=prices)), bench)
        target.check(snap)
        result = target.run(co, task, 0, 7)
        assert result.status == "ok" and result.score == 1.0, result.trace
        assert (result.tokens_in, result.tokens_out) == (321, 12)
        assert result.cost_usd == pytest.approx((321 * 3.0 + 12 * 15.0) / 1e6)
        assert result.trace["model_usage"]["calls"] == 1
        assert_no_key(result.trace)

        # the shipped loop asks for the search tool on every step: the cap ends it after 2 calls
        loop = [{"tool_calls": [{"name": "search", "arguments": {"query": "lighthouse", "k": 1}}],
                 "tokens_in": 100, "tokens_out": 7}]
        with ScriptedServer(loop, loop=True, api_key=KEY) as looping:
            capped = MiniAgentTarget(TargetConfig(path=str(MINIAGENT), kind="miniagent",
                                                  model=model(looping, rollout_max_calls=2)), bench)
            config = yaml.safe_load((co / "agent.yaml").read_text())
            (co / "agent.yaml").write_text(yaml.safe_dump({**config, "prefetch": None, "max_steps": 10}))
            result = capped.run(co, task, 0, 7)
            assert len(looping.requests) == 2
        assert result.status == "error" and "429" in result.trace["stderr_tail"], result.trace
        assert "rollout_max_calls=2" in result.trace["stderr_tail"]
        assert (result.tokens_in, result.tokens_out) == (200, 14)
        assert result.trace["model_usage"]["calls"] == 2 and result.trace["model_usage"]["refused"] == 1


def test_env_pass_may_not_carry_the_model_key(bench):
    cfg = TargetConfig(path=str(MINIAGENT), kind="miniagent", env_pass=[KEY_ENV],
                       model={"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": KEY_ENV})
    with pytest.raises(ConfigError, match="model proxy"):
        MiniAgentTarget(cfg, bench).check(Snapshot.from_dir(MINIAGENT))
