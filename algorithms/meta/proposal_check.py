"""The proposal check: the gates a proposed decision rule passes before it becomes a candidate.

This gate confines a rewrite to *making decisions*; it is not a sandbox. A module attribute
(``random._os``, ``dataclasses.sys``) reaches the whole interpreter past any AST walk, so
candidate source is never executed in the driver, an actor or a Ray worker process: the AST layers
(``prefilter``) run there as a fast pre-filter that executes nothing, and every layer that runs
candidate code (the build, the grid, the smoke test, the inner searches) runs in the rollout
jail (``algorithms.meta.jailed`` and its jailed script ``jail_harness.py``). What the gate does
guarantee is that an accepted rule is structurally what its slot expects and survived its
slot's smoke test, so a rejected proposal is rejected at proposal time, never half-way through
an inner search. ``build_priority``/``build_policy`` execute the source in the calling process:
for trusted text (the engine's own seed rules, tests) and for the jailed script itself.

Two faces:

- the narrow face, ``priority(rank, visits, total, prior, depth, n_nodes) -> float``: an AST
  whitelist (arithmetic, comparison, conditional expressions, local names, ``math``; no loops,
  no comprehensions), then evaluation on a fixed grid that includes the root
  (``visits = 0, total = 0``) where every value must be finite. ``rank / visits`` fails here;
- a full ``class Policy`` for any slot: (1) an AST walk (imports from a whitelist, no dunder
  names or attributes, no interpreter-reaching calls, no global/nonlocal), (2) a build in a
  restricted namespace with no-argument construction, (3) ``isinstance`` against the slot's
  Protocol, (4) the slot's smoke test (``algorithms.meta.smoke``).
"""

from __future__ import annotations

import ast
import builtins
import itertools
import math
import re
import sys
import types
from collections.abc import Callable
from typing import Any

from algorithms.meta.tree import PrioritySelection
from algorithms.slots import slot as slot_spec


class InvalidProposal(ValueError):
    """A proposal that yields no candidate; the caller counts it (``invalid_proposals``)."""


MAX_SOURCE_CHARS = 20_000

# ---- the narrow face -------------------------------------------------------------------------
FACE_ARGS = ("rank", "visits", "total", "prior", "depth", "n_nodes")
FACE_BUILTINS = {"min": min, "max": max, "abs": abs}
_ANNOTATIONS = {"float": float, "int": int}
MATH_NAMES = frozenset(n for n in dir(math) if not n.startswith("_"))
_FACE_OPS = (
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.FloorDiv,
    ast.Mod,
    ast.Pow,
    ast.BitAnd,
    ast.BitOr,
    ast.UAdd,
    ast.USub,
    ast.Not,
    ast.And,
    ast.Or,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.Eq,
    ast.NotEq,
)
_FACE_EXPRS = (
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    ast.Name,
    ast.Constant,
    ast.Attribute,
    ast.Load,
    ast.Store,
)
_FACE_STMTS = (ast.Assign, ast.AugAssign, ast.Return, ast.If, ast.Pass, ast.Expr)
#: rank, visits, total, prior, depth, n_nodes: the root (0.5, 0, 0, 1, 0, 1) is on it.
GRID = (
    (0.0, 0.5, 1.0),
    (0.0, 1.0, 2.0, 7.0, 50.0),
    (0.0, 1.0, 10.0, 1000.0),
    (0.0, 1e-3, 0.1, 1.0),
    (0.0, 1.0, 5.0, 30.0),
    (1.0, 2.0, 50.0, 1000.0),
)

PRIORITY_SEED = '''import math


def priority(rank, visits, total, prior, depth, n_nodes):
    """Flat PUCT as ERA ships it: c = 1 and the uniform prior 1 / n_nodes."""
    return rank + 1.0 * (1.0 / n_nodes) * math.sqrt(total) / (1 + visits)
'''


