"""meta-evolve's paired gate and its standard error, and the proposal gate's layers that run in
this process (parse, AST whitelist, the narrow face's grid and the policy build, which the engine
runs in-process for trusted text only), at the edges ``perf/mutation.py meta-gate-se`` found
untested. The gate's own tests (test_meta_proposal_check.py) judge proposals through the rollout jail, a
child process a mutant in this process cannot reach; these call the layers directly.
Expected values are worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from algorithms.meta import proposal_check
from algorithms.meta.proposal_check import (
    GRID,
    InvalidProposal,
    build_policy,
    build_priority,
    check_policy_ast,
    check_priority_source,
)
from algorithms.meta.seeds import seed_source
from algorithms.meta.stats import FamilyReport, GateResult, meta_validate, paired_gate, required_holdout, transfer_ratio
from algorithms.meta.tree import PrioritySelection
from algorithms.meta.validation import _se
from algorithms.slots import TOLERANCE
from rsi.errors import ConfigError


# ---- the paired gate -----------------------------------------------------------------------------
def test_paired_gate_reports_every_figure():
    # gains 0.35 and 0.15: mean 0.25, sd |0.35 - 0.15| / sqrt(2), se = sd / sqrt(2) = 0.1, z = 2.5
    r = paired_gate([0.0, 0.5], [0.35, 0.65])
    assert r.n == 2 and (r.wins, r.losses) == (2, 0) and r.accepted is True
    assert r.mean_gain == pytest.approx(0.25, abs=1e-15) and r.se == pytest.approx(0.1, abs=1e-15)
    assert r.z == pytest.approx(2.5, abs=1e-12)
    assert paired_gate([0.0, 0.5], [0.35, 0.65], z_gate=2.6).accepted is False, "default z_gate is 2"
    assert paired_gate([0.0, 0.5], [0.35, 0.65], z_gate=2.4).accepted is True


def test_standard_error_uses_the_sample_sd_over_root_n():
    # gains 0, 0.2, 0, 0.2: sample sd sqrt(0.04 / 3) = 0.11547, se = sd / 2
    r = paired_gate(np.full(4, 0.5), np.array([0.5, 0.7, 0.5, 0.7]))
    assert r.se == pytest.approx(math.sqrt(0.04 / 3) / 2, rel=1e-12)
    assert r.mean_gain == pytest.approx(0.1, rel=1e-12) and r.z == pytest.approx(0.1 / r.se, rel=1e-12)
    # gains 1, 2, 3: sd 1, se 1 / sqrt(3)
    assert paired_gate([0, 0, 0], [1, 2, 3]).se == pytest.approx(1 / math.sqrt(3), rel=1e-12)


def test_a_gain_of_exactly_z_gate_standard_errors_is_accepted():
    # gains 3 and 1: mean 2, sd sqrt(2), se sqrt(2) / sqrt(2) = 1: z = 2 = the default z_gate
    r = paired_gate([0.0, 0.0], [3.0, 1.0])
    assert (r.mean_gain, r.se, r.z, r.accepted) == (2.0, 1.0, 2.0, True)


def test_one_pair_has_unknown_se_and_none_a_zero_mean():
    one = paired_gate([0.0], [1.0])
    assert (one.mean_gain, one.se, one.z, one.n, one.wins, one.losses, one.accepted) == (1.0, math.inf, 0.0, 1, 1, 0,
                                                                                          False)
    none = paired_gate([], [])
    assert (none.mean_gain, none.se, none.z, none.n, none.wins, none.losses, none.accepted) == (0.0, math.inf, 0.0, 0,
                                                                                                0, 0, False)


def test_zero_se_gives_an_infinite_z_of_the_gains_sign_or_zero_within_tolerance():
    up = paired_gate([0.5, 0.5], [0.75, 0.75])
    assert (up.se, up.z, up.accepted) == (0.0, math.inf, True)
    down = paired_gate([0.5, 0.5], [0.25, 0.25])
    assert (down.se, down.z, down.accepted, down.losses) == (0.0, -math.inf, False, 2)
    tiny = paired_gate([0.0, 0.0], [TOLERANCE, TOLERANCE])  # a gain of exactly TOLERANCE is none
    assert (tiny.se, tiny.z, tiny.accepted, tiny.wins) == (0.0, 0.0, False, 0)
    above = paired_gate([0.0, 0.0], [2 * TOLERANCE, 2 * TOLERANCE])
    assert (above.z, above.accepted, above.wins) == (math.inf, True, 2)


def test_wins_and_losses_exclude_differences_of_exactly_tolerance():
    r = paired_gate([0.0, TOLERANCE, 0.0, 0.5, 0.0], [TOLERANCE, 0.0, 0.5, 0.0, 0.0])
    assert (r.wins, r.losses) == (1, 1)


def test_pairs_must_be_equal_one_dimensional():
    with pytest.raises(ValueError) as exc:
        paired_gate([0.1, 0.2], [0.1])
    assert str(exc.value) == "paired scores need equal 1-d shapes, got (2,) and (1,)"
    with pytest.raises(ValueError) as exc:
        paired_gate([[0.1, 0.2]], [[0.1, 0.2]])
    assert str(exc.value) == "paired scores need equal 1-d shapes, got (1, 2) and (1, 2)"


def test_required_holdout():
    assert required_holdout(0.05, 0.03) == 12  # (2 * 0.05 / 0.03)^2 = 11.1, rounded up
    assert required_holdout(0.05, 0.1, z_gate=4.0) == 4  # (4 * 0.05 / 0.1)^2
    assert required_holdout(0.01, 1.0) == 2, "never fewer than two pairs"
    assert required_holdout(0.0, 0.5) == 2
    for gain in (0.0, -0.1):
        with pytest.raises(ValueError) as exc:
            required_holdout(0.05, gain)
        assert str(exc.value) == "the gain to detect must be positive"
    assert required_holdout(0.05, 1e-9) == 10**16


# ---- validation on unseen families ---------------------------------------------------------------
def test_meta_validate_reports_each_family_paired_by_key():
    before = {"s": {("b", 0): 0.5, ("a", 0): 0.25, ("a", 1): 0.75}}
    after = {"s": {("a", 1): 0.75, ("b", 0): 1.0, ("a", 0): 0.0}}  # other insertion order: paired by key
    r = meta_validate(before, after)["s"]
    assert isinstance(r, FamilyReport)
    assert (r.n, r.wins, r.losses) == (3, 1, 1)
    assert r.before == pytest.approx(0.5) and r.after == pytest.approx(1.75 / 3)
    assert r.gain == pytest.approx(0.25 / 3)
    assert r.sd == pytest.approx(np.std([-0.25, 0.0, 0.5], ddof=1), rel=1e-12)  # gains in key order
    two = meta_validate({"f": {(0, 0): 0.0, (1, 0): 0.0}}, {"f": {(0, 0): 3.0, (1, 0): 1.0}})["f"]
    assert (two.n, two.gain, two.sd) == (2, 2.0, math.sqrt(2))
    one = meta_validate({"f": {(0, 0): 0.5}}, {"f": {(0, 0): 1.0}})["f"]
    assert (one.n, one.sd, one.gain, one.wins) == (1, 0.0, 0.5, 1)


def test_meta_validate_refuses_unpaired_families_and_keys():
    with pytest.raises(ValueError) as exc:
        meta_validate({"a": {}, "b": {}}, {"a": {}})
    assert str(exc.value) == "families differ: ['a', 'b'] vs ['a']"
    with pytest.raises(ValueError) as exc:
        meta_validate({"f": {(0, 0): 0.5}}, {"f": {(1, 0): 0.5}})
    assert str(exc.value) == "family f: before and after are not paired on the same (instance, seed)"


def test_meta_validate_ties_within_tolerance():
    r = meta_validate({"f": {(0, 0): 0.0, (1, 0): TOLERANCE}}, {"f": {(0, 0): TOLERANCE, (1, 0): 0.0}})["f"]
    assert (r.wins, r.losses) == (0, 0)


def fam(gain: float) -> FamilyReport:
    return FamilyReport(before=0.0, after=gain, gain=gain, sd=0.0, wins=0, losses=0, n=2)


def test_transfer_ratio_needs_a_source_gain_beyond_tolerance():
    assert transfer_ratio({"s": fam(TOLERANCE), "t": fam(0.5)}, "s", "t") is None
    assert transfer_ratio({"s": fam(-TOLERANCE), "t": fam(0.5)}, "s", "t") is None
    assert transfer_ratio({"s": fam(0.25), "t": fam(0.5)}, "s", "t") == 2.0
    assert transfer_ratio({"s": fam(-0.25), "t": fam(0.5)}, "s", "t") == -2.0
    assert transfer_ratio({"s": fam(2 * TOLERANCE), "t": fam(TOLERANCE)}, "s", "t") == 0.5


def test_standard_error_of_a_family_gain():
    r = FamilyReport(before=0.0, after=0.1, gain=0.1, sd=0.3, wins=3, losses=1, n=9)
    assert _se(r) == pytest.approx(0.1, rel=1e-12)  # 0.3 / sqrt(9)
    assert _se(FamilyReport(0.0, 0.1, 0.1, 0.2, 1, 1, 4)) == pytest.approx(0.1, rel=1e-12)
    assert _se(FamilyReport(0.0, 0.1, 0.1, 0.0, 1, 0, 1)) is None, "one pair: unknown"
    assert _se(FamilyReport(0.0, 0.1, 0.1, 0.3, 1, 1, 2)) == pytest.approx(0.3 / math.sqrt(2), rel=1e-12)


def test_gate_result_is_the_figures_in_order():
    assert paired_gate([0.0, 0.0, 0.0], [0.5, 0.5, 0.5]) == GateResult(0.5, 0.0, math.inf, 3, 3, 0, True)


# ---- the proposal gate, in process ---------------------------------------------------------------
HEAD = "import math\n\n"
SIG = "def priority(rank, visits, total, prior, depth, n_nodes):\n"
SIGNATURE = "the signature must be exactly priority(rank, visits, total, prior, depth, n_nodes)"
ANNOTATIONS = "annotations on priority may only be float or int"


def face(body: str, head: str = HEAD, sig: str = SIG) -> str:
    return head + sig + "".join(f"    {line}\n" for line in body.splitlines())


def with_sig(params: str, before: str = "", returns: str = "") -> str:
    return f"{HEAD}{before}def priority({params}){returns}:\n    return rank\n"


ARGS = "rank, visits, total, prior, depth, n_nodes"
ROOT = (0.0, 0.0, 0.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize("source, reason", [
    # a docstring inside the function is skipped, not the end of the check
    (face('"""doc"""\ns = 0.0\nfor i in range(3):\n    s += i\nreturn s'),
     "line 6: For is not allowed on the narrow face (no loops, comprehensions, lambdas)"),
    (face("return rank.floor"), "line 4: only math.<function> attributes are allowed"),  # a math name, not math
    (face("return rank @ visits"), "line ?: operator MatMult is not allowed"),  # operators carry no line
    (with_sig(ARGS + ", *more"), SIGNATURE),
    (with_sig(ARGS + ", **more"), SIGNATURE),
    (with_sig(ARGS + ", *, k=1"), SIGNATURE),
    (with_sig(ARGS + ", /"), SIGNATURE),
    (with_sig(ARGS.replace("n_nodes", "n_nodes=1")), SIGNATURE),
    (with_sig(ARGS, before="@abs\n"), SIGNATURE),
    (with_sig(ARGS.replace("rank", "rank: str", 1)), ANNOTATIONS),
    (with_sig(ARGS.replace("rank", "rank: 'float'", 1)), ANNOTATIONS),
    (with_sig(ARGS, returns=" -> list"), ANNOTATIONS),
    (face("return rank") + "\n" + SIG + "    return rank\n", "define exactly one function `priority`"),
    (HEAD, "define exactly one function `priority`"),
    (5, "a source proposal must be text, got int"),
    ("#" * 20_001, "source is 20001 characters; at most 20000"),
    (SIG + "    return rank +\n", "syntax error at line 2: invalid syntax"),
    (face("return rank", head="import os\n\n"),
     "line 1: only `import math` and `def priority(...)` may appear at top level"),
    ("def priority(a, b, c, d, e, f):\n    return 1.0\n", SIGNATURE),
    (face("return unknown + rank"), "line 4: name 'unknown' is not an argument, a local, math or min/max/abs"),
    (face("return round(rank)"), "line 4: only math functions and min/max/abs may be called, without keywords"),
    (face("return max(rank, visits, key=abs)"),
     "line 4: only math functions and min/max/abs may be called, without keywords"),
    (face("return 'high'"), "line 4: only numeric constants are allowed"),
    (face("rank"), "line 4: a bare expression statement does nothing"),
    # the grid: the root (0, 0, 0, 0, 0, 1) comes first
    (face("return rank / visits"), f"priority{ROOT} raised ZeroDivisionError: float division by zero"),
    (face("return math.log(total)"), f"priority{ROOT} raised ValueError: math domain error"),
    (face("return rank if visits else math.inf"), f"priority{ROOT} returned inf; every value must be a finite number"),
    (face("return (-1.0) ** 0.5 + rank"),
     f"priority{ROOT} returned (6.123233995736766e-17+1j); every value must be a finite number"),
    # integer literals are floats: 2 ** 1100 overflows (as an int it would be exact, and times 0.0 fine)
    (face("return 2 ** 1100 * 0.0 + rank"),
     f"priority{ROOT} raised OverflowError: (34, 'Numerical result out of range')"),
])
def test_narrow_face_rejection_reasons(source, reason):
    with pytest.raises(InvalidProposal) as exc:
        check_priority_source(source)
    assert str(exc.value) == reason


def test_narrow_face_accepts_docstrings_annotations_math_without_import_and_the_longest_source():
    assert type(check_priority_source(face("return 7 // 2"))(*ROOT)) is float, "integer literals become floats"
    assert check_priority_source(face("x = rank * 2\nreturn x"))(0.25, 0, 0, 1, 0, 1) == 0.5  # a local
    for source in ('"""A rule."""\n' + face("return rank"),
                   face("return math.sqrt(total) / 10.0 + rank", head=""),  # math is there without import
                   with_sig("rank: float, visits: int, total, prior, depth, n_nodes", returns=" -> float")):
        fn = check_priority_source(source)
        assert fn(1.0, 0.0, 0.0, 1.0, 0.0, 1.0) == 1.0
        assert fn.__code__.co_filename == "<priority>"
    longest = face("return rank")
    longest = "#" * (20_000 - len(longest)) + longest
    assert len(longest) == 20_000 and check_priority_source(longest)(0.5, 0, 0, 1, 0, 1) == 0.5
    built = build_priority(longest)
    assert isinstance(built, PrioritySelection) and built.source == longest
    assert built.priority(0.75, 0, 0, 1, 0, 1) == 0.75


def test_the_narrow_faces_namespace_refuses_other_imports_and_builtins_even_past_the_ast_check():
    import ast

    with pytest.raises(ImportError) as exc:
        proposal_check._face_function_object(ast.parse("import os\ndef priority(*a):\n    return 0.0\n"))
    assert str(exc.value) == "import of 'os' is not allowed here"
    fn = proposal_check._face_function_object(ast.parse("def priority(*a):\n    return open\n"))
    with pytest.raises(NameError):
        fn()
    importer = proposal_check._restricted_import(frozenset({"math"}))
    assert importer("math") is math
    for args in (("os",), ("math", None, None, (), 1)):
        with pytest.raises(ImportError) as exc:
            importer(*args)
        assert str(exc.value) == f"import of {args[0]!r} is not allowed here"


def select_policy(body: str, head: str = "") -> str:
    lines = "".join(f"        {line}\n" for line in body.splitlines())
    return head + "class Policy:\n    def select(self, tree):\n" + lines


WHITELIST = ("bisect, collections, collections.abc, dataclasses, enum, functools, heapq, itertools, math, random, "
             "statistics, typing")


@pytest.mark.parametrize("source, reason", [
    (select_policy("return tree.nodes[0]", head="import os\n\n"),
     f"line 1: import of 'os' is outside the whitelist ({WHITELIST})"),
    (select_policy("return tree.nodes[0]", head="from algorithms.slots import resolve_slot, Member\n\n"),
     "line 1: from algorithms.slots only Entry, GateFigures, Member, TOLERANCE may be imported"),
    ("class Policy:\n    def __call__(self):\n        return 1\n", "line 2: defining '__call__' is not allowed"),
    (select_policy("return dict(__x__=1)"), "line 3: dunder keyword '__x__' is not allowed"),
    # a dotted import binds its first name: writing into it is writing into the module
    (select_policy("return tree.nodes[0]", head="import collections.abc\ncollections.x = 1\n\n"),
     "line 2: assigning into module 'collections' is not allowed"),
    ("x = 1\n", "the source must define a top-level class named Policy"),
    (None, "a source proposal must be text, got NoneType"),
    (select_policy("return tree.nodes[0]", head="import math\nmath.pi = 3\n\n"),
     "line 2: assigning into module 'math' is not allowed"),
    (select_policy("return tree.nodes[0]", head="from . import tree\n\n"), "line 1: relative imports are not allowed"),
    (select_policy("return tree.nodes[0]", head="from pathlib import Path\n\n"),
     "line 1: import from 'pathlib' is outside the whitelist"),
    (select_policy("global x\nreturn tree.nodes[0]"), "line 3: global/nonlocal are not allowed"),
    (select_policy("open('/etc/passwd')\nreturn tree.nodes[0]"), "line 3: name 'open' is not allowed"),
    (select_policy("return __builtins__"), "line 3: name '__builtins__' is not allowed"),
    (select_policy("return tree.nodes[0].__class__"), "line 3: dunder attribute '__class__' is not allowed"),
    (select_policy("return '{0.__class__}'.format(tree)"), "line 3: strings naming dunder attributes are not allowed"),
    ("print('hi')\nclass Policy:\n    pass\n", "line 1: only imports, definitions and assignments at top level"),
    ("class Policy(:\n", "syntax error at line 1: invalid syntax"),
])
def test_policy_ast_rejection_reasons(source, reason):
    with pytest.raises(InvalidProposal) as exc:
        check_policy_ast(source)
    assert str(exc.value) == reason


@pytest.mark.parametrize("source, reason", [
    # the namespace has only SAFE_BUILTINS: print is not among them
    ("class Policy:\n    def __init__(self):\n        print('hi')\n    def select(self, tree):\n"
     "        return tree.nodes[0]\n",
     "Policy() must construct with no arguments: NameError: name 'print' is not defined"),
    ("class Policy:\n    def __init__(self):\n        raise ValueError('nope')\n",
     "Policy() must construct with no arguments: ValueError: nope"),
    ("class Policy(Unknown):\n    pass\n", "building the source failed: NameError: name 'Unknown' is not defined"),
    ("class Policy:\n    pass\nPolicy = 3\n", "`Policy` must be a class"),
    ("class Policy:\n    def choose(self, tree):\n        return tree.nodes[0]\n",
     "Policy does not implement NodeSelection"),
])
def test_policy_build_rejection_reasons(source, reason):
    with pytest.raises(InvalidProposal) as exc:
        build_policy(source, "node_selection")
    assert str(exc.value) == reason


def test_a_built_policy_lives_in_its_own_module_name_and_file():
    imports = "from collections.abc import Mapping\nfrom algorithms.slots import Member, TOLERANCE\n\n"
    for source in (seed_source("node_selection"), '"""A rule."""\n' + select_policy("return tree.nodes[0]"),
                   select_policy("return tree.nodes[0]", head=imports)):  # a submodule's name, allowed names
        obj = build_policy(source, "node_selection")
        assert type(obj).__module__ == "rsi_policy"
        assert type(obj).select.__code__.co_filename == "<policy>"


def test_the_grid_includes_the_root():
    assert all(0.0 in axis for axis in GRID[:5]) and 1.0 in GRID[5]


@pytest.mark.skipif(not hasattr(proposal_check, "prefilter"), reason="the jailed gate's driver side is not in this tree")
def test_prefilter_runs_the_ast_layers_of_each_face():
    proposal_check.prefilter(proposal_check.PRIORITY_FACE, face("return rank / visits"))  # the grid is not an AST layer
    with pytest.raises(InvalidProposal) as exc:
        proposal_check.prefilter(proposal_check.PRIORITY_FACE, face("rank"))
    assert str(exc.value) == "line 4: a bare expression statement does nothing"
    face_name = proposal_check.policy_face("node_selection")
    assert face_name == "policy:node_selection"
    proposal_check.prefilter(face_name, "class Policy:\n    pass\n")  # builds nothing: no Protocol check here
    with pytest.raises(InvalidProposal) as exc:
        proposal_check.prefilter(face_name, "x = 1\n")
    assert str(exc.value) == "the source must define a top-level class named Policy"
    with pytest.raises(ValueError) as exc:
        proposal_check.prefilter("policies", "x = 1\n")
    assert str(exc.value) == "unknown face 'policies'"
    with pytest.raises(ConfigError, match="unknown decision slot 'no_such_slot'"):
        proposal_check.policy_face("no_such_slot")


@pytest.mark.skipif(not hasattr(proposal_check, "build_checked_policy"), reason="not in this tree")
def test_build_checked_policy_takes_a_checked_module_or_its_compiled_code():
    module = check_policy_ast(seed_source("node_selection"))
    assert type(proposal_check.build_checked_policy(module, "node_selection")).__module__ == "rsi_policy"
    code = compile(module, "<jailed>", "exec")
    assert type(proposal_check.build_checked_policy(code, "node_selection")).select.__code__.co_filename == "<jailed>"
