"""Model clients against the scripted server, through the real openai and anthropic SDKs."""

from __future__ import annotations

import json
import time

import pytest

from rsi.errors import ConfigError, WorkerError
from rsi.llm import LLMConfig, check_credentials, make_client, miniagent_env
from rsi.testing.scripted_server import ScriptedServer

KEY = "scripted-test-key-7f3a9c"
TOOLS = [{"name": "lookup", "description": "look a word up",
          "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}]
USER = [{"role": "user", "content": "hello"}]


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv("RSI_TEST_MODEL_KEY", KEY)
    return "RSI_TEST_MODEL_KEY"


def openai_cfg(srv, key_env=None, **kw):
    base = dict(provider="openai", model="scripted-model", base_url=srv.base_url, api_key_env=key_env,
                retry_backoff_s=0.01, timeout_s=2.0, max_retries=2)
    return LLMConfig(**{**base, **kw})


def assert_key_not_recorded(srv):
    assert KEY not in json.dumps(srv.requests)


# ---- config --------------------------------------------------------------------------------------
@pytest.mark.parametrize("field,value", [
    ("api_key_env", "sk-proj-abcdefghijklmnopqrstuvwx"),
    ("model", "sk-ant-api03-abcdefghijklmnop"),
    ("base_url", "https://example.invalid/v1?key=Xq7Lm2Pz9Rt4Vb8Nc1Wd6Fg3Hj5Ks0Ay"),
])
def test_config_rejects_a_literal_key(field, value):
    cfg = {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:1/v1", field: value}
    with pytest.raises(ValueError, match="write the key in an environment variable and name it in api_key_env"):
        LLMConfig(**cfg)


def test_config_needs_an_env_var_name_and_forbids_unknown_keys():
    with pytest.raises(ValueError, match="must name an environment variable"):
        LLMConfig(provider="openai", model="m", api_key_env="my key")
    with pytest.raises(ValueError, match="needs api_key_env"):
        LLMConfig(provider="anthropic", model="claude-x")
    with pytest.raises(ValueError, match="extra"):
        LLMConfig(provider="openai", model="m", api_key_env="K", api_key="x")
    # model names and variable names are not mistaken for keys
    LLMConfig(provider="openai", model="Qwen/Qwen2.5-Coder-32B-Instruct-GPTQ-Int4", api_key_env="OPENAI_API_KEY")


def test_check_credentials_names_the_unset_variable(monkeypatch):
    monkeypatch.delenv("RSI_TEST_UNSET_KEY", raising=False)
    cfg = LLMConfig(provider="openai", model="m", api_key_env="RSI_TEST_UNSET_KEY")
    with pytest.raises(ConfigError, match="RSI_TEST_UNSET_KEY"):
        check_credentials(cfg)
    monkeypatch.setenv("RSI_TEST_UNSET_KEY", "value")
    check_credentials(cfg)
    check_credentials(LLMConfig(provider="openai", model="m", base_url="http://127.0.0.1:1/v1"))


# ---- retries -------------------------------------------------------------------------------------
def test_429_then_success_is_retried_and_counted(key_env):
    with ScriptedServer([{"status": 429}, "fine"], api_key=KEY) as srv:
        client = make_client(openai_cfg(srv, key_env))
        result = client.chat(USER)
        assert result.text == "fine"
        assert client.retries == 1
        assert client.usage.calls == 1 and client.usage.tokens_out > 0
        assert len(srv.requests) == 2 and all(r["authorized"] for r in srv.requests)
        assert_key_not_recorded(srv)


def test_500_storm_beyond_max_retries_is_a_worker_error():
    with ScriptedServer([{"status": 500}] * 5) as srv:
        client = make_client(openai_cfg(srv, max_retries=2))
        with pytest.raises(WorkerError, match=r"gave up after 3 attempts \(max_retries=2\).*HTTP 500"):
            client.chat(USER)
        assert len(srv.requests) == 3 and client.retries == 2 and client.usage.calls == 0


def test_client_error_is_not_retried():
    with ScriptedServer(["never"], api_key="another-key") as srv:
        client = make_client(openai_cfg(srv))
        with pytest.raises(WorkerError, match="HTTP 401"):
            client.chat(USER)
        assert len(srv.requests) == 1


def test_hung_response_times_out_and_is_retried():
    with ScriptedServer([{"delay_s": 30}, "recovered"]) as srv:
        client = make_client(openai_cfg(srv, timeout_s=0.3))
        assert client.chat(USER).text == "recovered"
        assert client.retries == 1
    t0 = time.monotonic()
    with ScriptedServer([{"delay_s": 30}] * 3) as srv:
        client = make_client(openai_cfg(srv, timeout_s=0.3, max_retries=1))
        with pytest.raises(WorkerError, match="timed out"):
            client.chat(USER)
    assert time.monotonic() - t0 < 10


# ---- replies ---------------------------------------------------------------------------------------
def test_tool_calls_and_malformed_arguments():
    steps = [{"tool_calls": [{"name": "lookup", "arguments": {"word": "tern"}}]},
             {"tool_calls": [{"name": "lookup", "arguments": '{"word": tern'}]}]
    with ScriptedServer(steps) as srv:
        client = make_client(openai_cfg(srv))
        good = client.chat(USER, tools=TOOLS)
        assert [(c.name, c.arguments, c.error) for c in good.tool_calls] == [("lookup", {"word": "tern"}, None)]
        bad = client.chat(USER, tools=TOOLS)
        assert bad.tool_calls[0].error.startswith("arguments are not valid JSON")
        assert bad.tool_calls[0].raw_arguments == '{"word": tern'
        sent = srv.requests[0]["body"]["tools"][0]
        assert sent["type"] == "function" and sent["function"]["name"] == "lookup"


def test_empty_completion_is_a_worker_error_with_the_reason():
    with ScriptedServer([{"text": "", "finish_reason": "length"}, {"text": ""}]) as srv:
        client = make_client(openai_cfg(srv))
        with pytest.raises(WorkerError, match=r"empty completion \(finish_reason=length\): the model spent max_tokens"):
            client.chat(USER)
        with pytest.raises(WorkerError, match=r"empty completion \(finish_reason=stop\)"):
            client.chat(USER)
        assert client.usage.calls == 2  # spent tokens are still counted


def test_streaming_joins_text_and_tool_call_fragments():
    args = {"word": "a long argument that arrives in several fragments"}
    steps = ["streamed reply text, in pieces", {"tool_calls": [{"name": "lookup", "arguments": args}]}]
    with ScriptedServer(steps) as srv:
        client = make_client(openai_cfg(srv, stream=True))
        assert client.chat(USER).text == "streamed reply text, in pieces"
        calls = client.chat(USER, tools=TOOLS).tool_calls
        assert [(c.name, c.arguments) for c in calls] == [("lookup", args)]
        assert srv.requests[0]["body"]["stream"] is True
        assert client.usage.calls == 2 and client.usage.tokens_in > 0


def test_anthropic_translation_round_trip(key_env):
    steps = [{"tool_calls": [{"name": "lookup", "arguments": {"word": "heron"}}]}, {"status": 529}, "a bird"]
    with ScriptedServer(steps, api_key=KEY) as srv:
        cfg = LLMConfig(provider="anthropic", model="claude-x", base_url=srv.anthropic_base_url,
                        api_key_env=key_env, retry_backoff_s=0.01)
        client = make_client(cfg)
        messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is a heron?"}]
        first = client.chat(messages, tools=TOOLS)
        assert first.tool_calls[0].arguments == {"word": "heron"} and first.finish_reason == "tool_use"
        messages += [first.message(), {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "a bird"}]
        assert client.chat(messages, tools=TOOLS).text == "a bird"
        assert client.retries == 1
        body = srv.requests[-1]["body"]
        assert body["system"] == "be brief"
        assert body["tools"][0]["input_schema"]["required"] == ["word"]
        assert body["messages"][1]["content"][0]["type"] == "tool_use"
        assert body["messages"][2]["content"][0] == {"type": "tool_result", "tool_use_id": first.tool_calls[0].id,
                                                     "content": "a bird"}
        assert_key_not_recorded(srv)


def test_cache_replays_identical_requests_and_prices_cost(tmp_path, key_env):
    prices = {"scripted-model": {"input_per_mtok": 2.0, "output_per_mtok": 8.0}}
    with ScriptedServer([{"text": "once", "tokens_in": 1000, "tokens_out": 500}], api_key=KEY) as srv:
        cfg = openai_cfg(srv, key_env, cache_dir=str(tmp_path / "cache"), prices=prices)
        first = make_client(cfg)
        assert first.chat(USER).text == "once"
        assert first.usage.cost_usd == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)
        second = make_client(cfg)  # a rerun: the script has no step left, the cache answers
        again = second.chat(USER)
        assert again.text == "once" and again.cached and second.cache_hits == 1 and second.usage.calls == 0
        assert len(srv.requests) == 1
    cached = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert len(cached) == 1 and KEY not in cached[0].read_text()


def test_miniagent_env_holds_settings_never_the_key_or_its_name(key_env):
    cfg = LLMConfig(provider="openai", model="m", base_url="http://127.0.0.1:9/v1", api_key_env=key_env,
                    max_tokens=64, temperature=0.2)
    env = miniagent_env(cfg)
    assert KEY not in json.dumps(env) and key_env not in json.dumps(env)
    assert env["RSI_MODEL_MAX_TOKENS"] == "64" and env["RSI_MODEL_NAME"] == "m"
    assert env["RSI_MODEL_BASE_URL"] == "http://127.0.0.1:9/v1" and env["RSI_MODEL_TEMPERATURE"] == "0.2"
    with pytest.raises(ConfigError, match="provider local"):
        miniagent_env(LLMConfig(provider="local", model="smollm2-135m"))
