"""Prompt helpers: evidence budgets keep the tail and mark the cut; tags; strict rendering."""

from __future__ import annotations

import pytest

from rsi.components import Components
from rsi.prompting import component_table, evidence, render, tagged


def test_evidence_under_budget_is_unchanged():
    assert evidence("short", 100) == "short"
    assert evidence(["a", "b"], 100) == "a\n\nb"


def test_evidence_keeps_the_tail_and_marks_the_cut():
    text = "old " * 500 + "NEWEST LINE"
    out = evidence(text, 200)
    assert len(out) <= 200
    assert out.endswith("NEWEST LINE")
    cut = len(text) - len(out.split("\n", 1)[1])
    assert out.startswith(f"[... {cut} earlier characters cut ...]\n")


def test_evidence_drops_whole_blocks_from_the_front():
    blocks = [f"block {i}: " + "x" * 40 for i in range(10)]
    out = evidence(blocks, 160)
    assert len(out) <= 160
    assert out.endswith(blocks[-1]) and blocks[-2] in out
    assert "block 0" not in out
    body = out.split("\n", 1)[1]
    assert body in "\n\n".join(blocks)  # whole blocks, not a block cut in half
    assert body.startswith("block ")


def test_evidence_rejects_a_budget_too_small_for_the_marker():
    with pytest.raises(ValueError):
        evidence("x" * 100, 10)


def test_component_table_lists_every_rule():
    comps = Components.parse([{"name": "runtime", "glob": "runtime/**"}, {"name": "config", "glob": "agent.yaml"}])
    table = component_table(comps)
    assert "| runtime | `runtime/**` |" in table and "| config | `agent.yaml` |" in table


def test_tagged_reads_the_last_block_or_the_whole_reply():
    reply = "format: <DESIGN>...</DESIGN>\n<design>\n  use a cache\n</design> done"
    assert tagged(reply, "DESIGN") == "use a cache"
    assert tagged("  untagged reply \n", "DESIGN") == "untagged reply"
    assert tagged("<CODE>x = 1</CODE>", "DESIGN") == "<CODE>x = 1</CODE>"


def test_render_is_strict():
    assert render("Hello {name}, {{literal}}", name="Ada") == "Hello Ada, {literal}"
    with pytest.raises(KeyError, match="missing_one"):
        render("{present} {missing_one}", present=1)
    with pytest.raises(TypeError, match="unused"):
        render("{a}", a=1, unused=2)
    with pytest.raises(ValueError):
        render("{a.attr}", a=1)


def test_evidence_keep_first_keeps_whole_leading_blocks_and_marks_the_rest():
    from rsi.prompting import evidence

    blocks = [f"block-{i}:" + "x" * 40 for i in range(10)]  # 48 characters each
    out = evidence(blocks, 200, keep="first", sep="\n")
    assert len(out) <= 200
    kept = out.split("\n")[:-1]
    assert kept == blocks[: len(kept)] and len(kept) == 3
    cut = len("\n".join(blocks)) - len("\n".join(kept))
    assert out.endswith(f"[... {cut} more characters cut ...]")
    assert evidence(blocks[:2], 200, keep="first", sep="\n") == "\n".join(blocks[:2])
    with pytest.raises(ValueError, match="keep"):
        evidence(blocks, 200, keep="oldest")


def test_split_budget_keeps_small_sections_whole():
    from rsi.prompting import split_budget

    assert split_budget({"a": 10, "b": 500, "c": 700}, 610) == {"a": 10, "b": 300, "c": 300}
    assert split_budget({"a": 10, "b": 20}, 100) == {"a": 10, "b": 20}
