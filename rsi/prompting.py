"""Prompt helpers every algorithm shares: evidence budgets, the component table, reply tags,
and strict template rendering (a placeholder that fails silently is a prompt that drifts)."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

from rsi.components import Components

MIN_EVIDENCE_CHARS = 80


def cut_marker(n: int, later: bool = False) -> str:
    return f"[... {n} {'more' if later else 'earlier'} characters cut ...]"


def evidence(text_or_blocks: str | Iterable[str], max_chars: int, keep: str = "newest", sep: str = "\n\n") -> str:
    """The one way evidence is fitted into a prompt: whole blocks within ``max_chars``, the cut
    marked, the result never longer than ``max_chars``.

    ``keep="newest"`` keeps the tail, dropping blocks from the front: the latest rollouts,
    errors and verdicts are what a worker acts on. ``keep="first"`` keeps blocks from the front
    (evidence already ordered by importance, e.g. failures first, or newest first) and marks
    what was cut at the end. Either way, when not even one block fits, that block's tail is kept.
    """
    if max_chars < MIN_EVIDENCE_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_EVIDENCE_CHARS} (room for the cut marker)")
    if keep not in ("newest", "first"):
        raise ValueError(f"keep must be 'newest' or 'first', not {keep!r}")
    blocks = [text_or_blocks] if isinstance(text_or_blocks, str) else [str(b) for b in text_or_blocks]
    text = sep.join(blocks)
    if len(text) <= max_chars:
        return text
    # The marker reporting the whole length is the widest one we can need.
    room = max_chars - len(cut_marker(len(text))) - 1
    kept: list[str] = []
    size = 0
    for block in blocks if keep == "first" else reversed(blocks):
        size += len(block) + (len(sep) if kept else 0)
        if size > room:
            break
        kept.append(block)
    if not kept:
        tail = text[len(text) - room :]
        return cut_marker(len(text) - len(tail)) + "\n" + tail
    if keep == "first":
        head = sep.join(kept)
        return head + "\n" + cut_marker(len(text) - len(head), later=True)
    tail = sep.join(reversed(kept))
    return cut_marker(len(text) - len(tail)) + "\n" + tail


def split_budget(sizes: dict[str, int], budget: int) -> dict[str, int]:
    """One prompt's evidence budget split among its sections: those smaller than an equal share
    stay whole, and what they leave is shared equally by the rest."""
    out, left = {}, budget
    todo = sorted(sizes, key=lambda name: sizes[name])
    while todo:
        share = left // len(todo)
        if sizes[todo[0]] <= share:
            name = todo.pop(0)
            out[name] = sizes[name]
            left -= sizes[name]
        else:
            out.update({name: share for name in todo})
            break
    return out


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
    for _, field, _spec, _ in string.Formatter().parse(template):
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
