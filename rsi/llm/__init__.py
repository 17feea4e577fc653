"""Model clients: ``make_client(cfg).chat(messages, tools) -> ChatResult`` for every provider.

Nothing here imports an SDK or llama.cpp until a client is built, so configs validate (and
the CLI starts) on machines without them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from rsi.errors import ConfigError
from rsi.llm.client import ChatClient, ChatResult, ToolCall
from rsi.llm.config import KEY_HINT, LLMConfig, Price, check_credentials, looks_like_key

__all__ = [
    "ChatClient",
    "ChatResult",
    "ToolCall",
    "LLMConfig",
    "Price",
    "check_credentials",
    "looks_like_key",
    "KEY_HINT",
    "make_client",
    "serve",
    "miniagent_env",
]

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    # Anthropic's OpenAI-SDK-compatible endpoint, for harnesses that speak only that protocol.
    "anthropic": "https://api.anthropic.com/v1/",
}


def _openai(cfg, seed, base_dir):
    from rsi.llm.openai_client import OpenAIClient

    return OpenAIClient(cfg, seed, base_dir)


def _anthropic(cfg, seed, base_dir):
    from rsi.llm.anthropic_client import AnthropicClient

    return AnthropicClient(cfg, seed, base_dir)


def _local(cfg, seed, base_dir):
    from rsi.llm.local_client import LocalClient

    return LocalClient(cfg, seed, base_dir)


PROVIDERS = {"openai": _openai, "anthropic": _anthropic, "local": _local}


def make_client(cfg: LLMConfig, seed: int | None = None, base_dir: Path | None = None) -> ChatClient:
    """A client for ``cfg.provider``; ``close()`` it when done (provider local holds a server)."""
    return PROVIDERS[cfg.provider](cfg, seed, base_dir)


@contextlib.contextmanager
def serve(cfg: LLMConfig, base_dir: Path | None = None) -> Iterator[LLMConfig]:
    """The config with a reachable ``base_url``: provider local without one gets a model server
    on 127.0.0.1 for the duration (rollouts on this machine only); others pass through."""
    if cfg.provider != "local" or cfg.base_url:
        yield cfg
        return
    from rsi.local_server import LocalModelServer, resolve_model

    with LocalModelServer(resolve_model(cfg.model, base_dir)) as srv:
        yield cfg.model_copy(update={"base_url": srv.base_url})


def miniagent_env(cfg: LLMConfig) -> dict[str, str]:
    """The model settings of a MiniAgent rollout (contract: targets/miniagent/README.md).

    Settings only: a rollout reaches its model through ``rsi.model_proxy``, which adds its
    socket and a per-rollout token. The upstream URL is here for the process backend's
    record; the key, and even the name of its variable, never go to a rollout.
    """
    base_url = cfg.base_url or DEFAULT_BASE_URLS.get(cfg.provider)
    if not base_url:
        raise ConfigError("provider local: start the model first (rsi.llm.serve(cfg)) and pass the served config")
    env = {
        "RSI_MODEL_BASE_URL": base_url,
        "RSI_MODEL_NAME": cfg.model,
        "RSI_MODEL_MAX_TOKENS": str(cfg.max_tokens),
        "RSI_MODEL_TIMEOUT_S": str(cfg.timeout_s),
        "RSI_MODEL_MAX_RETRIES": str(cfg.max_retries),
    }
    temperature = 0.0 if cfg.temperature is None and cfg.provider == "local" else cfg.temperature
    if temperature is not None:
        env["RSI_MODEL_TEMPERATURE"] = str(temperature)
    return env