def _parse(source: Any) -> ast.Module:
    if not isinstance(source, str):
        raise InvalidProposal(f"a source proposal must be text, got {type(source).__name__}")
    if len(source) > MAX_SOURCE_CHARS:
        raise InvalidProposal(f"source is {len(source)} characters; at most {MAX_SOURCE_CHARS}")
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise InvalidProposal(f"syntax error at line {exc.lineno}: {exc.msg}") from None


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _face_function(module: ast.Module) -> ast.FunctionDef:
    functions = []
    for stmt in module.body:
        if isinstance(stmt, ast.Import) and [(a.name, a.asname) for a in stmt.names] == [("math", None)]:
            continue
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "priority":
            functions.append(stmt)
        elif not _is_docstring(stmt):
            raise InvalidProposal(
                f"line {stmt.lineno}: only `import math` and `def priority(...)` may appear at top level"
            )
    if len(functions) != 1:
        raise InvalidProposal("define exactly one function `priority`")
    fn = functions[0]
    args = fn.args
    if (
        tuple(a.arg for a in args.args) != FACE_ARGS
        or args.posonlyargs
        or args.kwonlyargs
        or args.vararg
        or args.kwarg
        or args.defaults
        or fn.decorator_list
    ):
        raise InvalidProposal(f"the signature must be exactly priority({', '.join(FACE_ARGS)})")
    for note in [a.annotation for a in args.args] + [fn.returns]:
        if note is not None and not (isinstance(note, ast.Name) and note.id in _ANNOTATIONS):
            raise InvalidProposal("annotations on priority may only be float or int")
    return fn


def _check_face_node(node: ast.AST, known: set) -> None:
    where = f"line {getattr(node, 'lineno', '?')}"
    if isinstance(node, (ast.operator, ast.unaryop, ast.boolop, ast.cmpop)):
        if not isinstance(node, _FACE_OPS):
            raise InvalidProposal(f"{where}: operator {type(node).__name__} is not allowed")
    elif isinstance(node, ast.Name):
        if isinstance(node.ctx, ast.Load) and node.id not in known | {"math"} | set(FACE_BUILTINS):
            raise InvalidProposal(f"{where}: name {node.id!r} is not an argument, a local, math or min/max/abs")
    elif isinstance(node, ast.Attribute):
        is_math = isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in MATH_NAMES
        if not (is_math and isinstance(node.ctx, ast.Load)):
            raise InvalidProposal(f"{where}: only math.<function> attributes are allowed")
    elif isinstance(node, ast.Call):
        func = node.func
        allowed = isinstance(func, ast.Attribute) or (isinstance(func, ast.Name) and func.id in FACE_BUILTINS)
        if node.keywords or not allowed:
            raise InvalidProposal(f"{where}: only math functions and min/max/abs may be called, without keywords")
    elif isinstance(node, ast.Constant):
        if type(node.value) not in (int, float, bool):
            raise InvalidProposal(f"{where}: only numeric constants are allowed")
    elif not isinstance(node, _FACE_EXPRS + _FACE_STMTS):
        raise InvalidProposal(
            f"{where}: {type(node).__name__} is not allowed on the narrow face (no loops, comprehensions, lambdas)"
        )


def _check_face_ast(module: ast.Module) -> ast.FunctionDef:
    fn = _face_function(module)
    known = set(FACE_ARGS)
    for stmt in fn.body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                known.add(node.id)
    for stmt in fn.body:
        if _is_docstring(stmt):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Expr):
                raise InvalidProposal(f"line {node.lineno}: a bare expression statement does nothing")
            _check_face_node(node, known)
    return fn


class _FloatConstants(ast.NodeTransformer):
    """Integer literals become floats, so no rule computes with unbounded integers
    (``9 ** 9 ** 9`` overflows at once instead of running for hours)."""

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        if type(node.value) is int:
            return ast.copy_location(ast.Constant(float(node.value)), node)
        return node


def _restricted_import(allowed: frozenset) -> Callable:
    def importer(name, globals=None, locals=None, fromlist=(), level=0):
        if level or name not in allowed:
            raise ImportError(f"import of {name!r} is not allowed here")
        return builtins.__import__(name, globals, locals, fromlist, level)

    return importer


def _face_function_object(module: ast.Module) -> Callable:
    tree = ast.fix_missing_locations(_FloatConstants().visit(module))
    namespace: dict[str, Any] = {
        "__builtins__": FACE_BUILTINS | _ANNOTATIONS | {"__import__": _restricted_import(frozenset({"math"}))},
        "math": math,
    }
    exec(compile(tree, "<priority>", "exec"), namespace)
    return namespace["priority"]


