"""Driver output: a run is never silent for more than a few seconds.

On a terminal: decision lines scroll, and one live status line stays below them (rich): the
step out of ``max_steps``, the phase and candidate, rollouts done/total with ETA, the best train
score so far and its snapshot, how many were admitted, the model spend, the Ray dashboard.
Elsewhere (CI, ``ray job`` logs) the same facts come as plain lines, one per event, and a
rollout line every few seconds while a measurement runs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console

# Logs (CI, `ray job logs`) are read in wide viewers: don't squeeze tables to 80 columns there.
console = Console(stderr=False, highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)


def log(msg: str) -> None:
    console.print(msg, markup=False)


@dataclass
class RunStatus:
    """What the live view shows; the runner, the algorithm base and the evaluator client update it."""

    step: int = 0
    max_steps: int | None = None
    phase: str = "starting"
    best: float | None = None
    best_snapshot: str = ""
    admitted: int = 0
    spend_usd: float = 0.0
    dashboard: str = ""
    rollouts: tuple[int, int] = (0, 0)
    started: float = field(default_factory=time.monotonic)

    def line(self, eta: float | None = None) -> str:
        parts = [f"step {self.step}" + (f"/{self.max_steps}" if self.max_steps else ""), self.phase]
        done, total = self.rollouts
        if total:
            parts.append(f"rollouts {done}/{total}" + (f" eta {eta:.0f}s" if eta is not None else ""))
        if self.best is not None:
            parts.append(f"best {self.best:.4f} ({self.best_snapshot[:8]})")
        parts.append(f"admitted {self.admitted}")
        if self.spend_usd:
            parts.append(f"${self.spend_usd:.4f}")
        if self.dashboard:
            parts.append(self.dashboard)
        parts.append(f"{time.monotonic() - self.started:.0f}s")
        return " · ".join(parts)


status = RunStatus()  # the driver runs one search at a time; tests read it through the log lines


def reset_status(max_steps: int | None) -> None:
    """A new run (or a resumed one) in this process: the live view starts over."""
    vars(status).update(vars(RunStatus(max_steps=max_steps)))  # in place: modules hold ``status``


def phase(text: str) -> None:
    """What the driver is doing now (starting Ray, measuring the seed, screening step 4)."""
    status.phase = text
    log(f"  {text}")


def wait_with_progress(
    is_done: Callable[[float], bool],
    poll: Callable[[], dict],
    label: str,
    interval: float = 0.25,
    quiet_s: float = 1.0,
    line_every_s: float = 5.0,
) -> None:
    """Block until ``is_done(timeout)`` is true, showing progress from ``poll()``."""
    start = time.monotonic()
    if is_done(quiet_s):
        return
    if sys.stdout.isatty():
        from rich.live import Live

        status.phase = label
        with Live(status.line(), console=console, transient=True, refresh_per_second=4) as live:
            while not is_done(interval):
                p = poll()
                status.rollouts = (p["done"], p["total"])
                elapsed = time.monotonic() - start
                eta = elapsed / p["done"] * (p["total"] - p["done"]) if p["done"] else None
                live.update(status.line(eta))
        status.rollouts = (0, 0)
        return
    last = start
    while not is_done(interval):
        now = time.monotonic()
        if now - last >= line_every_s:
            p = poll()
            elapsed = now - start
            eta = f"{elapsed / p['done'] * (p['total'] - p['done']):.0f}s" if p["done"] else "?"
            log(f"  {label}: rollouts {p['done']}/{p['total']}  elapsed {elapsed:.0f}s  eta {eta}")
            last = now
