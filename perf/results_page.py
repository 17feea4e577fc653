"""Writing a results page without losing what a person wrote under its figures.

A page in ``perf/results`` is two parts: the figures and the command that made them, which a perf
script regenerates, and a reading of those figures written by hand. Regenerating the figures must
not delete the reading, so the hand-written part starts at ``HAND_WRITTEN`` and is carried over.
"""

from __future__ import annotations

from pathlib import Path

HAND_WRITTEN = "<!-- written by hand below this line; regenerating the figures above keeps it -->"


def write_page(path: str | Path, generated: list[str]) -> None:
    """Write ``generated`` as the page's figures, keeping the page's hand-written part if it has one."""
    path = Path(path)
    body = "\n".join(generated).rstrip("\n") + "\n"
    if HAND_WRITTEN in body:
        raise ValueError("the generated part of a results page may not contain its hand-written marker")
    old = path.read_text() if path.exists() else ""
    _, marker, kept = old.partition(HAND_WRITTEN)
    if marker:
        body += "\n" + HAND_WRITTEN + kept
    path.write_text(body)
