"""A cheap probe of whether an edit changes what a marked function computes.

The offline mutator calls a parent and a child version of a function on a few synthetic inputs
and compares the results. An edit that gives the same results (``equal``), or results in the
same order (``order``: every pair of elements, and every pair of probe calls, compares the same
way, so a ranking or an argmax of them is unchanged), is neutral: the mutator draws again
instead of spending a measurement on it. The same comparison counts the probe calls whose
outcome an edit changes (``compare``): the mutator's ``local_share`` bounds it, so that part of
the edits are small steps in what the function decides, not only in its text.

Only pure expression functions are probed: assignments to plain names and ``return`` over the
arguments, numeric literals, arithmetic, comparisons, ``where``-style selections and elementwise
numpy/math calls. Anything else (loops, other calls, attribute reads, strings, containers, big
integer powers) is not run at all and counts as "changed". What passes that check still runs only
in the rollout jail (``probe_harness.py``): the check keeps the probe meaningful, the jail keeps it
contained. ``compare_many`` probes several edits in one jailed process (each its parent and child
on the same inputs), since starting the jail costs far more than the arithmetic: the mutator
probes a batch of drawn edits at once (``mutator.PROBE_BATCH``).
"""

from __future__ import annotations

import ast
import sys
import tempfile
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np

from rsi.errors import RsiError
from rsi.sandbox import Limits, run_program
from rsi.workers._pyedit import Function, ModuleNames, clone

ProbeMode = Literal["off", "equal", "order"]

NUMPY_CALLS = frozenset(
    {
        "abs", "absolute", "arctan", "cbrt", "ceil", "clip", "cos", "exp", "expm1", "fabs", "floor", "log",
        "log1p", "log2", "log10", "maximum", "minimum", "negative", "power", "reciprocal", "sign", "sin",
        "sqrt", "square", "tanh", "where",
    }
)  # fmt: skip
MATH_CALLS = frozenset(
    {"atan", "ceil", "cos", "exp", "expm1", "fabs", "floor", "log", "log1p", "log2", "log10", "sin", "sqrt", "tanh"}
)
BUILTIN_CALLS = frozenset({"abs", "min", "max"})
OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitAnd, ast.BitOr)
EXPRESSIONS = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp, ast.Call)
CONTEXT = (ast.Load, ast.Store, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
CASES = 8  # probe calls
LENGTH = 16  # elements of a probe array
HARNESS = Path(__file__).resolve().parent / "probe_harness.py"
NON_FINITE = ("nan", "inf", "-inf")  # how the harness writes the results JSON cannot hold
MOUNTS = {str(HARNESS): HARNESS.name}
# Pure arithmetic on a few short arrays: seconds and a few hundred MB are far more than enough
PROBE_LIMITS = Limits(timeout_s=10, memory_mb=1024, max_procs=8, stdout_max_bytes=1 << 20)


def is_pure(fn: Function, names: ModuleNames) -> bool:
    """Whether ``fn`` is a pure expression function the probe may run (see the module doc)."""
    args = fn.args
    if args.vararg or args.kwarg or args.posonlyargs or args.kwonlyargs or not args.args:
        return False
    allowed = {a.arg for a in args.args} | {n for n in (names.numpy, names.math) if n}
    body = fn.body[1:] if _docstring(fn) else fn.body
    if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
        return False
    for stmt in body:
        if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            value = stmt.value
        elif isinstance(stmt, ast.Return) and stmt.value is not None:
            value = stmt.value
        else:
            return False
        if not _pure_expr(value, allowed, names):
            return False
        if isinstance(stmt, ast.Assign):
            allowed |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return True


def _docstring(fn: Function) -> bool:
    first = fn.body[0]
    return isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)


def _pure_expr(node: ast.expr, allowed: set[str], names: ModuleNames) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            if sub.keywords or not _allowed_call(sub.func, names):
                return False
        elif isinstance(sub, ast.Attribute):
            continue  # only as a call's function, checked with the call
        elif isinstance(sub, ast.Name):
            if sub.id not in allowed and sub.id not in BUILTIN_CALLS:
                return False
        elif isinstance(sub, ast.Constant):
            if isinstance(sub.value, bool) or not isinstance(sub.value, (int, float)):
                return False
        elif isinstance(sub, ast.BinOp):
            if not isinstance(sub.op, OPERATORS):
                return False
            if isinstance(sub.op, ast.Pow) and isinstance(sub.right, ast.Constant) and isinstance(sub.right.value, int):
                if abs(sub.right.value) > 64:
                    return False  # an integer power of an integer literal could be astronomically long
        elif not isinstance(sub, EXPRESSIONS + CONTEXT):
            return False
    # Attributes are allowed only as the function of a checked call.
    calls = {id(c.func) for c in ast.walk(node) if isinstance(c, ast.Call)}
    return all(id(a) in calls for a in ast.walk(node) if isinstance(a, ast.Attribute))


