"""Variation operators on one function's AST: the offline mutator's moves. Not a model.

Each operator picks a random site in the function body, changes it in place and returns True,
or returns False when the body has no site it applies to. New constants are drawn around
``scale`` (the typical magnitude of quantities in the evolved code), so inserted thresholds,
penalties and decay lengths land in a range where they change decisions. With recorded example
inputs (``cases``), a share of new thresholds is instead drawn between two neighbouring values
the compared quantity takes on them, where a decision on real inputs flips; those values are
read from the data, never by running the function.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

import numpy as np

from rsi.workers._pyedit import Function, ModuleNames, clone

ARITH = (ast.Add, ast.Sub, ast.Mult, ast.Div)
ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
EQUALITY = (ast.Eq, ast.NotEq)
# Elementwise functions by module; those whose domain needs a guard get ``abs`` inside.
UNARY = {
    "numpy": ("exp", "log1p", "sqrt", "abs", "square", "tanh", "arctan", "cbrt"),
    "math": ("exp", "log1p", "sqrt", "fabs", "tanh", "atan"),
}
# Builtins whose arguments are counts and indices, not quantities to perturb.
INDEX_CALLS = {"range", "len", "slice", "enumerate", "zip", "int", "round"}
NEEDS_ABS = {"log1p", "sqrt", "log"}
ABS = {"numpy": "abs", "math": "fabs"}
# insert_term's shapes: relative frequency of each form, where its value goes (the whole return
# or assignment value, else any subexpression), what it is built on, and how often a condition
# is a band that spares exact zeros (exact fits, exact matches).
FORMS = {"add": 1.0, "scale": 0.5, "step": 1.0, "where": 1.5}
ROOT_SHARE = 0.6
ATOM_SHARE = {"existing": 0.4, "difference": 0.4}  # the rest: a single name
BAND_SHARE = 0.3
# Annotations that mark an argument as one number (the same for every element of an array
# result) rather than a collection of values.
SCALAR_TYPES = {"float", "int", "bool", "complex"}
# Appended operators keep the draws of configurations that leave them at weight 0 unchanged.
OPERATORS = (
    "perturb_constant",
    "swap_operator",
    "swap_compare",
    "swap_function",
    "insert_term",
    "drop_term",
    "jitter_constants",
    "rebuild_band",
    "step_threshold",
)
# jitter_constants: the spread of its log-normal factors, drawn log-uniformly per edit.
JITTER_SPREAD = (0.02, 0.2)
# rebuild_band: where its two thresholds are drawn, in units of ``scale`` (log-uniform): a small
# cut for the band that goes first, a wider range for the target of the other.
REBUILD_CUT = (0.05, 2.0)
REBUILD_TARGET = (0.5, 10.0)
# step_threshold: a threshold moves by a whole number (1 to STEP_MAX) of STEP_UNIT x ``scale``.
STEP_UNIT = 0.1
STEP_MAX = 3


@dataclass
class Site:
    """An expression node and how to replace it in its parent."""

    node: ast.expr
    parent: ast.AST
    field: str
    index: int | None
    stmt: int  # index of the top-level body statement holding it
    free: bool  # False inside subscripts and keyword arguments, where indices and flags live
    root: bool = False  # the whole value of a return or assignment

    def replace(self, new: ast.expr) -> None:
        if self.index is None:
            setattr(self.parent, self.field, new)
        else:
            getattr(self.parent, self.field)[self.index] = new


def _body_start(fn: Function) -> int:
    first = fn.body[0]
    is_doc = isinstance(first, ast.Expr) and isinstance(getattr(first.value, "value", None), str)
    return 1 if is_doc and len(fn.body) > 1 else 0


def _arguments(fn: Function) -> list[ast.arg]:
    """The function's named arguments, in order (``*args`` and ``**kwargs`` excluded)."""
    return fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs


