"""``budget.max_cost_usd``: a run stops proposing once the model spend reaches the budget.

Spend is the worker's model usage priced by ``llm.prices`` (tokens as the endpoint reports them);
here the agent worker talks to the scripted model server (real HTTP, real openai SDK), which
reports exactly one input and one output token per reply. Prices are powers of two, so every
sum below is exact in floating point.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml
from _runs import of, run

from rsi.testing.scripted_server import ScriptedServer

REPO = Path(__file__).resolve().parents[1]
KEY = "budget-test-key-7d01c2"
# Ray worker processes see only the environment from before Ray starts: set it at import.
os.environ["RSI_TEST_BUDGET_KEY"] = KEY

NO_ROLLOUT_SPEND = {"rollout_tokens_in": 0, "rollout_tokens_out": 0, "rollout_cost_usd": 0.0}  # program target
PRICES = {"scripted-model": {"input_per_mtok": 250_000, "output_per_mtok": 500_000}}  # $0.75 per reply below


def reply(name: str, **arguments) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}], "tokens_in": 1, "tokens_out": 1}


def step(version: str) -> list[dict]:
    """One DarwinX step with the agent worker: the edit (write VERSION, then finish) and, once
    the candidate is archived, the lesson distilled from it: three model calls, $2.25."""
    return [reply("write_file", path="VERSION", content=version + "\n"),
            reply("finish", summary=f"switch to {version}"),
            {"text": f"{version} helps", "tokens_in": 1, "tokens_out": 1}]


def test_run_stops_when_model_spend_reaches_max_cost_usd(tmp_path, ray_session):
    shutil.copytree(REPO / "targets" / "table_demo", tmp_path / "target")
    table = {"splits": {"train": ["t1", "t2"], "dev": [], "test": ["x1"]},
             "scores": {"v0": {"t1": 0.5, "t2": 0.5, "x1": 0.5},
                        "v1": {"t1": 1.0, "t2": 0.5, "x1": 0.75},
                        "v2": {"t1": 1.0, "t2": 1.0, "x1": 1.0}}}
    (tmp_path / "table.yaml").write_text(yaml.safe_dump(table))
    steps = step("v1") + step("v2") + step("v3")  # the third step is never started
    with ScriptedServer(steps, api_key=KEY) as srv:
        llm = {"provider": "openai", "model": "scripted-model", "base_url": srv.base_url,
               "api_key_env": "RSI_TEST_BUDGET_KEY", "retry_backoff_s": 0.01, "prices": PRICES}
        cfg = {"name": "budget", "seed": 5, "storage": str(tmp_path / "runs"),
               "target": {"path": "target", "kind": "program", "entry": "solve.py"},
               "benchmark": {"name": "table", "path": "table.yaml"},
               "algorithm": {"name": "darwinx", "worker": {"type": "agent", "llm": llm}, "max_steps": 5,
                             "merge_every": 0, "screen_size": 2, "confirm_samples": 1},
               # $2.25 after step 1 is under it; $4.50 after step 2 reaches it exactly: >= stops
               "budget": {"max_cost_usd": 4.5}}
        path = tmp_path / "darwinx.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        decisions, summary, _ = run(path)
        requests, remaining = len(srv.requests), srv.remaining
    assert requests == 6 and remaining == 3, "two steps of three calls each; the third step never started"
    stop, = of(decisions, "stop")
    assert stop["step"] == 2
    assert stop["reason"] == "budget: model spend $4.5000 reached max_cost_usd 4.5"
    assert stop["usage"] == {"calls": 6, "tokens_in": 6, "tokens_out": 6, "cost_usd": 4.5, **NO_ROLLOUT_SPEND}
    confirms = of(decisions, "confirm")
    assert [(d["step"], d["accepted"]) for d in confirms] == [(1, True), (2, True)]
    assert [d["kind"] for d in decisions] == ["seed", "screen", "confirm", "screen", "confirm", "stop", "promote", "test"]
    promote, = of(decisions, "promote")
    assert promote["snapshot_id"] == confirms[1]["snapshot_id"] == summary["snapshot_id"]
    assert [a["learning"] for a in promote["archive"]] == ["", "v1 helps", "v2 helps"]
    assert summary["usage"] == {"calls": 6, "tokens_in": 6, "tokens_out": 6, "cost_usd": 4.5, **NO_ROLLOUT_SPEND}


def test_rollout_spend_through_the_model_proxy_counts_toward_the_budget(tmp_path, ray_session):
    """An agent target's own model calls are measured at its rollouts' model proxy; the run's
    budget counts them beside the workers' spend. Here the worker is offline (free): 4 seed
    rollouts at $0.75 each ($3.00) reach max_cost_usd 3.0 before any edit is proposed."""
    shutil.copytree(REPO / "targets" / "miniagent", tmp_path / "target")
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"edits": [{"files": {"agent.yaml": "x: 1\n"}}]}))
    answer = {"text": "Answer: unknown.", "tokens_in": 1, "tokens_out": 1}
    with ScriptedServer([answer], loop=True, api_key=KEY) as srv:
        model = {"provider": "openai", "model": "scripted-model", "base_url": srv.base_url,
                 "api_key_env": "RSI_TEST_BUDGET_KEY", "max_retries": 0, "prices": PRICES}
        cfg = {"name": "budget-rollouts", "seed": 5, "storage": str(tmp_path / "runs"),
               "target": {"path": "target", "kind": "miniagent", "model": model, "deterministic": True},
               "benchmark": {"name": "qa", "limit": 4},
               "algorithm": {"name": "darwinx", "worker": {"type": "scripted", "script": "script.yaml"},
                             "max_steps": 3, "merge_every": 0, "screen_size": 2, "confirm_samples": 1},
               "budget": {"max_cost_usd": 3.0}}
        path = tmp_path / "darwinx.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        decisions, summary, records = run(path)
    assert [d["kind"] for d in decisions] == ["seed", "stop", "promote", "test"]
    stop, = of(decisions, "stop")
    assert stop["reason"] == "budget: model spend $3.0000 reached max_cost_usd 3.0"
    assert stop["usage"]["rollout_cost_usd"] == 3.0 and stop["usage"]["rollout_tokens_in"] == 4
    assert sum(records.rollouts()["cost_usd"].to_pylist()) == 3.0 + 4 * 0.75, "the test rollouts are counted too"
