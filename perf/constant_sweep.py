"""Study: is a stalled member a sharp optimum along each of its constants (or for one more band)?

Rounds 8 and 17 of ``perf/results/search-quality.md`` drew random edits of a stalled best
member (single operators, joint log-normal steps of every constant) and found almost none
better. A random step is a poor probe of a threshold on integer gaps: it lands on a value the
gaps take or not by chance. This study sweeps each numeric literal of the heuristic's marked
function, one at a time, over a fixed grid (every half-integer threshold from 0.5 to 99.5 and
multiples of the value from 1/4 to 4), packs each distinct child on two generated Weibull
instances (``mutator_binpack``'s study seeds, apart from every benchmark split), and confirms
the best children of the sweep on the benchmark's own generated train instances. ``--bands``
sweeps structure instead: the member's returned expression wrapped in one more band on the gap
``bins - item`` (a side, a threshold, a rule inside the band, a preference for it). Every child
is candidate code and packs only in the rollout jail.

    cd perf && ../.venv/bin/python constant_sweep.py --source best2/heuristic.py --items 5000 --confirm 20 [--bands]
"""

from __future__ import annotations

import argparse
import ast
import time
from collections import Counter
from pathlib import Path

import numpy as np
from mutator_binpack import train_instances  # the edit studies' instances
from mutator_edit_shares import packings

from benchmarks.binpack.instances import generated
from benchmarks.binpack.online import l1_bound
from rsi.workers._pyedit import Function, marked_functions

CAPACITY = 100


class _Swap(ast.NodeTransformer):
    """Replaces the ``index``-th numeric literal (in ``ast.walk`` order of the function) by ``value``."""

    def __init__(self, nodes: list[ast.Constant], index: int, value: float):
        self.target, self.value = nodes[index], value

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.copy_location(ast.Constant(self.value), node) if node is self.target else node


def literals(fn: Function) -> list[ast.Constant]:
    body = fn.body[1:] if ast.get_docstring(fn) else fn.body
    return [
        n
        for stmt in body
        for n in ast.walk(stmt)
        if isinstance(n, ast.Constant) and isinstance(n.value, int | float) and not isinstance(n.value, bool)
    ]


def grid(value: float) -> list[float]:
    halves = [k + 0.5 for k in range(100)]
    scaled = [round(float(value * f), 4) for f in np.geomspace(0.25, 4.0, 17)] if value else []
    return sorted({*halves, *scaled} - {value})


def bins(source: str, lists: list[list[int]]) -> list[int] | None:
    """Bins used on each list by ``source``'s heuristic (packed in the rollout jail); None if it fails."""
    got = packings(source, lists)
    return None if got is None else [np.unique(a).size for a in got]


def constant_children(source: str) -> list[tuple[str, str, str]]:
    """(group, change, child) for every literal of the marked function set to every value of its grid."""
    out = []
    values = [float(n.value) for n in literals(marked_functions(source, ast.parse(source))[0])]  # type: ignore[arg-type]
    for index, old in enumerate(values):
        for value in grid(old):
            module = ast.parse(source)
            nodes = literals(marked_functions(source, module)[0])
            swap = _Swap(nodes, index, int(value) if value.is_integer() else value)
            out.append((f"literal {index} ({old!r})", f"{old!r} -> {value!r}", ast.unparse(swap.visit(module))))
    return out


BAND_TERMS = ("-({gap})", "{gap}", "0.0")  # best fit, worst fit, first fit inside the band
BAND_OFFSETS = (-100.0, 0.0, 100.0)  # the band's bins avoided, mixed with the rest, preferred