def _check_grid(priority: Callable) -> None:
    for point in itertools.product(*GRID):
        try:
            value = priority(*point)
        except Exception as exc:  # any failure of candidate code on the grid is the verdict
            raise InvalidProposal(f"priority{point} raised {type(exc).__name__}: {exc}") from None
        if type(value) not in (int, float, bool) or not math.isfinite(value):
            raise InvalidProposal(f"priority{point} returned {value!r}; every value must be a finite number")


def check_priority_ast(source: Any) -> ast.Module:
    """The narrow face's AST layers alone: parse and whitelist. Executes nothing."""
    module = _parse(source)
    _check_face_ast(module)
    return module


def check_priority_source(source: Any) -> Callable:
    """The narrow-face gate: AST whitelist, then finite values over the whole grid.

    Returns the compiled function; nothing is executed before the AST check passed.
    """
    priority = _face_function_object(check_priority_ast(source))
    _check_grid(priority)
    return priority


def build_priority(source: Any) -> PrioritySelection:
    return PrioritySelection(check_priority_source(source), source=source)


# ---- the general face: class Policy ----------------------------------------------------------
IMPORTS = frozenset(
    {
        "math",
        "random",
        "statistics",
        "itertools",
        "collections",
        "functools",
        "dataclasses",
        "typing",
        "enum",
        "heapq",
        "bisect",
        "collections.abc",
    }
)
#: The engine's value types a policy may import, by module.
VALUE_TYPES = {
    "algorithms.slots": frozenset({"Member", "Entry", "GateFigures", "TOLERANCE"}),
    "algorithms.meta.tree": frozenset({"Node", "Tree"}),
}
BANNED_NAMES = frozenset(
    {
        "exec",
        "eval",
        "open",
        "getattr",
        "setattr",
        "delattr",
        "type",
        "super",
        "compile",
        "__import__",
        "globals",
        "locals",
        "vars",
        "input",
        "breakpoint",
        "help",
        "memoryview",
    }
)
ALLOWED_DUNDER_DEFS = frozenset({"__init__", "__post_init__"})
_DUNDER = re.compile(r"__\w+__")
_TOP_LEVEL = (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef, ast.Assign, ast.AnnAssign)
SAFE_BUILTINS = {
    name: getattr(builtins, name)
    for name in (
        "abs",
        "all",
        "any",
        "bool",
        "dict",
        "divmod",
        "enumerate",
        "filter",
        "float",
        "frozenset",
        "hash",
        "int",
        "isinstance",
        "iter",
        "len",
        "list",
        "map",
        "max",
        "min",
        "next",
        "pow",
        "property",
        "range",
        "reversed",
        "round",
        "set",
        "slice",
        "sorted",
        "staticmethod",
        "str",
        "sum",
        "tuple",
        "zip",
        "ArithmeticError",
        "Exception",
        "IndexError",
        "KeyError",
        "StopIteration",
        "TypeError",
        "ValueError",
        "ZeroDivisionError",
        "True",
        "False",
        "None",
        "NotImplemented",
    )
}


def _check_import(node: ast.Import | ast.ImportFrom) -> None:
    where = f"line {node.lineno}"
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name not in IMPORTS:
                raise InvalidProposal(
                    f"{where}: import of {alias.name!r} is outside the whitelist ({', '.join(sorted(IMPORTS))})"
                )
        return
    if node.level:
        raise InvalidProposal(f"{where}: relative imports are not allowed")
    allowed = VALUE_TYPES.get(node.module or "")  # module is None only in a relative import, refused above
    if node.module in IMPORTS:
        return
    if allowed is None:
        raise InvalidProposal(f"{where}: import from {node.module!r} is outside the whitelist")
    extra = [a.name for a in node.names if a.name not in allowed]
    if extra:
        raise InvalidProposal(f"{where}: from {node.module} only {', '.join(sorted(allowed))} may be imported")


