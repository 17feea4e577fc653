"""Worker: what proposes changes.

``ask(prompt) -> str`` for every worker; type ``agent`` workers also ``edit`` a checkout
directory themselves. ``references`` maps a role (``ancestor``, ``donor``) to a path relative
to the checkout where a read-only copy of that version lies (recombination); the caller removes
those folders before committing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from rsi.errors import Rejected


@dataclass
class Usage:
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.cost_usd += other.cost_usd


#: Where read-only copies of reference versions (recombination's ancestor and donor) lie in a
#: checkout while a worker edits it; never part of a commit.
REF_DIR = ".rsi_refs"


@dataclass(frozen=True)
class EditResult:
    """One edit: the edited tree ``{path: (bytes, executable)}`` (reference folders removed),
    the worker's reply, its usage so far and its state (for resume)."""

    tree: dict[str, tuple[bytes, bool]]
    reply: str = ""
    usage: dict = field(default_factory=dict)
    state: dict = field(default_factory=dict)
    #: Why the edited checkout could not even be read as a tree (a symlink leaving it): the
    #: algorithm records it as a ``decline`` like any other refused commit.
    rejected: Rejected | None = None


class Worker(ABC):
    #: "llm" (text only) or "agent" (edits a directory itself).
    kind: ClassVar[str] = "llm"
    #: True for workers that are not language models (scripted, mutator); docs and records say so.
    offline: ClassVar[bool] = False

    def __init__(self):
        self.usage = Usage()

    @abstractmethod
    def ask(self, prompt: str) -> str: ...

    def edit(self, checkout: Path, prompt: str, references: dict[str, str] | None = None) -> str:
        raise NotImplementedError(f"{type(self).__name__} is a text-only worker; it cannot edit a directory")

    def get_state(self) -> dict:
        """Whatever a resumed run needs to continue this worker's sequence."""
        return {}

    def set_state(self, state: dict) -> None:
        pass
