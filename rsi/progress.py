"""Driver output: a run is never silent for more than a few seconds.

On a terminal: a rich progress bar (rollouts done/total, ETA) for any wait longer than a
second. Elsewhere (CI, ``ray job`` logs): one plain line every few seconds.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

from rich.console import Console

# Logs (CI, `ray job logs`) are read in wide viewers: don't squeeze tables to 80 columns there.
console = Console(stderr=False, highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)


def log(msg: str) -> None:
    console.print(msg, markup=False)


def wait_with_progress(is_done: Callable[[float], bool], poll: Callable[[], dict], label: str,
                       interval: float = 0.25, quiet_s: float = 1.0, line_every_s: float = 5.0) -> None:
    """Block until ``is_done(timeout)`` is true, showing progress from ``poll()``."""
    start = time.monotonic()
    if is_done(quiet_s):
        return
    if sys.stdout.isatty():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                      console=console, transient=True) as bar:
            task = bar.add_task(label, total=None)
            while not is_done(interval):
                p = poll()
                bar.update(task, completed=p["done"], total=p["total"] or None)
        return
    last = start
    while not is_done(interval):
        now = time.monotonic()
        if now - last >= line_every_s:
            p = poll()
            elapsed = now - start
            eta = (elapsed / p["done"] * (p["total"] - p["done"])) if p["done"] else float("nan")
            log(f"  {label}: rollouts {p['done']}/{p['total']}  elapsed {elapsed:.0f}s  eta {eta:.0f}s")
            last = now
