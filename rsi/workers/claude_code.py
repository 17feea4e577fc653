"""ClaudeCodeWorker: the ``claude`` CLI in headless mode, editing the checkout itself.

Optional: the CLI must be on PATH (``shutil.which("claude")``), checked when the worker is
built so a run fails at startup, not at its first edit. The CLI runs with a scrubbed
environment (PATH, HOME, locale and the one variable ``api_key_env`` names) and JSON output,
from which the reply, the token counts and the cost are read.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rsi.errors import ConfigError, WorkerError
from rsi.llm.config import ENV_NAME
from rsi.workers.base import Usage, Worker

PASS_ENV = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR")
EDIT_TOOLS = "Read,Edit,Write,Glob,Grep,LS"
REFERENCES = "\n\nRead-only reference copies of other versions are in: {folders}. Read them for ideas; never edit them."


class ClaudeCodeWorker(Worker):
    kind = "agent"

    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")
        type: Literal["claude_code"] = Field("claude_code", description="the claude CLI (optional; must be on PATH)")
        replicas: int = Field(1, ge=1, description="worker actors running in parallel")
        model: str | None = Field(None, description="--model for the CLI (default: the CLI's)")
        api_key_env: str | None = Field(
            "ANTHROPIC_API_KEY",
            description="NAME of the variable with the key, passed to the CLI by that name; null: the CLI's own login",
        )
        max_turns: int = Field(50, ge=1, description="--max-turns per edit")
        timeout_s: float = Field(1800.0, gt=0, description="wall-clock limit of one CLI call")
        allowed_tools: str = Field(EDIT_TOOLS, description="--allowedTools for edits (comma-separated)")

        @field_validator("api_key_env")
        @classmethod
        def _env_name(cls, v):
            if v is not None and not ENV_NAME.match(v):
                raise ValueError(
                    "must name an environment variable; write the key in an environment variable "
                    "and name it in api_key_env"
                )
            return v

    def __init__(self, config: ClaudeCodeWorker.Config, base_dir: Path, seed: int):
        super().__init__()
        executable = shutil.which("claude")
        if executable is None:
            raise ConfigError(
                "worker type claude_code needs the `claude` CLI on PATH (npm install -g @anthropic-ai/claude-code)"
            )
        self.executable: str = executable
        if config.api_key_env and not os.environ.get(config.api_key_env):
            raise ConfigError(
                f"environment variable {config.api_key_env} (named by api_key_env) is not set; "
                f"export it, or set api_key_env: null to use the CLI's own login"
            )
        self.config = config
        self.seed = seed

    def _env(self) -> dict[str, str]:
        names = list(PASS_ENV) + ([self.config.api_key_env] if self.config.api_key_env else [])
        return {n: os.environ[n] for n in names if n in os.environ}

    def _run(self, prompt: str, cwd: Path, tools: str) -> str:
        argv = [self.executable, "-p", prompt, "--output-format", "json", "--max-turns", str(self.config.max_turns)]
        if tools:
            argv += ["--permission-mode", "acceptEdits", "--allowedTools", tools]
        else:
            argv += ["--disallowedTools", "Bash,Edit,Write,NotebookEdit"]
        if self.config.model:
            argv += ["--model", self.config.model]
        try:
            proc = subprocess.run(
                argv,
                cwd=cwd,
                env=self._env(),
                capture_output=True,
                text=True,
                timeout=self.config.timeout_s,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise WorkerError(f"claude CLI ran past timeout_s={self.config.timeout_s}") from None
        try:
            out = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
        except json.JSONDecodeError:
            out = {}
        usage = out.get("usage") or {}
        self.usage.add(
            Usage(
                1,
                int(usage.get("input_tokens") or 0),
                int(usage.get("output_tokens") or 0),
                float(out.get("total_cost_usd") or 0.0),
            )
        )
        if proc.returncode != 0 or out.get("is_error") or "result" not in out:
            tail = (proc.stderr or proc.stdout or "")[-1000:]
            raise WorkerError(f"claude CLI failed (exit {proc.returncode}, {out.get('subtype', 'no result')}): {tail}")
        return str(out["result"]).strip()

    def ask(self, prompt: str) -> str:
        with tempfile.TemporaryDirectory(prefix="rsi-claude-") as tmp:
            return self._run(prompt, Path(tmp), tools="")

    def edit(self, checkout: Path, prompt: str, references: dict[str, str] | None = None) -> str:
        if references:
            folders = ", ".join(f"{p.strip('/')}/ ({role})" for role, p in sorted(references.items()))
            prompt += REFERENCES.format(folders=folders)
        return self._run(prompt, Path(checkout), tools=self.config.allowed_tools)