def _allowed_call(func: ast.expr, names: ModuleNames) -> bool:
    if isinstance(func, ast.Name):
        return func.id in BUILTIN_CALLS
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if names.numpy and func.value.id == names.numpy:
            return func.attr in NUMPY_CALLS
        if names.math and func.value.id == names.math:
            return func.attr in MATH_CALLS
    return False


def load_cases(data: object) -> list[dict]:
    """Example argument sets from parsed JSON: a list of objects mapping each argument name to a
    number or a list of numbers (an array). Anything else is left out."""
    cases = []
    for entry in data if isinstance(data, list) else []:
        if not isinstance(entry, dict) or not entry:
            continue
        case: dict[str, float | np.ndarray] = {}
        for name, value in entry.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                case[str(name)] = value
            elif isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
                case[str(name)] = np.asarray(value)
            else:
                break
        else:
            cases.append(case)
    return cases[:64]


def probe_inputs(fn: Function, scalars: set[str], scale: float, seed: int = 0) -> list[dict]:
    """``CASES`` argument sets: scalars one number, other arguments arrays of ``LENGTH``, values
    spread over [0, 3 * scale] (a fixed draw: the same inputs for parent and child)."""
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(CASES):
        case: dict[str, float | np.ndarray] = {}
        for a in fn.args.args:
            if a.arg in scalars:
                case[a.arg] = float(rng.uniform(0, 3 * scale))
            else:
                case[a.arg] = rng.uniform(0, 3 * scale, size=LENGTH)
        cases.append(case)
    return cases


def _spec(fns: list[Function], names: ModuleNames, cases: list[dict]) -> dict:
    return {
        "functions": [
            ast.unparse(ast.fix_missing_locations(ast.Module(body=[_bare(fn)], type_ignores=[]))) for fn in fns
        ],
        "name": fns[0].name,
        "numpy": names.numpy,
        "math": names.math,
        "builtins": sorted(BUILTIN_CALLS),
        "cases": [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in c.items()} for c in cases],
    }


def _run(jobs: list[tuple[list[Function], ModuleNames, list[dict]]]) -> list[list[list[np.ndarray] | None]] | None:
    """For each job (functions, module names, cases), each function's results on the cases,
    computed in one jailed process (``probe_harness.py``): the functions are candidate code, so
    they never run in this process, whatever the AST check above allowed. A function that failed
    gets None; the whole answer is None when the jail could not run or answered out of form."""
    spec = {"jobs": [_spec(fns, names, cases) for fns, names, cases in jobs]}
    try:
        with tempfile.TemporaryDirectory(prefix="rsi-probe-") as tmp:
            out = run_program([sys.executable, "-I", str(HARNESS)], Path(tmp), spec, PROBE_LIMITS, harness=MOUNTS)
    except RsiError:  # no jail on this machine (ConfigError included): the probe decides nothing
        return None
    got = out.output.get("results") if out.status == "ok" and out.output else None
    if not isinstance(got, list) or len(got) != len(jobs):
        return None
    answer = []
    for (fns, _, cases), results in zip(jobs, got):
        if not isinstance(results, list) or len(results) != len(fns):
            return None
        answer.append([_arrays(r, len(cases)) for r in results])
    return answer


def _arrays(result: object, n: int) -> list[np.ndarray] | None:
    """A function's results as arrays, if they are what the harness promises: ``n`` numbers or
    flat lists of numbers (the candidate may have printed anything)."""
    if not isinstance(result, list) or len(result) != n:
        return None
    out = []
    for r in result:
        if isinstance(r, list) and all(_number(v) for v in r):
            out.append(np.asarray([float(v) for v in r], dtype=float))
        elif _number(r):
            out.append(np.asarray(float(r)))
        else:
            return None
    return out


def _number(v: object) -> bool:
    """A finite JSON number, or NaN or an infinity as the harness spells them."""
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) or v in NON_FINITE


