"""The trusted side of an online bin-packing rollout: the instance never enters the jail.

``PackingDialogue`` reveals one item at a time to the jailed skeleton (``skeleton.py``), checks
each decision as it arrives (an integer bin index, the bin exists, the item fits) and keeps the
bins itself, so the assignment it reports is one it watched being made, item by item.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rsi.sandbox import Dialogue, DialogueError, Limits, run_program


class PackingDialogue(Dialogue):
    def __init__(self, items: list, capacity: int):
        self.items, self.capacity = list(items), capacity
        self.residual = [capacity] * len(self.items)  # Python ints: per-item checks stay cheap
        self.assignment: list[int] = []

    def opening(self) -> bytes:
        head = json.dumps({"capacity": self.capacity, "n": len(self.items)})
        return f"{head}\n{self._item(0)}".encode() if self.items else f"{head}\n".encode()

    def _item(self, i: int) -> str:
        item = self.items[i]
        return f"{item}\n" if type(item) is int else json.dumps(item) + "\n"  # an int's JSON is its str

    def reply(self, line: bytes) -> bytes | None:
        i = len(self.assignment)
        if i >= len(self.items):
            raise DialogueError("a decision after the last item")
        text = line.strip()
        if not text.isdigit() or len(text) > 12:
            raise DialogueError(f"item {i}: expected a bin index, got {text[:40]!r}")
        b = int(text)
        if b >= len(self.residual) or self.residual[b] < self.items[i]:
            raise DialogueError(f"item {i} ({self.items[i]}) does not fit bin {b}")
        self.residual[b] -= self.items[i]
        self.assignment.append(b)
        return self._item(i + 1).encode() if i + 1 < len(self.items) else None

    def result(self) -> dict:
        if len(self.assignment) != len(self.items):
            raise DialogueError(f"the program ended after {len(self.assignment)} of {len(self.items)} items")
        return {"assignment": self.assignment, "bins_used": len(set(self.assignment))}


class PackingSeries(Dialogue):
    """Several lists packed one after another by one program in one jail, each from fresh bins:
    after a list's last decision the next list's header and first item follow. One jail start
    (an interpreter and numpy, about 0.1 s) per program instead of one per list."""

    def __init__(self, lists: list, capacity: int):
        if not lists or not all(len(items) for items in lists):
            raise ValueError("a packing series needs at least one list, and no empty list")
        self.parts = [PackingDialogue(items, capacity) for items in lists]
        self.current = 0

    def opening(self) -> bytes:
        return self.parts[0].opening()

    def reply(self, line: bytes) -> bytes | None:
        follow = self.parts[self.current].reply(line)
        if follow is not None:
            return follow
        self.current += 1
        return self.parts[self.current].opening() if self.current < len(self.parts) else None

    def result(self) -> dict:
        if self.current < len(self.parts):
            done = len(self.parts[self.current].assignment)
            raise DialogueError(f"the program ended in list {self.current} after {done} items")
        return {"assignments": [part.assignment for part in self.parts]}


def jailed_assignments(checkout: Path, lists: list, capacity: int, limits: Limits) -> list[list[int]] | None:
    """Bin index per item of each list, packed by the ``heuristic.py`` in ``checkout`` the way a
    rollout packs it: the skeleton in the rollout jail, shown one item at a time. None when the
    heuristic fails on any list (raises, times out, answers out of turn). Whoever measures
    candidate code outside a search (stage 1's nodes, studies, reports) packs through this:
    candidate code never runs in the caller's process."""
    from benchmarks.binpack import BinPack, BinPackParams

    bench = BinPack(BinPackParams(name="binpack"))
    out = run_program(
        [sys.executable, str(bench.harness.resolve())],
        Path(checkout),
        None,
        limits,
        harness=bench.harness_mounts(),
        dialogue=PackingSeries(lists, capacity),
    )
    return out.output["assignments"] if out.status == "ok" and out.output is not None else None


def jailed_assignment(
    checkout: Path, items: list, capacity: int, timeout_s: float = 600, backend: str = "auto"
) -> list[int] | None:
    """``jailed_assignments`` of one list."""
    got = jailed_assignments(checkout, [items], capacity, Limits(timeout_s=timeout_s, backend=backend))
    return None if got is None else got[0]
