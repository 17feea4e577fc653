"""provider local: a real small model (SmolLM2-135M under llama.cpp) on 127.0.0.1, offline.

Skipped with the reason when the optional extra ``[local]`` is not installed.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rsi.local_server import available

pytestmark = pytest.mark.skipif(available() is not None, reason=available() or "")

MINIAGENT = Path(__file__).resolve().parents[1] / "targets" / "miniagent"


@pytest.fixture(scope="module")
def served():
    from rsi.llm import LLMConfig, serve

    with serve(LLMConfig(provider="local", model="smollm2-135m", max_tokens=24, timeout_s=120)) as cfg:
        yield cfg


def test_local_server_answers_through_the_openai_sdk(served):
    from rsi.llm import make_client

    assert served.base_url.startswith("http://127.0.0.1:")
    client = make_client(served)
    result = client.chat([{"role": "user", "content": "Name one colour."}])
    assert result.text.strip()
    assert client.usage.calls == 1 and client.usage.tokens_in > 0 and 0 < client.usage.tokens_out <= 24


def test_provider_local_starts_and_stops_its_own_server():
    from rsi.llm import LLMConfig, make_client

    client = make_client(LLMConfig(provider="local", model="smollm2-135m", max_tokens=8))
    try:
        assert client.cfg.base_url.startswith("http://127.0.0.1:") and client.cfg.temperature == 0.0
        assert client.chat([{"role": "user", "content": "Say hi."}]).usage.tokens_out <= 8
    finally:
        client.close()
    port = int(client.cfg.base_url.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)


def test_miniagent_answers_qa_tasks_through_smollm2(served, tmp_path):
    """MiniAgent as a rollout runs it: in the jail, reaching the local model only through the
    per-rollout model proxy, its usage counted there."""
    from benchmarks.qa import QA, QAParams
    from rsi.config import TargetConfig
    from rsi.snapshot import Snapshot
    from rsi.target import MiniAgentTarget

    bench = QA(QAParams(name="qa", limit=4))
    target = MiniAgentTarget(TargetConfig(path=".", kind="miniagent", limits={"timeout_s": 120},
                                          model=served.model_dump(exclude_none=True)), bench)
    scores, contains = [], []
    for task in bench.split("train"):
        with Snapshot.from_dir(MINIAGENT).check_out() as checkout:
            result = target.run(Path(checkout), task, 0, 0)
        assert result.status == "ok", result.trace
        answer = result.trace["output"]["answer"]
        assert isinstance(answer, str) and answer
        assert result.tokens_out > 0, "the proxy counted the model's reply"
        scores.append(result.score)
        contains.append(result.trace["metrics"]["contains"])
    mean = sum(scores) / len(scores)
    print(f"SmolLM2-135M MiniAgent on {len(scores)} train tasks: exact match {mean:.2f}, "
          f"answer contained {sum(contains) / len(contains):.2f}")
    assert 0.0 <= mean <= 1.0
    # A real model reading the prefetched documents: some replies carry the right answer.
    assert sum(contains) >= 1


def test_runner_serves_the_local_model_for_a_miniagent_run(tmp_path, ray_session):
    """configs/miniagent_local.yaml end to end: the runner starts the server, MiniAgent answers
    through it in sandboxed subprocesses, and real scores land in the run directory."""
    from rsi.driver.runner import start_run

    config = Path(__file__).resolve().parents[1] / "configs" / "miniagent_local.yaml"
    run = start_run(str(config), [("benchmark.limit", "2"), ("storage", str(tmp_path))])
    summary = run.execute()
    rows = run.records.rollouts().to_pylist()
    assert rows and all(r["status"] == "ok" for r in rows), [(r["task_id"], r["status"]) for r in rows]
    assert {"train", "dev", "test"} <= set(summary["means"])
    assert all(0.0 <= v <= 1.0 for v in summary["means"].values())
