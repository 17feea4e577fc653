"""The scripted server itself: rules, loop, exhaustion, recording, and its command line."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from rsi.errors import WorkerError
from rsi.llm import LLMConfig, make_client
from rsi.testing.scripted_server import ScriptedServer


def client_for(srv, **kw):
    return make_client(LLMConfig(provider="openai", model="m", base_url=srv.base_url, retry_backoff_s=0.01,
                                 max_retries=0, **kw))


def test_rules_and_callables_choose_replies_from_the_request():
    rules = {"rules": [{"match": r"capital of \w+", "reply": "Ostrava Minor"}], "default": "no idea"}
    echo = lambda body: {"text": "echo: " + body["messages"][-1]["content"]}  # noqa: E731
    with ScriptedServer([rules, rules, echo]) as srv:
        client = client_for(srv)
        assert client.chat([{"role": "user", "content": "the capital of Keldar?"}]).text == "Ostrava Minor"
        assert client.chat([{"role": "user", "content": "weather?"}]).text == "no idea"
        assert client.chat([{"role": "user", "content": "ping"}]).text == "echo: ping"
        assert srv.remaining == 0
        with pytest.raises(WorkerError, match="HTTP 410.*no step left"):
            client.chat([{"role": "user", "content": "more"}])
        assert [r["body"]["messages"][-1]["content"] for r in srv.requests][:2] == ["the capital of Keldar?",
                                                                                   "weather?"]


def test_loop_replays_and_credentials_are_not_recorded():
    with ScriptedServer(["a", "b"], loop=True, api_key="secret-header-value") as srv:
        import openai

        sdk = openai.OpenAI(base_url=srv.base_url, api_key="secret-header-value", max_retries=0)
        texts = [sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
                 .choices[0].message.content for _ in range(3)]
        assert texts == ["a", "b", "a"]
        assert "secret-header-value" not in json.dumps(srv.requests)
        assert all(r["authorized"] and "authorization" not in r["headers"] for r in srv.requests)


def test_stop_ends_hung_responses_promptly():
    srv = ScriptedServer([{"delay_s": 60}]).start()
    client = client_for(srv, timeout_s=0.2)
    with pytest.raises(WorkerError, match="timed out"):
        client.chat([{"role": "user", "content": "x"}])
    t0 = time.monotonic()
    srv.stop()
    assert time.monotonic() - t0 < 5


def test_command_line_serves_a_script_file(tmp_path):
    script = tmp_path / "script.yaml"
    script.write_text("steps:\n  - text: from the file\n  - status: 503\nloop: false\n")
    proc = subprocess.Popen([sys.executable, "-m", "rsi.testing.scripted_server", "--script", str(script)],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("scripted server: http://127.0.0.1:") and "(2 steps)" in line
        base_url = line.split()[2]
        cfg = LLMConfig(provider="openai", model="m", base_url=base_url, max_retries=0)
        client = make_client(cfg)
        assert client.chat([{"role": "user", "content": "hi"}]).text == "from the file"
        with pytest.raises(WorkerError, match="HTTP 503"):
            client.chat([{"role": "user", "content": "hi"}])
    finally:
        proc.terminate()
        proc.wait(timeout=10)