def _check_policy_node(node: ast.AST, modules: set) -> None:
    where = f"line {getattr(node, 'lineno', '?')}"
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        _check_import(node)
    elif (
        isinstance(node, ast.Attribute)
        and not isinstance(node.ctx, ast.Load)
        and isinstance(node.value, ast.Name)
        and node.value.id in modules
    ):
        raise InvalidProposal(f"{where}: assigning into module {node.value.id!r} is not allowed")
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        raise InvalidProposal(f"{where}: global/nonlocal are not allowed")
    elif isinstance(node, ast.Name) and (node.id in BANNED_NAMES or _DUNDER.fullmatch(node.id)):
        raise InvalidProposal(f"{where}: name {node.id!r} is not allowed")
    elif isinstance(node, ast.Attribute) and _DUNDER.fullmatch(node.attr):
        raise InvalidProposal(f"{where}: dunder attribute {node.attr!r} is not allowed")
    elif (
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and _DUNDER.fullmatch(node.name)
        and node.name not in ALLOWED_DUNDER_DEFS
    ):
        raise InvalidProposal(f"{where}: defining {node.name!r} is not allowed")
    elif isinstance(node, ast.keyword) and node.arg and _DUNDER.fullmatch(node.arg):
        raise InvalidProposal(f"{where}: dunder keyword {node.arg!r} is not allowed")
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _DUNDER.search(node.value):
        raise InvalidProposal(f"{where}: strings naming dunder attributes are not allowed")


def check_policy_ast(source: Any) -> ast.Module:
    """Layer 1: an AST walk over the whole module; ``class Policy`` must be defined at top level."""
    module = _parse(source)
    for stmt in module.body:
        if not (isinstance(stmt, _TOP_LEVEL) or _is_docstring(stmt)):
            raise InvalidProposal(f"line {stmt.lineno}: only imports, definitions and assignments at top level")
    if not any(isinstance(s, ast.ClassDef) and s.name == "Policy" for s in module.body):
        raise InvalidProposal("the source must define a top-level class named Policy")
    # Names bound to modules: writing into one would change it for the whole process.
    modules = {
        a.asname or a.name.partition(".")[0] for n in ast.walk(module) if isinstance(n, ast.Import) for a in n.names
    }
    for node in ast.walk(module):
        _check_policy_node(node, modules)
    return module


def build_policy(source: Any, slot: str) -> Any:
    """All four layers: AST walk, restricted build with no-argument construction, Protocol
    check, smoke test. Nothing is executed before the AST walk passed."""
    return build_checked_policy(check_policy_ast(source), slot)


def build_checked_policy(module: Any, slot: str) -> Any:
    """Layers 2-4 on a module that passed ``check_policy_ast`` (or its compiled code object):
    this executes candidate code."""
    from algorithms.meta.smoke import smoke

    allowed = IMPORTS | frozenset(VALUE_TYPES)
    # A real module under its name in sys.modules, as an imported one would be: class
    # machinery such as @dataclass looks the defining module up there.
    built = types.ModuleType("rsi_policy")
    built.__dict__["__builtins__"] = SAFE_BUILTINS | {
        "__build_class__": builtins.__build_class__,
        "__import__": _restricted_import(allowed),
    }
    sys.modules["rsi_policy"] = built
    namespace = built.__dict__
    try:
        exec(module if isinstance(module, types.CodeType) else compile(module, "<policy>", "exec"), namespace)
    except Exception as exc:  # candidate code: the failure is the verdict
        raise InvalidProposal(f"building the source failed: {type(exc).__name__}: {exc}") from None
    cls = namespace.get("Policy")
    if not isinstance(cls, builtins.type):
        raise InvalidProposal("`Policy` must be a class")
    try:
        obj = cls()
    except Exception as exc:
        raise InvalidProposal(f"Policy() must construct with no arguments: {type(exc).__name__}: {exc}") from None
    protocol = slot_spec(slot).protocol
    if not isinstance(obj, protocol):
        raise InvalidProposal(f"Policy does not implement {protocol.__name__}")
    smoke(slot, obj)
    return obj


# ---- the driver's side: what may run outside the jail ---------------------------------------
#: The two faces as the jail is told them: ``priority`` (the narrow face of node selection) or
#: ``policy:<slot>`` (a class Policy for that slot).
PRIORITY_FACE = "priority"


def policy_face(slot: str) -> str:
    slot_spec(slot)  # unknown and machine-level names raise here
    return f"policy:{slot}"


def prefilter(face: str, source: Any) -> None:
    """The AST layers of ``face`` (no candidate code runs): the fast pre-filter a proposal
    passes in the driver before the jail builds and smoke-tests it. Same reasons as the gate."""
    if face == PRIORITY_FACE:
        check_priority_ast(source)
    elif face.startswith("policy:"):
        check_policy_ast(source)
    else:
        raise ValueError(f"unknown face {face!r}")
