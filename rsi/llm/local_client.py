"""provider local: an OpenAI client bound to a llama.cpp server it started (or was pointed at)."""

from __future__ import annotations

from pathlib import Path

from rsi.llm.config import LLMConfig
from rsi.llm.openai_client import OpenAIClient
from rsi.local_server import MAX_TOKENS_CAP, REPEAT_PENALTY, LocalModelServer, resolve_model


class LocalClient(OpenAIClient):
    """Greedy by default and capped: a 135M model is for smoke runs, not for long essays."""

    def __init__(self, cfg: LLMConfig, seed: int | None = None, base_dir: Path | None = None):
        self._server = None
        base_url = cfg.base_url
        if not base_url:  # no running server named: start one for this client
            self._server = LocalModelServer(resolve_model(cfg.model, base_dir)).start()
            base_url = self._server.base_url
        update = {
            "base_url": base_url,
            "max_tokens": min(cfg.max_tokens, MAX_TOKENS_CAP),
            "temperature": 0.0 if cfg.temperature is None else cfg.temperature,
        }
        super().__init__(cfg.model_copy(update=update), seed, base_dir, extra_body={"repeat_penalty": REPEAT_PENALTY})

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
