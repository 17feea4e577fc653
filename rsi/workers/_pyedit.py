"""Finding and rewriting marked Python functions, for the offline mutator.

A function is in the evolve scope when the line directly above its ``def`` (or above its first
decorator) is the comment ``# rsi: evolve``. Only that function's source span is replaced, by
``ast.unparse`` of the edited tree, so the rest of the file stays byte-identical and the marker
stays where it was.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

MARKER = "# rsi: evolve"
FUNCTION_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class ModuleNames:
    """How the module spells numpy and math, so new calls use the names already imported."""

    numpy: str | None = None
    math: str | None = None


def module_names(tree: ast.Module) -> ModuleNames:
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("numpy", "math"):
                    found[alias.name] = alias.asname or alias.name
    return ModuleNames(numpy=found.get("numpy"), math=found.get("math"))


def _first_line(fn: ast.FunctionDef) -> int:
    return min([fn.lineno] + [d.lineno for d in fn.decorator_list])


def marked_functions(source: str, tree: ast.Module) -> list[ast.FunctionDef]:
    """Outermost marked functions in source order (a marked function nested in another is
    edited as part of its parent)."""
    lines = source.splitlines()
    marked = []
    for node in ast.walk(tree):
        if isinstance(node, FUNCTION_TYPES):
            first = _first_line(node)
            if first >= 2 and lines[first - 2].strip() == MARKER:
                marked.append(node)
    marked.sort(key=_first_line)
    outer = []
    for fn in marked:
        if not any(_first_line(o) <= fn.lineno <= o.end_lineno for o in outer):
            outer.append(fn)
    return outer


def splice(source: str, edits: list[tuple[ast.FunctionDef, ast.FunctionDef]]) -> str:
    """``source`` with each original function's span replaced by the unparsed new function."""
    lines = source.splitlines(keepends=True)
    for old, new in sorted(edits, key=lambda e: _first_line(e[0]), reverse=True):
        start, end = _first_line(old) - 1, old.end_lineno - 1
        indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
        last = lines[end].encode()
        suffix = last[old.end_col_offset:].decode()  # trailing comment and newline survive
        body = ast.unparse(ast.fix_missing_locations(new)).split("\n")
        text = "\n".join(indent + line if line else line for line in body)
        lines[start : end + 1] = [text + suffix]
    return "".join(lines)


def same_tree(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def clone(fn: ast.FunctionDef) -> ast.FunctionDef:
    return copy.deepcopy(fn)
