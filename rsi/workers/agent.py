"""AgentWorker: a built-in coding agent that edits a checkout through file tools.

The model gets list_files, read_file, write_file, delete_file, search and finish, all
confined to the checkout (rsi/llm/file_tools.py); reference folders are readable only. The
loop is bounded by ``max_turns``. Malformed tool-call arguments are reported back to the model
as the tool result (so it can resend the call) and counted; ``max_bad_tool_calls`` of them in
a row end the edit with WorkerError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rsi.errors import WorkerError
from rsi.llm import LLMConfig
from rsi.llm.file_tools import TOOL_SPECS, Workspace
from rsi.prompting import render
from rsi.workers.llm import ModelWorker

SYSTEM = """You are a careful coding agent. You change the files of a project checkout with tools; \
nothing else you write reaches the project.

- Paths are relative to the checkout root. Start with list_files, read before you write.
- write_file replaces the whole file: send the complete new content.
- Stay inside the checkout. {references}
- When the change is complete, call finish with a short summary of what you changed and why."""

NO_REFERENCES = "There are no reference folders."
REFERENCES = "Read-only reference copies (read them, never edit them): {folders}."
BAD_ARGUMENTS = (
    "error: {error}. Nothing was done. Resend the {name} call with its arguments as one JSON object "
    "matching the tool's schema."
)


class AgentWorker(ModelWorker):
    kind = "agent"

    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")
        type: Literal["agent"] = Field("agent", description="the built-in file-tool coding agent")
        replicas: int = Field(1, ge=1, description="worker actors running in parallel")
        llm: LLMConfig = Field(description="the model that drives the agent (needs tool calling)")
        max_turns: int = Field(30, ge=1, le=500, description="model calls per edit at most")
        max_bad_tool_calls: int = Field(3, ge=1, description="malformed tool calls in a row that end the edit")

    def __init__(self, config: AgentWorker.Config, base_dir: Path, seed: int):
        super().__init__(config, base_dir, seed)
        self.malformed_calls = 0
        self.transcript: list[dict] = []

    def edit(self, checkout: Path, prompt: str, references: dict[str, str] | None = None) -> str:
        references = references or {}
        workspace = Workspace(Path(checkout), read_only=references.values())
        folders = ", ".join(f"{path.strip('/')}/ ({role})" for role, path in sorted(references.items()))
        note = render(REFERENCES, folders=folders) if references else NO_REFERENCES
        messages = [{"role": "system", "content": render(SYSTEM, references=note)}, {"role": "user", "content": prompt}]
        self.transcript = messages
        bad_in_a_row, last_text = 0, ""
        for _ in range(self.config.max_turns):
            result = self.client.chat(messages, tools=TOOL_SPECS)
            messages.append(result.message())
            last_text = result.text.strip() or last_text
            if not result.tool_calls:
                return last_text
            summary = None
            for call in result.tool_calls:
                if call.error:
                    self.malformed_calls += 1
                    bad_in_a_row += 1
                    if bad_in_a_row >= self.config.max_bad_tool_calls:
                        raise WorkerError(
                            f"agent: {bad_in_a_row} malformed tool calls in a row (last: {call.name}: {call.error})"
                        )
                    content = render(BAD_ARGUMENTS, error=call.error, name=call.name)
                elif call.name == "finish":
                    bad_in_a_row = 0
                    summary = str(call.arguments.get("summary") or "").strip()
                    content = "finished"
                else:
                    bad_in_a_row = 0
                    content = workspace.run(call.name, call.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            if summary is not None:
                return summary or last_text
        return f"(stopped after max_turns={self.config.max_turns} without finish) {last_text}".strip()
