"""A fixed-latency OpenAI-compatible model for the peer comparison (not a language model).

Every chat completion is answered after ``latency_s`` with one of ``VARIANTS`` (bodies of the
bin-packing ``priority`` function; or the ``variants`` it is given), in a fixed rotation kept
separately per system so both see the same sequence. The reply takes the form the caller parses:

- a request with ``tools`` (rsi's ``agent`` worker): a ``write_file`` call with the whole new
  ``heuristic.py`` and a ``finish`` call, in one reply;
- rsi's distil prompt (a text-only question after each measurement): one sentence;
- anything else (OpenEvolve, ``diff_based_evolution: false``): the whole program in a
  ```python block, EVOLVE-BLOCK markers kept.

Each body carries a ``# draw N`` comment, so no two replies are the same program (neither
system gets to skip a duplicate). Every request is logged with its start and end time.
"""

from __future__ import annotations

import itertools
import threading
import time

from rsi.testing.scripted_server import ScriptedServer

VARIANTS = [
    "return -(bins - item)",
    "return -((bins - item) ** 2)",
    "return bins - item",
    "return -np.arange(len(bins), dtype=float)",
    "remaining = bins - item\n    return -remaining + 10.0 * (remaining < 5)",
    "remaining = bins - item\n    return np.where(remaining == 0, 1e9, -remaining - 0.1 * np.log1p(remaining))",
    "return item / bins",
    "return -np.abs(bins - item - 2.0)",
    "remaining = bins - item\n    return -(remaining**1.5)",
    "return -(bins - item) / (bins + 1e-9)",
    "remaining = bins - item\n    return -remaining + 3.0 * (remaining > 30)",
    "score = 1000.0 - bins * (bins - item)\n    return score",
]

DOC = '''"""Returns priority with which we want to add item to each bin.

    Args:
      item: Size of item to be added to the bin.
      bins: Array of residual capacities of the bins the item fits in, in bin order.

    Return:
      Array of same size as bins with priority score of each bin; the highest wins,
      ties go to the first.
    """'''


def function(body: str, draw: int) -> str:
    return f"def priority(item: float, bins: np.ndarray) -> np.ndarray:\n    {DOC}\n    # draw {draw}\n    {body}\n"


def rsi_heuristic(body: str, draw: int) -> str:
    return '"""Online bin-packing heuristic."""\n\nimport numpy as np\n\n\n# rsi: evolve\n' + function(body, draw)


def openevolve_program(body: str, draw: int) -> str:
    return (
        '"""Online bin-packing heuristic."""\n\nimport numpy as np\n\n\n# EVOLVE-BLOCK-START\n'
        + function(body, draw)
        + "# EVOLVE-BLOCK-END\n"
    )


class FixedLatencyModel:
    """The server and its request log; ``system`` names the log's owner (``rsi``/``openevolve``)."""

    def __init__(self, latency_s: float, port: int = 0, variants: list[str] | None = None):
        self.latency_s = latency_s
        self.variants = list(variants or VARIANTS)
        self.log: list[dict] = []
        self._lock = threading.Lock()
        self._draws = {"rsi": itertools.count(), "openevolve": itertools.count()}
        self.server = ScriptedServer([self._reply], loop=True, port=port)

    def start(self) -> FixedLatencyModel:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def _reply(self, body: dict) -> dict:
        t0 = time.time()
        text = "\n".join(str(m.get("content") or "") for m in body.get("messages", []))
        if body.get("tools"):
            system, kind = "rsi", "edit"
        elif "Distil one reusable learning" in text:
            system, kind = "rsi", "distil"
        else:
            system, kind = "openevolve", "edit"
        with self._lock:
            draw = next(self._draws[system]) if kind == "edit" else -1
            self.log.append({"system": system, "kind": kind, "start": t0, "end": t0 + self.latency_s})
        step: dict = {"delay_s": self.latency_s}
        if kind == "distil":
            step["text"] = "Tried a different priority rule; keep the tightest-fit core and vary one term next."
        elif system == "rsi":
            body_src = self.variants[draw % len(self.variants)]
            step["text"] = f"Changed the priority rule (variant {draw % len(self.variants)})."
            step["tool_calls"] = [
                {"name": "write_file", "arguments": {"path": "heuristic.py", "content": rsi_heuristic(body_src, draw)}},
                {"name": "finish", "arguments": {"summary": f"priority variant {draw % len(self.variants)}"}},
            ]
        else:
            body_src = self.variants[draw % len(self.variants)]
            step["text"] = (
                f"A different priority rule (variant {draw % len(self.variants)}).\n\n```python\n"
                + openevolve_program(body_src, draw)
                + "```\n"
            )
        return step
