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


def jailed_assignment(
    checkout: Path, items: list, capacity: int, timeout_s: float = 600, backend: str = "auto"
) -> list[int] | None:
    """Bin index per item, packed by the ``heuristic.py`` in ``checkout`` the way a rollout packs
    it: the skeleton in the rollout jail, shown one item at a time by ``PackingDialogue``. None
    when the heuristic fails (raises, times out, answers out of turn). For studies and reports
    that measure candidate code outside a search; candidate code never runs in their process."""
    from benchmarks.binpack import BinPack, BinPackParams

    bench = BinPack(BinPackParams(name="binpack"))
    out = run_program(
        [sys.executable, str(bench.harness.resolve())],
        Path(checkout),
        None,
        Limits(timeout_s=timeout_s, backend=backend),
        harness=bench.harness_mounts(),
        dialogue=PackingDialogue(items, capacity),
    )
    return out.output["assignment"] if out.status == "ok" and out.output is not None else None
