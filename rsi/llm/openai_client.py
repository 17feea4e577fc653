"""OpenAI chat completions (any compatible endpoint: vLLM, llama.cpp, gateways), with function tools."""

from __future__ import annotations

from pathlib import Path

from rsi.errors import WorkerError
from rsi.llm.client import ChatClient, ChatResult, Retryable, parse_arguments, retry_after
from rsi.llm.config import LLMConfig
from rsi.workers.base import Usage


def openai_tools(tools: list[dict]) -> list[dict]:
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t.get("parameters", {"type": "object", "properties": {}}),
            },
        }
        for t in tools
    ]


def scrub(text: str, secret: str) -> str:
    """Error bodies may echo the credential back; it must not reach a record."""
    return text.replace(secret, "<redacted>") if secret and len(secret) >= 4 else text


def classify(exc: Exception, provider: str, secret: str) -> Exception:
    """SDK exception -> Retryable (transient) or WorkerError (will not get better by retrying).

    The openai and anthropic SDKs share these class names and attributes, so both use this.
    """
    name = type(exc).__name__
    detail = scrub(str(exc), secret)[:500]
    if name == "APITimeoutError":
        return Retryable(f"request timed out ({detail})")
    if name == "APIConnectionError":
        return Retryable(f"connection error ({detail})")
    status = getattr(exc, "status_code", None)
    if status is not None:
        if status in (408, 409, 429) or status >= 500:
            return Retryable(f"HTTP {status}: {detail}", retry_after(exc))
        return WorkerError(f"{provider} endpoint refused the request: HTTP {status}: {detail}")
    return WorkerError(f"{provider} call failed: {name}: {detail}")


class OpenAIClient(ChatClient):
    def __init__(
        self, cfg: LLMConfig, seed: int | None = None, base_dir: Path | None = None, extra_body: dict | None = None
    ):
        super().__init__(cfg, seed, base_dir)
        import openai

        self._openai = openai
        self._key = cfg.api_key()
        self._extra_body = extra_body or {}
        self._sdk = openai.OpenAI(api_key=self._key, base_url=cfg.base_url, timeout=cfg.timeout_s, max_retries=0)

    def _request(self, messages: list[dict], tools: list[dict] | None) -> dict:
        req: dict = {"model": self.cfg.model, "messages": messages}
        # OpenAI's own newer models reject max_tokens; compatible servers mostly know only it.
        official = not self.cfg.base_url or "api.openai.com" in self.cfg.base_url
        req["max_completion_tokens" if official else "max_tokens"] = self.cfg.max_tokens
        if self.cfg.temperature is not None:
            req["temperature"] = self.cfg.temperature
        if self.seed is not None:
            req["seed"] = self.seed
        if tools:
            req["tools"] = openai_tools(tools)
        if self.cfg.stream:
            req["stream"] = True
            req["stream_options"] = {"include_usage": True}
        if self._extra_body:
            req["extra_body"] = dict(self._extra_body)
        return req

    def _send(self, request: dict) -> ChatResult:
        try:
            if request.get("stream"):
                return self._collect(self._sdk.chat.completions.create(**request))
            resp = self._sdk.chat.completions.create(**request)
        except self._openai.APIError as exc:
            raise classify(exc, "openai", self._key) from None
        if not resp.choices:
            raise Retryable("reply had no choices")
        choice = resp.choices[0]
        msg = choice.message
        calls = [
            parse_arguments(c.id, c.function.name, c.function.arguments)
            for c in (msg.tool_calls or [])
            if getattr(c, "function", None) is not None
        ]
        usage = Usage(1, getattr(resp.usage, "prompt_tokens", 0) or 0, getattr(resp.usage, "completion_tokens", 0) or 0)
        return ChatResult(msg.content or "", calls, usage, choice.finish_reason or "stop")

    def _collect(self, stream) -> ChatResult:
        """Join server-sent chunks: text deltas, tool-call fragments by index, the final usage."""
        text: list[str] = []
        parts: dict[int, dict[str, str]] = {}
        finish, usage = "stop", Usage(1)
        try:
            for chunk in stream:
                if chunk.usage:
                    usage = Usage(1, chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
                for choice in chunk.choices or []:
                    delta = choice.delta
                    if delta.content:
                        text.append(delta.content)
                    for tc in delta.tool_calls or []:
                        slot = parts.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                        slot["id"] = tc.id or slot["id"]
                        if tc.function is not None:
                            slot["name"] += tc.function.name or ""
                            slot["arguments"] += tc.function.arguments or ""
                    if choice.finish_reason:
                        finish = choice.finish_reason
        except self._openai.APIError as exc:
            raise classify(exc, "openai", self._key) from None
        calls = [parse_arguments(p["id"] or f"call_{i}", p["name"], p["arguments"]) for i, p in sorted(parts.items())]
        return ChatResult("".join(text), calls, usage, finish)
