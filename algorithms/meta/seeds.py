"""Each slot's seed source: the slot's default rule written out as a ``class Policy``.

The text is generated from the default rule itself (``algorithms.slots.SLOTS[slot].default``),
never typed twice: the rule class's source, renamed ``Policy``, after the module-level functions
it calls (transitively, in the order its module defines them) and the imports its names need.
A seed is the starting point of an evolution and a proof that the proposal check admits the
engine's own rules, so a default rule may only use what a proposal may: whitelisted imports,
the value types, no dunder names.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import inspect
import types

from algorithms.meta.proposal_check import IMPORTS, VALUE_TYPES
from algorithms.slots import slot as slot_spec


def seed_source(slot: str) -> str:
    """The starting value of ``policy_source(slot)``: the default rule as source text."""
    return _rule_source(slot_spec(slot).default)  # unknown and machine-level names raise here


def _top_level_name(node: ast.stmt) -> str | None:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return node.name
    return None


def _segment(lines: list[str], node: ast.stmt, decorators: bool = True) -> str:
    """A definition's lines, with or without its decorators."""
    listed = getattr(node, "decorator_list", []) if decorators else []
    start = min([node.lineno] + [d.lineno for d in listed])
    return "".join(lines[start - 1 : node.end_lineno]).rstrip() + "\n"


def _names(node: ast.stmt) -> set[str]:
    """Every name a definition reads; a class's decorators are left out (``_plain_class``)."""
    parts: list[ast.AST] = [node]
    if isinstance(node, ast.ClassDef):
        parts = [*node.bases, *node.keywords, *node.body]
    return {n.id for part in parts for n in ast.walk(part) if isinstance(n, ast.Name)}


def _plain_class(node: ast.ClassDef, default: str) -> None:
    """The rule class may only be a dataclass: its fields' defaults are plain class attributes
    in the seed (a built policy takes no arguments), so the decorator is left out."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if not (isinstance(target, ast.Name) and target.id == "dataclass"):
            raise ValueError(f"the default rule {default} has a decorator a seed cannot carry")


def _imported_names(module: ast.Module) -> dict[str, tuple[str, str | None]]:
    """Name bound by a top-level import -> ``(module, None)`` for ``import module``,
    ``(module, name)`` for ``from module import name``."""
    bound: dict[str, tuple[str, str | None]] = {}
    for node in module.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is None and "." not in alias.name:
                    bound[alias.name] = (alias.name, None)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.asname is None:
                    bound[alias.name] = (node.module, alias.name)
    return bound


def _by_type(name: str) -> tuple:
    """isort's order of imported names: constants, then classes, then the rest."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


def _import_lines(imports: set[tuple[str, str | None]], default: str) -> str:
    """The import block: standard library, then the engine's value types, isort's order."""
    for origin, _ in imports:
        if origin not in IMPORTS and origin not in VALUE_TYPES:
            raise ValueError(f"the default rule {default} needs {origin}, which no proposal may import")
    groups = []
    for project in (False, True):
        chosen = {(o, n) for o, n in imports if (o in VALUE_TYPES) == project}
        plain = [f"import {o}" for o in sorted({o for o, n in chosen if n is None})]
        froms = sorted({o for o, n in chosen if n is not None})
        names = {o: ", ".join(sorted((n for m, n in chosen if m == o and n is not None), key=_by_type)) for o in froms}
        lines = plain + [f"from {o} import {names[o]}" for o in froms]
        if lines:
            groups.append("\n".join(lines))
    return "\n\n".join(groups) + "\n" if groups else ""


@functools.cache
def _rule_source(default: str) -> str:
    module_name, _, attr = default.partition(":")
    module: types.ModuleType = importlib.import_module(module_name)
    source = inspect.getsource(module)
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    definitions = {name: node for node in tree.body if (name := _top_level_name(node))}
    imported = _imported_names(tree)
    value_types = VALUE_TYPES.get(module_name, frozenset())

    wanted: set[str] = set()
    imports: set[tuple[str, str | None]] = set()
    rule = definitions[attr]
    if not isinstance(rule, ast.ClassDef):
        raise ValueError(f"the default rule {default} is not a class")
    _plain_class(rule, default)
    pending: list[ast.stmt] = [rule]
    while pending:
        node = pending.pop()
        for name in sorted(_names(node)):
            if name in value_types:
                imports.add((module_name, name))
            elif isinstance(definitions.get(name), ast.FunctionDef):
                if name not in wanted:
                    wanted.add(name)
                    pending.append(definitions[name])
            elif name in imported:
                imports.add(imported[name])
            elif name in definitions or (name in vars(module) and not hasattr(builtins, name)):
                raise ValueError(f"the default rule {default} reads {name}, which a seed cannot carry")
    parts = [head] if (head := _import_lines(imports, default)) else []
    for node in tree.body:
        name = _top_level_name(node)
        if name in wanted:
            parts.append(_segment(lines, node))
        elif name == attr:
            parts.append(_segment(lines, node, decorators=False).replace(f"class {attr}", "class Policy", 1))
    return "\n\n".join(parts)
