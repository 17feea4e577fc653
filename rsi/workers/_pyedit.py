"""Finding and rewriting marked Python functions, for the offline mutator.

A function is in the evolve scope when the line directly above its ``def`` (or above its first
decorator) is the comment ``# rsi: evolve``. Only that function's source span is replaced, by
``ast.unparse`` of the edited tree, so the rest of the file stays byte-identical and the marker
stays where it was.
"""

from __future__ import annotations

import ast
import io
from dataclasses import dataclass

MARKER = "# rsi: evolve"
FUNCTION_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)
Function = ast.FunctionDef | ast.AsyncFunctionDef


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


def source_lines(source: str) -> list[str]:
    """Lines with their endings, split exactly where the parser counts lines."""
    return io.StringIO(source, newline="").readlines()


def _first_line(fn: Function) -> int:
    return min([fn.lineno] + [d.lineno for d in fn.decorator_list])


def _last_line(fn: Function) -> int:
    # ast.parse sets end_lineno on every node; only a node built by hand lacks it
    return fn.end_lineno if fn.end_lineno is not None else fn.lineno


def marked_functions(source: str, tree: ast.Module) -> list[Function]:
    """Outermost marked functions in source order (a marked function nested in another is
    edited as part of its parent)."""
    lines = source_lines(source)
    marked: list[Function] = []
    for node in ast.walk(tree):
        if isinstance(node, FUNCTION_TYPES):
            first = _first_line(node)
            if first >= 2 and lines[first - 2].strip() == MARKER:
                marked.append(node)
    marked.sort(key=_first_line)
    outer: list[Function] = []
    for fn in marked:
        if not any(_first_line(o) <= fn.lineno <= _last_line(o) for o in outer):
            outer.append(fn)
    return outer


def splice(source: str, edits: list[tuple[Function, str]]) -> str:
    """``source`` with each original function's span replaced by its new text (unindented, as
    ``ast.unparse`` writes it)."""
    lines = source_lines(source)
    for old, new in sorted(edits, key=lambda e: _first_line(e[0]), reverse=True):
        start, end = _first_line(old) - 1, _last_line(old) - 1
        indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
        suffix = lines[end].encode()[old.end_col_offset :].decode()  # trailing comment and newline survive
        text = "\n".join(indent + line if line else line for line in new.split("\n"))
        lines[start : end + 1] = [text + suffix]
    return "".join(lines)


def clone(node):
    """A deep copy of a syntax tree; several times faster than ``copy.deepcopy`` on AST nodes,
    which matters because every edit copies the functions it changes and the terms it reuses."""
    if isinstance(node, list):
        return [clone(item) for item in node]
    if not isinstance(node, ast.AST):
        return node
    new = node.__class__(**{name: clone(value) for name, value in ast.iter_fields(node)})
    for name in node._attributes:
        if hasattr(node, name):
            setattr(new, name, getattr(node, name))
    return new
