"""LLMWorker: a model that answers prompts (text only).

Algorithms that parse a proposal out of the reply (a program, a design, a policy) use this;
the client does the retries, the accounting and the optional response cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rsi.llm import ChatClient, LLMConfig, check_credentials, make_client
from rsi.workers.base import Worker


class ModelWorker(Worker):
    """Shared by the model-backed workers: a lazily built client whose usage is ours.

    Lazy because a worker may be constructed in one process (validation) and used in
    another (a Ray actor); the client holds sockets and, for provider local, a model server.
    """

    def __init__(self, config, base_dir: Path, seed: int):
        super().__init__()
        check_credentials(config.llm)
        self.config = config
        self.base_dir = Path(base_dir)
        self.seed = seed
        self._client: ChatClient | None = None

    @property
    def client(self) -> ChatClient:
        if self._client is None:
            self._client = make_client(self.config.llm, seed=self.seed, base_dir=self.base_dir)
            self._client.usage = self.usage  # one Usage: every call counts on the worker
        return self._client

    def ask(self, prompt: str) -> str:
        return self.client.chat([{"role": "user", "content": prompt}]).text.strip()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def get_state(self) -> dict:
        u = self.usage
        return {"usage": [u.calls, u.tokens_in, u.tokens_out, u.cost_usd]}

    def set_state(self, state: dict) -> None:
        if "usage" in state:
            calls, tin, tout, cost = state["usage"]
            self.usage.calls, self.usage.tokens_in, self.usage.tokens_out, self.usage.cost_usd = calls, tin, tout, cost


class LLMWorker(ModelWorker):
    kind = "llm"

    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")
        type: Literal["llm"] = Field("llm", description="a model that answers prompts with text")
        replicas: int = Field(1, ge=1, description="worker actors running in parallel")
        llm: LLMConfig = Field(description="the model and how to call it")
