"""Anthropic messages API: our OpenAI-style conversation translated to content blocks and back."""

from __future__ import annotations

import json
from pathlib import Path

from rsi.llm.client import ChatClient, ChatResult, Retryable, parse_arguments
from rsi.llm.config import LLMConfig
from rsi.llm.openai_client import classify
from rsi.workers.base import Usage


def to_anthropic(messages: list[dict]) -> tuple[str, list[dict]]:
    """System text, and user/assistant turns where tool results ride in the next user turn."""
    system: list[str] = []
    out: list[dict] = []
    for m in messages:
        role = m["role"]
        if role == "system":
            system.append(m["content"])
            continue
        if role == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
            continue
        blocks = [{"type": "text", "text": m["content"]}] if m.get("content") else []
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            try:
                args = json.loads(fn["arguments"] or "{}")
            except json.JSONDecodeError:
                args = {}
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": fn["name"],
                    "input": args if isinstance(args, dict) else {},
                }
            )
        if out and out[-1]["role"] == role:  # the API wants turns to alternate
            prev = out[-1]["content"]
            out[-1]["content"] = (prev if isinstance(prev, list) else [{"type": "text", "text": prev}]) + blocks
        else:
            out.append({"role": role, "content": blocks if m.get("tool_calls") else m.get("content", "")})
    return "\n\n".join(system), out


def anthropic_tools(tools: list[dict]) -> list[dict]:
    return [
        {
            "name": t["name"],
            "description": t.get("description", ""),
            "input_schema": t.get("parameters", {"type": "object", "properties": {}}),
        }
        for t in tools
    ]


class AnthropicClient(ChatClient):
    def __init__(self, cfg: LLMConfig, seed: int | None = None, base_dir: Path | None = None):
        super().__init__(cfg, seed, base_dir)
        import anthropic

        self._anthropic = anthropic
        self._key = cfg.api_key()
        self._sdk = anthropic.Anthropic(api_key=self._key, base_url=cfg.base_url, timeout=cfg.timeout_s, max_retries=0)

    def _request(self, messages: list[dict], tools: list[dict] | None) -> dict:
        system, turns = to_anthropic(messages)
        req: dict = {"model": self.cfg.model, "max_tokens": self.cfg.max_tokens, "messages": turns}
        if system:
            req["system"] = system
        if self.cfg.temperature is not None:
            req["temperature"] = min(self.cfg.temperature, 1.0)  # the API's range is [0, 1]
        if tools:
            req["tools"] = anthropic_tools(tools)
        return req

    def _send(self, request: dict) -> ChatResult:
        try:
            resp = self._sdk.messages.create(**request)
        except self._anthropic.APIError as exc:
            raise classify(exc, "anthropic", self._key) from None
        text, calls = [], []
        for block in resp.content or []:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                calls.append(
                    parse_arguments(
                        block.id, block.name, block.input if isinstance(block.input, dict) else json.dumps(block.input)
                    )
                )
        if resp.stop_reason is None and not text and not calls:
            raise Retryable("reply had no content and no stop reason")
        usage = Usage(1, resp.usage.input_tokens or 0, resp.usage.output_tokens or 0)
        return ChatResult("".join(text), calls, usage, resp.stop_reason or "end_turn")