def scalar_args(fn: Function) -> set[str]:
    """Arguments annotated as plain numbers (``float``, ``int``...). When the function also has
    other arguments (arrays), a term built only from these is constant across the elements of its
    result: it shifts or rescales every element alike, which changes no comparison between them."""
    args = _arguments(fn)
    scalars = {
        a.arg
        for a in args
        if isinstance(a.annotation, ast.Name)
        and a.annotation.id in SCALAR_TYPES
        or isinstance(a.annotation, ast.Constant)
        and a.annotation.value in SCALAR_TYPES
    }
    return scalars if len(scalars) < len(args) else set()


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def sites(fn: Function) -> list[Site]:
    out: list[Site] = []
    for k in range(_body_start(fn), len(fn.body)):
        _collect(fn.body[k], k, True, out)
    return out


def _collect(node: ast.AST, k: int, free: bool, out: list[Site]) -> None:
    for name, value in ast.iter_fields(node):
        if isinstance(node, ast.Call) and name == "func" or isinstance(node, ast.Attribute):
            continue
        child_free = free and not (
            isinstance(node, ast.Subscript) and name == "slice" or isinstance(node, ast.keyword) or _is_index_call(node)
        )
        items = value if isinstance(value, list) else [value]
        for i, child in enumerate(items):
            if not isinstance(child, ast.AST) or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.JoinedStr)
            ):
                continue
            if isinstance(child, ast.expr) and not isinstance(getattr(child, "ctx", None), (ast.Store, ast.Del)):
                root = isinstance(node, (ast.Return, ast.Assign, ast.AugAssign)) and name == "value"
                index = i if isinstance(value, list) else None
                out.append(Site(child, node, name, index, k, child_free, root))
            _collect(child, k, child_free, out)


def _is_index_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in INDEX_CALLS


