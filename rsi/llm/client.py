"""Chat clients: one call shape for every provider, with our own retries, cache and usage.

Messages are OpenAI-style dicts (``system``/``user``/``assistant``/``tool`` roles, assistant
``tool_calls``, tool ``tool_call_id``); tools are ``{name, description, parameters}`` with a
JSON-schema ``parameters``. Providers translate both. The SDKs' own retries are off so that
every retry is ours: counted, backed off with jitter, and bounded by ``max_retries``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from rsi.errors import WorkerError
from rsi.llm.config import LLMConfig
from rsi.workers.base import Usage

MAX_BACKOFF_S = 60.0


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict
    #: Why ``arguments`` could not be read (not JSON, not an object); the agent tells the model.
    error: str | None = None
    raw_arguments: str = ""


@dataclass
class ChatResult:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    cached: bool = False

    def message(self) -> dict:
        """This reply as the assistant message to append to the conversation."""
        # null content beside tool calls: some strict servers refuse an empty string there
        msg: dict = {"role": "assistant", "content": self.text or (None if self.tool_calls else "")}
        if self.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.raw_arguments or json.dumps(c.arguments)},
                }
                for c in self.tool_calls
            ]
        return msg


class Retryable(Exception):
    """A provider failure worth another attempt (rate limit, server error, timeout, lost connection)."""

    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.retry_after = retry_after


def parse_arguments(call_id: str, name: str, raw) -> ToolCall:
    if isinstance(raw, dict):
        return ToolCall(call_id, name, raw, None, json.dumps(raw))
    raw = raw or ""
    try:
        args = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        return ToolCall(call_id, name, {}, f"arguments are not valid JSON ({exc.msg} at char {exc.pos})", raw)
    if not isinstance(args, dict):
        return ToolCall(call_id, name, {}, f"arguments must be a JSON object, got {type(args).__name__}", raw)
    return ToolCall(call_id, name, args, None, raw)


def retry_after(exc) -> float | None:
    """Seconds a 429/503 asked us to wait (``Retry-After``), when the server said."""
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class ChatClient(ABC):
    """Base of the provider clients: retries, response cache, usage accumulation."""

    def __init__(self, cfg: LLMConfig, seed: int | None = None, base_dir: Path | None = None):
        self.cfg = cfg
        self.seed = seed
        self.usage = Usage()
        self.retries = 0
        self.cache_hits = 0
        self._rng = random.Random(seed)
        cache = Path(cfg.cache_dir).expanduser() if cfg.cache_dir else None
        self._cache_dir = Path(base_dir) / cache if base_dir and cache and not cache.is_absolute() else cache

    # ---- what a provider supplies ------------------------------------------------------------
    @abstractmethod
    def _request(self, messages: list[dict], tools: list[dict] | None) -> dict:
        """The provider's request body (the cache key); no credentials in it."""

    @abstractmethod
    def _send(self, request: dict) -> ChatResult:
        """One attempt. Raises Retryable for transient failures, WorkerError for the rest."""

    # ---- the call --------------------------------------------------------------------------
    def chat(self, messages: list[dict], tools: list[dict] | None = None) -> ChatResult:
        request = self._request(messages, tools)
        key = self._cache_key(request)
        result = self._cache_get(key)
        if result is None:
            result = self._with_retries(request)
            result.usage.cost_usd = self.cfg.cost(result.usage.tokens_in, result.usage.tokens_out)
            self.usage.add(result.usage)
            check_answered(result)
            self._cache_put(key, result)
        return result

    def _with_retries(self, request: dict) -> ChatResult:
        attempt = 0
        while True:
            try:
                return self._send(request)
            except Retryable as exc:
                if attempt >= self.cfg.max_retries:
                    raise WorkerError(
                        f"{self.cfg.provider} model {self.cfg.model}: gave up after {attempt + 1} attempts "
                        f"(max_retries={self.cfg.max_retries}); last failure: {exc}"
                    ) from None
                delay = min(MAX_BACKOFF_S, self.cfg.retry_backoff_s * 2**attempt) * (0.5 + self._rng.random())
                if exc.retry_after is not None:
                    delay = min(MAX_BACKOFF_S, max(delay, exc.retry_after))
                attempt += 1
                self.retries += 1
                time.sleep(delay)

    def close(self) -> None:
        """Release what the client holds (a local model server)."""

    # ---- cache -----------------------------------------------------------------------------
    def _cache_key(self, request: dict) -> str:
        # The endpoint address is left out: a local server's port changes every run.
        body = json.dumps({"provider": self.cfg.provider, "request": request}, sort_keys=True, default=str)
        return hashlib.sha256(body.encode()).hexdigest()

    def _cache_get(self, key: str) -> ChatResult | None:
        if not self._cache_dir:
            return None
        path = self._cache_dir / key[:2] / f"{key}.json"
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        self.cache_hits += 1
        calls = [parse_arguments(c["id"], c["name"], c["arguments"]) for c in data["tool_calls"]]
        return ChatResult(data["text"], calls, Usage(), data["finish_reason"], cached=True)

    def _cache_put(self, key: str, result: ChatResult) -> None:
        if not self._cache_dir:
            return
        path = self._cache_dir / key[:2] / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "text": result.text,
            "finish_reason": result.finish_reason,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.raw_arguments} for c in result.tool_calls],
        }
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)


def check_answered(result: ChatResult) -> None:
    """A reply with neither text nor a tool call is a failed call, not an answer to act on."""
    if result.text.strip() or result.tool_calls:
        return
    if result.finish_reason in ("length", "max_tokens"):
        raise WorkerError(
            f"empty completion (finish_reason={result.finish_reason}): the model spent max_tokens without "
            f"answering; raise llm.max_tokens or shorten the prompt"
        )
    raise WorkerError(
        f"empty completion (finish_reason={result.finish_reason}): the model returned no text and no tool call"
    )
