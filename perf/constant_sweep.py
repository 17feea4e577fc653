"""Study: is a stalled member a sharp optimum along each of its constants, or only for random steps?

Rounds 8 and 17 of ``perf/results/search-quality.md`` drew random edits of a stalled best
member (single operators, joint log-normal steps of every constant) and found almost none
better. A random step is a poor probe of a threshold on integer gaps: it lands on a value the
gaps take or not by chance. This study sweeps each numeric literal of the heuristic's marked
function, one at a time, over a fixed grid (every half-integer threshold from 0.5 to 99.5 and
multiples of the value from 1/4 to 4), packs each distinct child on two generated Weibull
instances (``mutator_binpack``'s study seeds, apart from every benchmark split), and confirms
the best children of the sweep on the benchmark's own generated train instances. Every child is
candidate code and packs only in the rollout jail.

    .venv/bin/python perf/constant_sweep.py --source best2/heuristic.py --items 5000 --confirm 20
"""

from __future__ import annotations

import argparse
import ast
import tempfile
import time
from pathlib import Path

import numpy as np
from mutator_binpack import train_instances  # the edit studies' instances

from benchmarks.binpack.instances import generated
from benchmarks.binpack.lockstep import jailed_assignments
from benchmarks.binpack.online import l1_bound
from rsi.sandbox import Limits
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
    """Bins used on each list by ``source``'s heuristic, packed in the rollout jail; None if it fails."""
    with tempfile.TemporaryDirectory(prefix="rsi-sweep-") as tmp:
        (Path(tmp) / "heuristic.py").write_text(source)
        got = jailed_assignments(Path(tmp), lists, CAPACITY, Limits(timeout_s=600))
    return None if got is None else [len(set(a)) for a in got]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="the heuristic to sweep")
    parser.add_argument("--items", type=int, default=5000, help="items per study instance (two instances)")
    parser.add_argument("--confirm", type=int, default=20, help="generated Weibull train instances to confirm on")
    parser.add_argument("--top", type=int, default=5, help="children of the sweep to confirm")
    args = parser.parse_args()
    source = args.source.read_text()
    study = train_instances(2, args.items)
    base = bins(source, study)
    assert base is not None, "the swept heuristic fails on the study instances"
    start = time.monotonic()
    seen: dict[str, int] = {}
    rows: list[tuple[int, int, float, float, str]] = []  # (delta, literal, old, new, child)
    values = [float(n.value) for n in literals(marked_functions(source, ast.parse(source))[0])]  # type: ignore[arg-type]
    for index, old in enumerate(values):
        better = neutral = worse = crash = 0
        best = None
        for value in grid(old):
            module = ast.parse(source)
            nodes = literals(marked_functions(source, module)[0])
            child = ast.unparse(_Swap(nodes, index, int(value) if value.is_integer() else value).visit(module))
            if child in seen:
                continue
            got = bins(child, study)
            if got is None:
                crash += 1
                continue
            delta = sum(got) - sum(base)
            seen[child] = delta
            better += delta < 0
            neutral += delta == 0
            worse += delta > 0
            best = delta if best is None else min(best, delta)
            if delta < 0:
                rows.append((delta, index, old, value, child))
        print(
            f"literal {index} ({old!r}): better {better}, neutral {neutral}, worse {worse}, crash {crash}, "
            f"best {best:+d}"
            if best is not None
            else f"literal {index} ({old!r}): no child measured",
            flush=True,
        )
    print(f"{len(seen)} distinct children in {time.monotonic() - start:.0f} s; base {sum(base)} bins")
    confirm = [t.input["items"] for t in generated("weibull", "train", args.confirm, None)]
    l1 = sum(l1_bound(items, CAPACITY) for items in confirm)
    parent = bins(source, confirm)
    assert parent is not None
    print(f"confirm on {args.confirm} generated train instances: parent {sum(parent)} bins, L1 {l1}")
    for delta, index, old, value, child in sorted(rows, key=lambda r: r[0])[: args.top]:
        got = bins(child, confirm)
        if got is None:
            print(f"  literal {index} {old!r} -> {value!r}: study {delta:+d}, fails on train")
            continue
        diff = np.array(got) - np.array(parent)
        print(
            f"  literal {index} {old!r} -> {value!r}: study {delta:+d} bins; train {int(diff.sum()):+d} bins "
            f"({(diff < 0).sum()} better / {(diff > 0).sum()} worse of {len(diff)}), "
            f"excess {100 * (sum(got) - l1) / l1:.3f} % vs {100 * (sum(parent) - l1) / l1:.3f} %"
        )


if __name__ == "__main__":
    main()
