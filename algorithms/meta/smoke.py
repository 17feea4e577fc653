"""Per-slot smoke tests (layer 4 of the policy gate).

A smoke test calls a built policy on small, fixed inputs and checks the contract a caller
relies on: the answer comes from the candidate pool, the single candidate is returned when
there is one, types are right. It does not check that a rule is *good*, only that the engine
can run it. Each slot's seed source, which the gate must admit too, is in ``algorithms.meta.seeds``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from algorithms.meta.proposal_check import InvalidProposal
from algorithms.meta.tree import Tree
from algorithms.slots import Entry, GateFigures, Member, eligible


def _fail(slot: str, message: str) -> None:
    raise InvalidProposal(f"smoke test of {slot}: {message}")


def _is_one_of(obj: Any, pool) -> bool:
    return any(obj is p for p in pool)


def _small_tree() -> Tree:
    tree = Tree(policy=None)
    tree.add_root(0.2)
    for parent_index, value in ((0, 0.5), (0, -math.inf), (1, 0.7), (1, 0.1), (3, 0.7)):
        parent = tree.nodes[parent_index]
        tree.reserve(parent)
        tree.expand(parent, value, prior=0.5 if value > 0.4 else None)
    return tree


def _smoke_node_selection(obj: Any) -> None:
    single = Tree(policy=None)
    single.add_root(0.3)
    if obj.select(single) is not single.nodes[0]:
        _fail("node_selection", "a tree holding only the root must select the root")
    tree = _small_tree()
    for value in (0.4, 0.9, -math.inf):
        node = obj.select(tree)
        if not _is_one_of(node, tree.nodes):
            _fail("node_selection", f"select returned {node!r}, not a node of the tree")
        tree.reserve(node)
        tree.expand(node, value)


MEMBERS = (
    Member("a", 0.5, 0.1),
    Member("b", 0.7, 0.3),
    Member("c", 0.9, 0.5, confirmed=False),
    Member("d", 0.2, 0.9, selectable=False),
    Member("e", 0.7, 0.3),
)


def _smoke_parent_selection(obj: Any) -> None:
    pool = eligible(MEMBERS)
    for seed in range(8):
        got = obj.select(MEMBERS, random.Random(seed))
        if not _is_one_of(got, pool):
            _fail("parent_selection", f"select returned {got!r}, not a confirmed selectable member")
    only = (Member("only"), Member("x", confirmed=False))
    if obj.select(only, random.Random(0)) is not only[0]:
        _fail("parent_selection", "with one eligible member, select must return it")


def _smoke_screen_sampling(obj: Any) -> None:
    ids = [f"t{i}" for i in range(6)]
    for seed, k in ((0, 1), (1, 3), (2, 6)):
        got = obj.sample(ids, k, random.Random(seed))
        if not isinstance(got, list) or len(got) != k or len(set(got)) != k or not set(got) <= set(ids):
            _fail("screen_sampling", f"sample(k={k}) returned {got!r}; want a list of {k} distinct task ids")
    if obj.sample(["t0"], 1, random.Random(0)) != ["t0"]:
        _fail("screen_sampling", "with one task, sample must return it")


def _smoke_acceptance(obj: Any) -> None:
    cases = (
        GateFigures(1.0, 0.0),
        GateFigures(-1.0, 0.0),
        GateFigures(1.0, 0.5),
        GateFigures(1.0, 0.0, 0.0, ("t1",)),
        GateFigures(0.0, 0.0),
    )
    for figures in cases:
        verdict = obj.accept(figures)
        if not isinstance(verdict, bool):
            _fail("acceptance", f"accept returned {verdict!r}; want True or False")


ENTRIES = (
    Entry("a", frozenset({"t1", "t2"}), 0.4),
    Entry("b", frozenset({"t2", "t3"}), 0.5),
    Entry("c", frozenset({"t1"}), 0.2),
    Entry("d", frozenset({"t4"}), 0.1),
)


def _smoke_merge_pairing(obj: Any) -> None:
    got = list(obj.pairs(ENTRIES))
    seen = set()
    for pair in got:
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(_is_one_of(e, ENTRIES) for e in pair)):
            _fail("merge_pairing", f"pairs yielded {pair!r}; want (primary, donor) entries of the archive")
        key = frozenset(e.entry_id for e in pair)
        if len(key) != 2 or key in seen:
            _fail("merge_pairing", f"pair {sorted(key)} pairs an entry with itself or appears twice")
        seen.add(key)
    if list(obj.pairs(ENTRIES[:1])):
        _fail("merge_pairing", "a single entry has no pair")


def _smoke_promotion(obj: Any) -> None:
    got = obj.choose(MEMBERS)
    if not _is_one_of(got, MEMBERS) or not got.confirmed:
        _fail("promotion", f"choose returned {got!r}, not a confirmed member")
    only = (Member("x", confirmed=False), Member("only"))
    if obj.choose(only) is not only[1]:
        _fail("promotion", "with one confirmed member, choose must return it")


SMOKES: dict[str, Callable[[Any], None]] = {
    "node_selection": _smoke_node_selection,
    "parent_selection": _smoke_parent_selection,
    "screen_sampling": _smoke_screen_sampling,
    "acceptance": _smoke_acceptance,
    "merge_pairing": _smoke_merge_pairing,
    "promotion": _smoke_promotion,
}


def smoke(slot: str, obj: Any) -> None:
    try:
        SMOKES[slot](obj)
    except InvalidProposal:
        raise
    except Exception as exc:  # candidate code: its failure is the verdict
        raise InvalidProposal(f"smoke test of {slot}: {type(exc).__name__}: {exc}") from None
