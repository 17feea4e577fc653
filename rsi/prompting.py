"""Prompt helpers every algorithm shares: evidence budgets, the component table, reply tags,
and strict template rendering (a placeholder that fails silently is a prompt that drifts)."""

from __future__ import annotations

import re
import string
from typing import Iterable

from rsi.components import Components


MIN_EVIDENCE_CHARS = 80


def cut_marker(n: int) -> str:
    return f"[... {n} earlier characters cut ...]"


def evidence(text_or_blocks: str | Iterable[str], max_chars: int) -> str:
    """Keep the tail within ``max_chars`` and say how much was cut.

    The tail wins because the latest rollouts, errors and verdicts are what a worker acts on.
    Blocks are joined with blank lines and dropped whole from the front; when not even the
    newest block fits, it is cut inside. The result never exceeds ``max_chars``.
    """
    if max_chars < MIN_EVIDENCE_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_EVIDENCE_CHARS} (room for the cut marker)")
    blocks = [text_or_blocks] if isinstance(text_or_blocks, str) else [str(b) for b in text_or_blocks]
    text = "\n\n".join(blocks)
    if len(text) <= max_chars:
        return text
    # The marker reporting the whole length is the widest one we can need.
    room = max_chars - len(cut_marker(len(text))) - 1
    kept: list[str] = []
    size = 0
    for block in reversed(blocks):
        size += len(block) + (2 if kept else 0)
        if size > room:
            break
        kept.append(block)
    tail = "\n\n".join(reversed(kept)) if kept else text[len(text) - room:]
    return cut_marker(len(text) - len(tail)) + "\n" + tail


def component_table(components: Components) -> str:
    """The rule table workers see, so a new file can be placed under exactly one rule."""
    return components.table()


def tagged(reply: str, tag: str) -> str:
    """The content of the last ``<TAG>...</TAG>`` block; an untagged reply is the whole text.

    The last block wins because models often quote the format before answering in it.
    """
    blocks = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", reply, flags=re.S | re.I)
    return (blocks[-1] if blocks else reply).strip()


def render(template: str, **variables) -> str:
    """``str.format``-style ``{name}`` substitution that refuses to guess.

    A placeholder without a value raises KeyError; a value no placeholder uses raises
    TypeError (a renamed placeholder would otherwise drop evidence without a sound). Write
    literal braces as ``{{`` and ``}}``.
    """
    names = set()
    for _, field, spec, _ in string.Formatter().parse(template):
        if field is None:
            continue
        if not field.isidentifier():
            raise ValueError(f"template placeholder {{{field}}} must be a plain name")
        names.add(field)
    missing = sorted(names - set(variables))
    if missing:
        raise KeyError(f"template needs values for {', '.join(missing)}")
    unused = sorted(set(variables) - names)
    if unused:
        raise TypeError(f"template has no placeholder for {', '.join(unused)}")
    return template.format(**variables)