def band_children(source: str) -> list[tuple[str, str, str]]:
    """(group, change, child) for the member's returned expression wrapped in one more band on the
    gap ``bins - item``: ``np.where(gap CMP T, TERM + K, member)``, T every other half-integer from 0.5 to 58.5."""
    fn = marked_functions(source, ast.parse(source))[0]
    item, bins_ = (a.arg for a in fn.args.args[:2])
    gap = f"({bins_} - {item})"
    out = []
    for cmp in ("<", ">"):
        for term in BAND_TERMS:
            for offset in BAND_OFFSETS:
                for threshold in (k + 0.5 for k in range(0, 60, 2)):
                    module = ast.parse(source)
                    target = marked_functions(source, module)[0]
                    ret = next(n for n in reversed(target.body) if isinstance(n, ast.Return))
                    band = f"np.where({gap} {cmp} {threshold}, {term.format(gap=gap)} + {offset}, 0)"
                    wrap = ast.parse(band, mode="eval").body
                    assert isinstance(wrap, ast.Call) and ret.value is not None
                    wrap.args[2] = ret.value
                    ret.value = wrap
                    group = f"band {cmp} T, {term.format(gap='gap')} {offset:+g}"
                    out.append((group, f"T {threshold}", ast.unparse(ast.fix_missing_locations(module))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="the heuristic to sweep")
    parser.add_argument("--items", type=int, default=5000, help="items per study instance (two instances)")
    parser.add_argument("--confirm", type=int, default=20, help="generated Weibull train instances to confirm on")
    parser.add_argument("--top", type=int, default=5, help="children of the sweep to confirm")
    parser.add_argument("--bands", action="store_true", help="sweep one more band around the member instead")
    args = parser.parse_args()
    if not args.source.is_file():
        parser.error(f"--source {args.source}: no such file")
    source = args.source.read_text()
    try:
        if not marked_functions(source, ast.parse(source)):
            parser.error(f"--source {args.source}: no function marked '# rsi: evolve'")
    except SyntaxError as exc:
        parser.error(f"--source {args.source}: not Python ({exc.msg}, line {exc.lineno})")
    study = train_instances(2, args.items)
    base = bins(source, study)
    if base is None:
        parser.error(f"--source {args.source}: the heuristic fails on the study instances")
    start = time.monotonic()
    seen: set[str] = set()
    rows: list[tuple[int, str, str]] = []  # (delta, change, child) of the better children
    groups: dict[str, Counter] = {}
    for group, change, child in band_children(source) if args.bands else constant_children(source):
        tally = groups.setdefault(group, Counter())
        if child in seen:
            continue
        seen.add(child)
        got = bins(child, study)
        if got is None:
            tally["crash"] += 1
            continue
        delta = sum(got) - sum(base)
        tally["better" if delta < 0 else "same bins" if delta == 0 else "worse"] += 1
        tally["best"] = min(tally.get("best", delta), delta)
        if delta < 0:
            rows.append((delta, f"{group}: {change}", child))
    for group, tally in groups.items():
        counts = ", ".join(f"{k} {tally[k]}" for k in ("better", "same bins", "worse", "crash"))
        print(f"{group}: {counts}, best {tally['best']:+d}" if "best" in tally else f"{group}: none measured")
    print(f"{len(seen)} distinct children in {time.monotonic() - start:.0f} s; base {sum(base)} bins", flush=True)
    confirm = [t.input["items"] for t in generated("weibull", "train", args.confirm, None)]
    l1 = sum(l1_bound(items, CAPACITY) for items in confirm)
    parent = bins(source, confirm)
    if parent is None:
        parser.error(f"--source {args.source}: the heuristic fails on the train instances")
    print(f"confirm on {args.confirm} generated train instances: parent {sum(parent)} bins, L1 {l1}")
    for delta, label, child in sorted(rows, key=lambda r: r[0])[: args.top]:
        got = bins(child, confirm)
        if got is None:
            print(f"  {label}: study {delta:+d}, fails on train")
            continue
        diff = np.array(got) - np.array(parent)
        print(
            f"  {label}: study {delta:+d} bins; train {int(diff.sum()):+d} bins "
            f"({(diff < 0).sum()} better / {(diff > 0).sum()} worse of {len(diff)}), "
            f"excess {100 * (sum(got) - l1) / l1:.3f} % vs {100 * (sum(parent) - l1) / l1:.3f} %"
        )


if __name__ == "__main__":
    main()
