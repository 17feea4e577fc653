"""Worker registry: config ``type`` -> lazily imported class. A worker is an edit proposer (a
model, a coding agent, the offline mutator), configured as ``algorithm.worker``; Ray's own
processes are called Ray worker processes throughout.

Each worker class carries ``Config`` (a pydantic model with ``type: Literal[...]``,
``extra="forbid"``) and is built as ``cls(config, base_dir=..., seed=...)``.
"""

from __future__ import annotations

import importlib

from rsi.errors import ConfigError

WORKERS = {
    "scripted": "rsi.workers.scripted:ScriptedWorker",
    "mutator": "rsi.workers.mutator:MutatorWorker",
    "llm": "rsi.workers.llm:LLMWorker",
    "agent": "rsi.workers.agent:AgentWorker",
    "claude_code": "rsi.workers.claude_code:ClaudeCodeWorker",
}


def worker_class(type_name: str):
    if type_name not in WORKERS:
        raise ConfigError(f"unknown worker type {type_name!r}; valid: {', '.join(sorted(WORKERS))}")
    module, _, attr = WORKERS[type_name].partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"worker type {type_name!r} is not available: {exc}") from None
