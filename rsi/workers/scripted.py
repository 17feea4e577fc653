"""Scripted worker: replays a recorded script of edits. It is not a model.

Tests and demos need an ``agent`` worker whose edits are known in advance, so a run can be
checked decision by decision without a model or network. The script is a YAML file::

    edits:
      - files: {heuristic.py: "def priority(item, bins): ...", old.txt: null}
        reply: "tighter fit"
    ask_reply: "scripted learning"

Each ``edit`` applies the next entry (content writes the file, ``null`` deletes it) and returns
its reply; once the script is exhausted an edit changes nothing and returns ``""``.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rsi.errors import ConfigError, WorkerError
from rsi.workers.base import Worker


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    files: dict[str, str | None] = Field(default_factory=dict)
    #: Symbolic links to create, path -> where it points (as an agent might leave them; one
    #: pointing out of the checkout must end as a recorded decline).
    links: dict[str, str] = Field(default_factory=dict)
    reply: str = ""


class _Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    edits: list[_Entry] = Field(default_factory=list)
    ask_reply: str = ""


def load_script(path: Path) -> _Script:
    """The parsed script; every problem is the user's and names the file."""
    if not path.is_file():
        raise ConfigError(f"scripted worker: script file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"scripted worker: {path}: YAML error: {exc}") from None
    try:
        return _Script.model_validate(data if data is not None else {})
    except ValidationError as exc:
        raise ConfigError(
            f"scripted worker: {path}: expected {{edits: [{{files: {{path: content or null}}, reply}}], "
            f"ask_reply}}: {exc}"
        ) from None


def safe_target(checkout: Path, rel: str) -> Path:
    """``checkout/rel``, refusing any path that would land outside the checkout."""
    pure = PurePosixPath(rel)
    if not rel or pure.is_absolute() or ".." in pure.parts or "\\" in rel:
        raise WorkerError(f"scripted worker: path {rel!r} must be relative and stay inside the checkout")
    target = checkout / pure
    root = checkout.resolve()
    if not target.parent.resolve().is_relative_to(root):
        raise WorkerError(f"scripted worker: path {rel!r} resolves outside the checkout")
    return target


class ScriptedWorker(Worker):
    """Replays a recorded edit script (tests, demos); never a language model."""

    kind = "agent"
    offline = True

    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")
        type: Literal["scripted"]
        replicas: int = Field(1, ge=1, description="worker actors; each replays the same script from its start")
        script: str = Field(..., description="YAML script of recorded edits, relative to the config file")

    def __init__(self, config: ScriptedWorker.Config, base_dir: Path, seed: int = 0):
        super().__init__()
        self.config = config
        self.path = (Path(base_dir) / config.script).resolve()
        self.script = load_script(self.path)
        self.position = 0

    def ask(self, prompt: str) -> str:
        return self.script.ask_reply

    def edit(self, checkout: Path, prompt: str, references: dict[str, str] | None = None) -> str:
        if self.position >= len(self.script.edits):
            return ""
        entry = self.script.edits[self.position]
        checkout = Path(checkout)
        # Resolve every path first so a bad entry changes nothing and does not advance.
        targets = {rel: safe_target(checkout, rel) for rel in [*entry.files, *entry.links]}
        for rel, points_to in entry.links.items():
            targets[rel].parent.mkdir(parents=True, exist_ok=True)
            targets[rel].symlink_to(points_to)
        for rel, content in entry.files.items():
            target = targets[rel]
            if content is None:
                target.unlink(missing_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
        self.position += 1
        return entry.reply

    def get_state(self) -> dict:
        return {"position": self.position}

    def set_state(self, state: dict) -> None:
        self.position = int(state.get("position", 0))