def _bare(fn: Function) -> Function:
    """The function without decorators or annotations: nothing outside its body is evaluated."""
    bare = clone(fn)
    bare.decorator_list, bare.returns = [], None
    bare.args = ast.arguments(
        posonlyargs=[], args=[ast.arg(a.arg) for a in fn.args.args], kwonlyargs=[], kw_defaults=[], defaults=[]
    )
    return bare


class Comparison(NamedTuple):
    """What the probe saw of an edit: whether it is ``neutral`` and on how many probe calls its
    outcome ``changed`` (the element a call's result ranks first, with ``order``; the result
    itself, with ``equal``), of ``calls``. ``changed`` is None when the probe could not run."""

    neutral: bool
    changed: int | None = None
    calls: int = 0


class Probe(NamedTuple):
    """One edit to probe: ``compare``'s arguments."""

    parent: Function
    child: Function
    names: ModuleNames
    scalars: set[str]
    scale: float
    mode: ProbeMode
    cases: list[dict] | None = None


def compare(
    parent: Function,
    child: Function,
    names: ModuleNames,
    scalars: set[str],
    scale: float,
    mode: ProbeMode,
    cases: list[dict] | None = None,
) -> Comparison:
    """What the probe sees of ``child`` against ``parent`` (``mode``): whether it is neutral, and
    on how many probe calls its outcome changes, which measures how far an edit moves the
    function's decisions on its inputs rather than in its text. Not neutral, with no count, when
    either is not a pure expression function or fails on the probe. ``cases``: argument sets to
    call with (example inputs of the function); default the synthetic ``probe_inputs``."""
    return compare_many([Probe(parent, child, names, scalars, scale, mode, cases)])[0]


def compare_many(probes: list[Probe]) -> list[Comparison]:
    """``compare`` for each probe, with every probe that can run computed in one jailed process.
    The same as one ``compare`` each: where that process fails as a whole (say, one function
    exhausts its limits), each probe runs again alone, so one edit's failure is its own."""
    jobs: dict[int, tuple[list[Function], ModuleNames, list[dict]]] = {}
    for k, p in enumerate(probes):
        if p.mode == "off" or not (is_pure(p.parent, p.names) and is_pure(p.child, p.names)):
            continue
        cases = p.cases
        if cases is not None:
            wanted = {a.arg for a in p.parent.args.args}
            cases = [c for c in cases if set(c) == wanted]
        if not cases:
            cases = probe_inputs(p.parent, p.scalars, p.scale)
        jobs[k] = ([p.parent, p.child], p.names, cases)
    results = _run(list(jobs.values())) if jobs else []
    if results is None:
        results = [r[0] if (r := _run([job])) is not None else [None, None] for job in jobs.values()]
    found = dict(zip(jobs, results))
    return [
        _judge(found[k][0], found[k][1], probes[k].mode, len(jobs[k][2])) if k in found else Comparison(False)
        for k in range(len(probes))
    ]


def _judge(a: list[np.ndarray] | None, b: list[np.ndarray] | None, mode: ProbeMode, n: int) -> Comparison:
    if a is None or b is None:
        return Comparison(False)
    if any(x.shape != y.shape for x, y in zip(a, b)):
        return Comparison(False, n, n)
    changed = sum(not _same_outcome(x, y, mode) for x, y in zip(a, b))
    if all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b)):
        return Comparison(True, 0, n)
    if mode != "order":
        return Comparison(False, changed, n)
    if all(x.ndim == 0 for x in a):  # one number per call: compare the calls with each other
        a, b = [np.array([float(x) for x in a])], [np.array([float(y) for y in b])]
    same = all(np.array_equal(_pairwise(x), _pairwise(y), equal_nan=True) for x, y in zip(a, b))
    return Comparison(same, changed, n)


def _same_outcome(x: np.ndarray, y: np.ndarray, mode: ProbeMode) -> bool:
    """Whether one probe call ends the same way for parent and child: the same first-ranked
    element of an array result (``order``: what a priority decides, ties to the first), else the
    same result."""
    if mode == "order" and x.ndim > 0 and x.size:
        with np.errstate(all="ignore"):
            return int(np.argmax(x)) == int(np.argmax(y))
    return bool(np.array_equal(x, y, equal_nan=True))


def _pairwise(values: np.ndarray) -> np.ndarray:
    """Sign of every pairwise difference: the order of the elements, ties included."""
    flat = values.reshape(-1)
    with np.errstate(all="ignore"):
        return np.sign(flat[:, None] - flat[None, :])