def _number(node: ast.AST) -> float | None:
    """The value of a numeric literal, ``-3`` included; None for anything else."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None or isinstance(node.operand, ast.UnaryOp) else -inner
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    return None


def _is_condition(node: ast.AST) -> bool:
    """A truth value: a comparison, ``not``/``and``/``or``, or ``&``/``|`` of conditions."""
    if isinstance(node, (ast.Compare, ast.BoolOp)) or isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return True
    return isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)) and _is_condition(node.left)


def literal(value: float) -> ast.expr:
    """A literal node; negatives as unary minus so unparse keeps precedence right."""
    if isinstance(value, float):
        value = float(f"{value:.3g}")
        if math.isnan(value) or math.isinf(value):
            value = 1.0
    node = ast.Constant(abs(value))
    return ast.UnaryOp(ast.USub(), node) if value < 0 else node


def _call(func: ast.expr, *args: ast.expr) -> ast.Call:
    return ast.Call(func=func, args=list(args), keywords=[])


def _attr(module: str, name: str) -> ast.expr:
    return ast.Attribute(value=ast.Name(module, ast.Load()), attr=name, ctx=ast.Load())


def _binop(left: ast.expr, op: ast.operator, right: ast.expr) -> ast.BinOp:
    return ast.BinOp(left=left, op=op, right=right)


@dataclass
class Mutations:
    """The operator set over one random stream; ``apply`` runs one named operator."""

    rng: np.random.Generator
    names: ModuleNames
    scale: float = 10.0
    cases: list[dict] | None = None  # recorded example inputs: argument name -> number or array
    data_thresholds: float = 0.0  # share of conditions whose threshold comes from ``cases``

    def apply(self, op: str, fn: Function) -> bool:
        self._learn(fn)
        return getattr(self, op)(fn, sites(fn))

    def _learn(self, fn: Function) -> None:
        """What the draws need to know of the function being edited."""
        self._scalars = scalar_args(fn)
        self._rebound = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}

    def _varies(self, node: ast.AST) -> bool:
        """Whether ``node`` can differ between elements: it uses a name that is not a scalar
        argument (with no typed scalars every name counts)."""
        return bool(_names_in(node) - getattr(self, "_scalars", set()))

    # ---- small draws ----------------------------------------------------------------------
    def _pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def _magnitude(self, low: float, high: float) -> float:
        """Log-uniform in [scale*low, scale*high]."""
        return self.scale * float(np.exp(self.rng.uniform(np.log(low), np.log(high))))

    def _new_value(self, old: float) -> float:
        u = self.rng.random()
        if u < 0.55 and old != 0:
            new = old * float(np.exp(self.rng.normal(0.0, 0.4)))
        elif u < 0.8:
            new = old + float(self.rng.normal(0.0, 0.3)) * max(abs(old), self.scale * 0.1)
        elif u < 0.9 and old != 0:
            new = -old
        else:
            new = float(self.rng.integers(-2, 6))
        if isinstance(old, int) and self.rng.random() < 0.5:
            new = int(round(new))
        if float(f"{new:.3g}") == old:
            new = old + (1 if isinstance(old, int) else self.scale * 0.1)
        return new

    # ---- operators ------------------------------------------------------------------------
    def perturb_constant(self, fn, found: list[Site]) -> bool:
        numbers = [
            (s, value)
            for s in found
            if s.free
            and (value := _number(s.node)) is not None
            and not (isinstance(s.parent, ast.UnaryOp) and isinstance(s.parent.op, ast.USub))
        ]
        if not numbers:
            return False
        site, value = self._pick(numbers)
        site.replace(literal(self._new_value(value)))
        return True

    def jitter_constants(self, fn, found: list[Site]) -> bool:
        """Every free numeric literal at once, each times its own small log-normal factor (zeros
        stay): a coordinated step of all thresholds and weights together. Near a good heuristic
        nearly every single-constant edit is a large loss; a joint small step is the move that
        edits one constant at a time cannot make."""
        numbers = [
            (s, value)
            for s in found
            if s.free
            and (value := _number(s.node)) is not None
            and value != 0
            and not (isinstance(s.parent, ast.UnaryOp) and isinstance(s.parent.op, ast.USub))
        ]
        spread = float(np.exp(self.rng.uniform(*np.log(JITTER_SPREAD))))
        changed = False
        for site, value in numbers:
            new = float(value) * float(np.exp(self.rng.normal(0.0, spread)))
            if float(f"{new:.3g}") != value:
                site.replace(literal(new))
                changed = True
        return changed

    def swap_operator(self, fn, found: list[Site]) -> bool:
        ops = [
            s.node
            for s in found
            if isinstance(s.node, ast.BinOp) and isinstance(s.node.op, ARITH + (ast.Pow, ast.FloorDiv))
        ]
        if not ops:
            return False
        node = self._pick(ops)
        kind = type(node.op)
        family: tuple[type[ast.operator], ...] = {
            ast.Add: (ast.Sub,),
            ast.Sub: (ast.Add,),
            ast.Mult: (ast.Div,),
            ast.Div: (ast.Mult,),
            ast.Pow: (ast.Mult,),
            ast.FloorDiv: (ast.Div,),
        }[kind]
        if self.rng.random() < 0.3:
            family = tuple(o for o in ARITH if o is not kind)
        node.op = self._pick(family)()
        return True

    def swap_compare(self, fn, found: list[Site]) -> bool:
        compares = [
            (s.node, i)
            for s in found
            if isinstance(s.node, ast.Compare)
            for i, op in enumerate(s.node.ops)
            if isinstance(op, ORDER + EQUALITY)
        ]
        if not compares:
            return False
        node, i = self._pick(compares)
        group = ORDER if isinstance(node.ops[i], ORDER) else EQUALITY
        node.ops[i] = self._pick([o for o in group if not isinstance(node.ops[i], o)])()
        return True

    def _unary_calls(self, found: list[Site]) -> list[tuple[Site, str]]:
        out = []
        for s in found:
            node = s.node
            if (
                isinstance(node, ast.Call)
                and len(node.args) == 1
                and not node.keywords
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
            ):
                for module in ("numpy", "math"):
                    alias = getattr(self.names, module)
                    if node.func.value.id == alias and node.func.attr in UNARY[module] + ("log",):
                        out.append((s, module))
        return out

    def swap_function(self, fn, found: list[Site]) -> bool:
        calls = self._unary_calls(found)
        if not calls:
            return False
        site, module = self._pick(calls)
        alias, arg = getattr(self.names, module), site.node.args[0]
        new = self._pick([f for f in UNARY[module] if f != site.node.func.attr])
        if new in NEEDS_ABS and not (isinstance(arg, ast.Call) and getattr(arg.func, "attr", "") == ABS[module]):
            arg = _call(_attr(alias, ABS[module]), arg)
        site.replace(_call(_attr(alias, new), arg))
        return True

    def drop_term(self, fn, found: list[Site]) -> bool:
        options, unary = [], {id(s.node) for s, _ in self._unary_calls(found)}
        for s in found:
            node = s.node
            if not s.free:
                continue
            if isinstance(node, ast.BinOp):
                options += [(s, node.left), (s, node.right)]
            elif isinstance(node, ast.UnaryOp) and _number(node) is None:
                options.append((s, node.operand))
            elif isinstance(node, ast.Call) and len(node.args) == 3 and getattr(node.func, "attr", "") == "where":
                options += [(s, node.args[1]), (s, node.args[2])]
            elif (
                id(node) in unary  # a numpy/math call of one argument (``_unary_calls``)
                and isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr not in ABS.values()  # keep domain guards
            ):
                options.append((s, node.args[0]))
        # Prefer keeping a part that still depends on something over collapsing to a literal.
        options = [o for o in options if _number(o[1]) is None] or options
        if not options:
            return False
        site, keep = self._pick(options)
        site.replace(keep)
        return True

    # ---- graft: structure from another member ---------------------------------------------
    def graft(self, fn: Function, donor: Function) -> bool:
        """Replace one expression of ``fn`` by a copy of one of ``donor``'s (the same marked
        function in another member): a condition by a condition, a value by a value. Subtree
        crossover: a band or a branch that one lineage found can reach another without the
        several operator draws that would have to line up to build it again. Only donor
        expressions over names ``fn`` has (its arguments, the module's numpy and math) qualify;
        donor code is read as a tree, never run."""
        self._learn(fn)
        arguments = {a.arg for a in _arguments(fn)}
        known = arguments | {m for m in (self.names.numpy, self.names.math) if m}
        pieces = [
            s.node
            for s in sites(donor)
            if s.free
            and _number(s.node) is None
            and not isinstance(s.node, ast.Name)
            and _names_in(s.node) <= known
            and _names_in(s.node) & arguments
            and not _names_in(s.node) & self._rebound
        ]
        if not pieces:
            return False
        piece = self._pick(pieces)
        text = ast.unparse(piece)
        places = [
            s
            for s in sites(fn)
            if s.free and _is_condition(s.node) == _is_condition(piece) and ast.unparse(s.node) != text
        ]
        if not places:
            return False
        self._pick(places).replace(clone(piece))
        return True

    # ---- insert_term: new structure from the function's own names ------------------------
    def insert_term(self, fn, found: list[Site]) -> bool:
        targets = [
            s
            for s in found
            if s.free
            and (
                _number(s.node) is not None
                or isinstance(s.node, (ast.Name, ast.BinOp, ast.UnaryOp, ast.Call, ast.Subscript))
            )
        ]
        if not targets:
            return False
        roots = [s for s in targets if s.root]
        site = self._pick(roots if roots and self.rng.random() < ROOT_SHARE else targets)
        atom = self._atom(fn, found, site)
        if atom is None:
            return False
        forms = {name: w for name, w in FORMS.items() if self.names.numpy or name != "where"}
        names, weights = list(forms), np.array(list(forms.values()))
        form = names[int(self.rng.choice(len(names), p=weights / weights.sum()))]
        site.replace(getattr(self, f"_{form}_term")(site.node, atom))
        return True

    def _atom(self, fn, found: list[Site], site: Site) -> ast.expr | None:
        """A quantity to build on: an existing subexpression of the body (copied, so the tree
        never contains itself), a difference of two names in scope, or one name."""
        names, varying = self._in_scope(fn, site)
        u = self.rng.random()
        atom = self._existing(found) if u < ATOM_SHARE["existing"] or not names else None
        if atom is not None:
            if isinstance(atom, ast.UnaryOp) and isinstance(atom.op, ast.USub):
                atom = atom.operand  # thresholds are mostly positive; compare the quantity itself
            return clone(atom)
        if len(names) >= 2 and u < ATOM_SHARE["existing"] + ATOM_SHARE["difference"]:
            # At least one side varies between elements, so the difference is not a constant.
            a = self._pick(varying)
            b = self._pick([n for n in names if n != a])
            first, second = (a, b) if self.rng.random() < 0.5 else (b, a)
            return _binop(ast.Name(first, ast.Load()), ast.Sub(), ast.Name(second, ast.Load()))
        return ast.Name(self._pick(varying), ast.Load()) if names else None

    def _in_scope(self, fn, site: Site) -> tuple[list[str], list[str]]:
        """The names an expression at ``site`` may use (arguments, then names bound by earlier
        statements), and those of them that vary between elements (all, when none is known to)."""
        names = [a.arg for a in _arguments(fn)]
        for stmt in fn.body[: site.stmt]:
            names += [n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
        names = list(dict.fromkeys(names))
        return names, [n for n in names if n not in getattr(self, "_scalars", set())] or names

    def _existing(self, found: list[Site]) -> ast.expr | None:
        """A random compound subexpression relating at least two names (the quantities that
        matter are usually relations between arguments, like a gap between two sizes)."""
        for k in self.rng.permutation(len(found)):
            node = found[k].node
            if found[k].free and isinstance(node, (ast.BinOp, ast.Call, ast.UnaryOp)) and _number(node) is None:
                if len(_names_in(node)) > 1 and self._varies(node):
                    return node
        return None

    def _shape(self, atom: ast.expr) -> ast.expr:
        """A nonlinear transform of the atom with a length scale drawn around ``scale``."""
        np_ = self.names.numpy
        s = literal(self._magnitude(0.2, 5.0))
        shapes = [
            lambda: atom,
            lambda: _binop(atom, ast.Pow(), ast.Constant(2)),
            lambda: _binop(ast.Constant(1), ast.Div(), _binop(self._abs(atom), ast.Add(), s)),
        ]
        if np_:
            shapes += [
                lambda: _call(_attr(np_, "exp"), _binop(ast.UnaryOp(ast.USub(), self._abs(atom)), ast.Div(), s)),
                lambda: _call(_attr(np_, "sqrt"), self._abs(atom)),
                lambda: _call(_attr(np_, "log1p"), self._abs(atom)),
            ]
        return self._pick(shapes)()

    def _abs(self, node: ast.expr) -> ast.expr:
        return _call(_attr(self.names.numpy, "abs") if self.names.numpy else ast.Name("abs", ast.Load()), node)

    def _signed(self, low: float, high: float, negative: float = 0.5) -> float:
        return self._magnitude(low, high) * (-1 if self.rng.random() < negative else 1)

    def _factor(self) -> float:
        """A multiplier for one branch: scale-free, mostly a damping or an amplification."""
        return float(f"{np.exp(self.rng.uniform(np.log(0.05), np.log(20.0))):.3g}")

    def _observed(self, atom: ast.expr) -> np.ndarray | None:
        """The values ``atom`` takes on the recorded inputs when it is an argument or the
        difference of two (the quantities a threshold on a gap or a size compares); None for
        anything else, or an argument the body rebinds. Only data is read: no code runs."""
        if isinstance(atom, ast.Name):
            first, second = atom.id, None
        elif (
            isinstance(atom, ast.BinOp)
            and isinstance(atom.op, ast.Sub)
            and isinstance(atom.left, ast.Name)
            and isinstance(atom.right, ast.Name)
        ):
            first, second = atom.left.id, atom.right.id
        else:
            return None
        if {first, second} & getattr(self, "_rebound", set()):
            return None
        values = []
        for case in self.cases or []:
            if first in case and (second is None or second in case):
                values.append(np.ravel(np.asarray(case[first], float) - (case[second] if second else 0.0)))
        if not values:
            return None
        found = np.unique(np.concatenate(values))
        return found[np.isfinite(found)]

    def _between(self, values: np.ndarray | None) -> float | None:
        """A threshold halfway between two neighbouring observed values: on those inputs it
        separates them, so the condition is true for some and false for others."""
        if values is None or values.size < 2:
            return None
        k = int(self.rng.integers(values.size - 1))
        return float(f"{(values[k] + values[k + 1]) / 2:.3g}")

    def _condition(self, atom: ast.expr) -> ast.expr:
        """``atom OP t``, or a band ``(atom > 0) & (atom < t)`` that leaves exact zeros alone."""
        # (the extra draw happens only when data thresholds are on, so runs without them repeat)
        observed = (
            self._observed(atom) if self.data_thresholds > 0 and self.rng.random() < self.data_thresholds else None
        )
        if self.rng.random() < BAND_SHARE:
            low = ast.Compare(left=clone(atom), ops=[ast.Gt()], comparators=[literal(0)])
            bound = self._between(observed[observed > 0] if observed is not None else None)
            upper = literal(bound if bound is not None else self._magnitude(0.2, 5.0))
            high = ast.Compare(left=atom, ops=[self._pick((ast.Lt, ast.LtE))()], comparators=[upper])
            return _binop(low, ast.BitAnd(), high)
        data = self._between(observed)
        if data is not None and data != 0:
            op = self._pick(ORDER)()
            return ast.Compare(left=atom, ops=[op], comparators=[literal(data)])
        threshold = 0 if self.rng.random() < 0.1 else self._signed(0.1, 5.0, negative=0.2)
        op = self._pick(ORDER + (ast.Eq,) if threshold == 0 else ORDER)()
        return ast.Compare(left=atom, ops=[op], comparators=[literal(threshold)])

    def _add_term(self, expr: ast.expr, atom: ast.expr) -> ast.expr:
        return _binop(expr, ast.Add(), _binop(literal(self._signed(0.01, 10.0)), ast.Mult(), self._shape(atom)))

    def _scale_term(self, expr: ast.expr, atom: ast.expr) -> ast.expr:
        return _binop(expr, self._pick((ast.Mult, ast.Div))(), self._shape(atom))

    def _step_term(self, expr: ast.expr, atom: ast.expr) -> ast.expr:
        return _binop(expr, ast.Add(), _binop(literal(self._signed(0.1, 10.0)), ast.Mult(), self._condition(atom)))

    def _where_term(self, expr: ast.expr, atom: ast.expr) -> ast.expr:
        """``np.where(cond, expr changed, expr)``: the body's value, shifted or rescaled on one side."""
        np_ = self.names.numpy
        if np_ is None:  # the "where" form is offered only when the module imports numpy
            raise ValueError("np.where needs numpy imported")
        other = clone(expr)
        if self.rng.random() < 0.5:
            other = _binop(other, ast.Add(), literal(self._signed(0.1, 10.0)))
        else:
            other = _binop(other, ast.Mult(), literal(self._factor()))
        branches = [other, expr] if self.rng.random() < 0.5 else [expr, other]
        return _call(_attr(np_, "where"), self._condition(atom), *branches)

    # ---- step_threshold: one threshold a whole step up or down ------------------------------
    def step_threshold(self, fn, found: list[Site]) -> bool:
        """Move one threshold a small whole step up or down: a literal that a varying quantity
        is compared with (``x < t``) or measured from (``x - c``). On integer quantities a
        threshold acts in steps (``x < 1.64`` is ``x < 2``), and near a good rule the best
        neighbours are one to three units away; perturb_constant's wide draw lands on one given
        neighbour of a target near 50 about 3 % of the time, this one each sixth draw."""
        steps = [s for s in found if s.free and _number(s.node) is not None and self._is_threshold(s)]
        if not steps:
            return False
        site = self._pick(steps)
        value = _number(site.node)
        assert value is not None
        step = int(self.rng.integers(1, STEP_MAX + 1)) * (1 if self.rng.random() < 0.5 else -1)
        unit = self.scale * STEP_UNIT
        new = value + step * (max(1, round(unit)) if isinstance(value, int) else unit)
        site.replace(literal(new))
        return True

    def _is_threshold(self, site: Site) -> bool:
        """Whether a literal site is compared with, or subtracted from, a varying quantity."""
        parent = site.parent
        if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.USub):
            return False  # the minus sign's own site stands for the number
        if isinstance(parent, ast.Compare) and len(parent.ops) == 1:
            other = parent.comparators[0] if site.field == "left" else parent.left
            return self._varies(other)
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Sub) and site.field == "right":
            return self._varies(parent.left)
        return False

    # ---- rebuild_band: a whole two-band rule in place of the returned value ---------------
    def rebuild_band(self, fn, found: list[Site]) -> bool:
        """Replace a returned (or assigned) value by a two-band rule on one quantity ``x``,
        ``np.where(x < t, k - x, -np.abs(x - c))``: below a small cut ``t`` the smaller ``x`` the
        better, ahead of everything else (``k`` exceeds ``t``); above it, the nearer ``x`` to a
        target ``c`` the better. It is the shape of the hand rules that reach the published
        level on Weibull bin packing (``x`` the gap a bin would keep: exact fits first, else
        leave a gap near ``c``). insert_term builds it only one condition at a time, through
        intermediates that each lose; this offers it whole, and later edits tune and extend it.
        ``x`` is a difference of two names in scope (one of them varying), oriented so it is
        mostly non-negative on the recorded inputs when there are any; with data thresholds on,
        ``c`` is drawn between observed values of ``x`` above the cut."""
        np_ = self.names.numpy
        roots = [s for s in found if s.free and s.root]
        if np_ is None or not roots:
            return False
        site = self._pick(roots)
        x = self._gap(fn, site)
        if x is None:
            return False
        cut = self._magnitude(*REBUILD_CUT)
        observed = self._observed(x) if self.data_thresholds > 0 and self.rng.random() < self.data_thresholds else None
        target = self._between(observed[observed > cut] if observed is not None else None)
        target = self._magnitude(*REBUILD_TARGET) if target is None else target
        first = _binop(literal(100.0 * self.scale), ast.Sub(), clone(x))
        rest = ast.UnaryOp(ast.USub(), self._abs(_binop(clone(x), ast.Sub(), literal(target))))
        cond = ast.Compare(left=clone(x), ops=[ast.Lt()], comparators=[literal(cut)])
        site.replace(_call(_attr(np_, "where"), cond, first, rest))
        return True

    def _gap(self, fn, site: Site) -> ast.expr | None:
        """``a - b`` for two names in scope at ``site`` (one of them varying between elements),
        oriented by the recorded inputs so that it is mostly non-negative; one varying name
        when there is no second."""
        names, varying = self._in_scope(fn, site)
        if not names:
            return None
        if len(names) < 2:
            return ast.Name(varying[0], ast.Load())
        a = self._pick(varying)
        b = self._pick([n for n in names if n != a])
        x = _binop(ast.Name(a, ast.Load()), ast.Sub(), ast.Name(b, ast.Load()))
        values = self._observed(x) if self.cases else None
        if values is not None and values.size and float(np.median(values)) < 0:
            x = _binop(ast.Name(b, ast.Load()), ast.Sub(), ast.Name(a, ast.Load()))
        return x
