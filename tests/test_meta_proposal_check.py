"""Proposal gates: every rejection the spec lists, the value kinds, the symbolic mutator."""

import ast
import math
import random

import pytest

from algorithms.meta.mutate import COUNT_ARGS, insert_step, symbolic_proposals
from algorithms.meta.proposal_check import PRIORITY_SEED
from algorithms.meta.tree import FlatPuct, PrioritySelection
from algorithms.meta.values import ParamSlot, SourceSlot, policy_source, priority_selection, validate_proposal

FACE = "def priority(rank, visits, total, prior, depth, n_nodes):\n"


def face(body: str, head: str = "import math\n\n") -> str:
    return head + FACE + "".join(f"    {line}\n" for line in body.splitlines())


@pytest.mark.parametrize("source, reason", [
    (face("return rank / visits"), "ZeroDivisionError"),  # division by zero at the root
    (face("return math.log(total)"), "ValueError"),  # math domain error at total = 0
    (face("return rank if visits else math.inf"), "finite"),
    (face("return math.nan"), "finite"),
    (face("return (-1.0) ** 0.5 + rank"), "finite"),  # a complex number is not a finite real
    (face("s = 0.0\nfor i in range(3):\n    s += i\nreturn s"), "For is not allowed"),
    (face("return min([rank for v in (1.0, 2.0)])"), "ListComp is not allowed"),
    (face("f = lambda x: x\nreturn rank"), "Lambda is not allowed"),
    (face("import os\nreturn rank"), "Import is not allowed"),
    (face("return rank", head="import os\n\n"), "only `import math`"),
    (face("return rank.__class__"), "math.<function>"),
    (face("return eval('rank')"), "only math functions"),
    (face("return open('x')"), "only math functions"),
    (face("return unknown + rank"), "name 'unknown'"),
    (face("math.sqrt = abs\nreturn rank"), "math.<function>"),
    (face("return rank").replace("n_nodes)", "n_nodes, extra)"), "signature"),
    ("def score(rank, visits, total, prior, depth, n_nodes):\n    return rank\n", "def priority"),
    (face("return 'high'"), "numeric constants"),
    (face("return None"), "numeric constants"),
    (face("rank"), "bare expression"),
    (face("return 9 ** 9 ** 9"), "OverflowError"),  # integers become floats: no hour-long bigint
    (FACE + "    return rank +\n", "syntax error"),
])
def test_narrow_face_rejections(source, reason):
    ok, why = validate_proposal(priority_selection(), source)
    assert not ok
    assert reason in why


def test_narrow_face_accepts_rules_finite_everywhere():
    kind = priority_selection()
    for body in ("return rank", "return rank + 0.3 * math.sqrt(total) / (1 + visits)",
                 "c = 0.5 if depth < 3 else 0.2\nreturn rank + c * prior * math.sqrt(total + 1.0) / (1 + visits)",
                 "return max(rank, 0.1) - abs(depth - 2) * 0.01 + (visits == 0) * 0.5"):
        assert validate_proposal(kind, face(body)) == (True, "")
    assert isinstance(kind.compile(PRIORITY_SEED), PrioritySelection)


POLICY_OK = '''import math
from collections import deque


class Policy:
    def __init__(self):
        self.recent = deque(maxlen=3)

    def select(self, tree):
        import random
        best = tree.nodes[0]
        for node in tree.nodes:
            if node.value > best.value:
                best = node
        return best
'''


def select_policy(body: str, head: str = "") -> str:
    return head + "class Policy:\n    def select(self, tree):\n" + "".join(f"        {line}\n" for line in body.splitlines())


@pytest.mark.parametrize("source, reason", [
    (select_policy("return tree.nodes[0]", head="import os\n\n"), "outside the whitelist"),
    (select_policy("import subprocess\nreturn tree.nodes[0]"), "outside the whitelist"),  # method level
    (select_policy("return tree.nodes[0]", head="from pathlib import Path\n\n"), "outside the whitelist"),
    (select_policy("return tree.nodes[0]", head="from rsi.errors import RsiError\n\n"), "outside the whitelist"),
    (select_policy("return tree.nodes[0]", head="from algorithms.slots import resolve_slot\n\n"), "may be imported"),
    (select_policy("return tree.nodes[0]", head="from . import tree\n\n"), "relative"),
    (select_policy("return tree.nodes[0].__class__"), "dunder attribute"),
    (select_policy("return __builtins__"), "'__builtins__' is not allowed"),
    (select_policy("open('/etc/passwd')\nreturn tree.nodes[0]"), "'open' is not allowed"),
    (select_policy("exec('x = 1')\nreturn tree.nodes[0]"), "'exec' is not allowed"),
    (select_policy("return eval('tree.nodes[0]')"), "'eval' is not allowed"),
    (select_policy("return getattr(tree, 'nodes')[0]"), "'getattr' is not allowed"),
    (select_policy("setattr(tree, 'nodes', [])\nreturn None"), "'setattr' is not allowed"),
    (select_policy("return type(tree)"), "'type' is not allowed"),
    (select_policy("return super().select(tree)"), "'super' is not allowed"),
    (select_policy("global x\nreturn tree.nodes[0]"), "global/nonlocal"),
    (select_policy("return tree.nodes[0]", head="import math\nmath.pi = 3\n\n"), "assigning into module"),
    (select_policy("return '{0.__class__}'.format(tree)"), "dunder"),
    (select_policy("return tree.nodes[0]").replace("class Policy", "class Rule"), "class named Policy"),
    (select_policy("return tree.nodes[0]").replace("class Policy:", "class Policy:\n    def __init__(self, c):\n        self.c = c\n"),
     "no arguments"),
    (select_policy("return None"), "must select the root"),
    # A look-alike node outside the candidate pool.
    (select_policy("return tree.nodes[0] if len(tree.nodes) == 1 else Node(0, None, 1.0, 1.0)",
                   head="from algorithms.meta.tree import Node\n\n"), "not a node of the tree"),
    (select_policy("return 1 / 0"), "ZeroDivisionError"),
    ("class Policy:\n    def choose(self, tree):\n        return tree.nodes[0]\n", "does not implement NodeSelection"),
    ("Policy = 3\n", "class named Policy"),
    ("print('hi')\nclass Policy:\n    pass\n", "top level"),
])
def test_policy_source_rejections(source, reason):
    ok, why = validate_proposal(policy_source("node_selection"), source)
    assert not ok
    assert reason in why


def test_policy_source_accepts_whitelisted_imports_at_module_and_method_level():
    kind = policy_source("node_selection")
    assert validate_proposal(kind, POLICY_OK) == (True, "")


@pytest.mark.parametrize("slot, body, reason", [
    ("parent_selection", "def select(self, members, rng):\n    return members[2]", "not a confirmed selectable"),
    ("promotion", "def choose(self, members):\n    return members[0]", "one confirmed member"),
    ("screen_sampling", "def sample(self, task_ids, k, rng):\n    return list(task_ids)[:k] * 2", "distinct"),
    ("acceptance", "def accept(self, figures):\n    return figures.gain", "True or False"),
    ("merge_pairing", "def pairs(self, entries):\n    return [(e, e) for e in entries]", "with itself"),
])
def test_smoke_tests_reject_answers_outside_the_contract(slot, body, reason):
    source = "class Policy:\n" + "".join(f"    {line}\n" for line in body.splitlines())
    ok, why = validate_proposal(policy_source(slot), source)
    assert not ok and reason in why


def test_param_slot_bounds_names_and_merge():
    kind = ParamSlot(FlatPuct, {"c_puct": 1.0, "prior_exponent": 0.0}, {"c_puct": (0.0, 4.0), "prior_exponent": (0.0, 3.0)})
    assert kind.compile({"c_puct": 0.5}) == FlatPuct(0.5, 0.0)
    assert validate_proposal(kind, {"c_puct": 5.0})[1] == "c_puct = 5.0 is outside [0.0, 4.0]"
    assert "unknown parameter(s) gamma" in validate_proposal(kind, {"gamma": 1.0})[1]
    assert not validate_proposal(kind, {"c_puct": math.nan})[0]
    merged, contradictions = kind.merge([{"c_puct": 0.5}, {"prior_exponent": 2.0}])
    assert merged == {"c_puct": 0.5, "prior_exponent": 2.0} and contradictions == {}
    merged, contradictions = kind.merge([{"c_puct": 0.5}, {"c_puct": 0.25, "prior_exponent": 1.0}])
    assert merged == {"c_puct": 1.0, "prior_exponent": 1.0} and contradictions == {"c_puct": [0.5, 0.25]}
    assert kind.parse(kind.render({"c_puct": 0.5})) == {"c_puct": 0.5, "prior_exponent": 0.0}


def test_source_slot_turns_validate_and_build_failures_into_reasons():
    def validate(text):
        if "bad" in text:
            raise ValueError("contains bad")

    kind = SourceSlot("good", validate=validate, build=lambda text: text.upper())
    assert kind.compile("good") == "GOOD"
    assert validate_proposal(kind, "bad") == (False, "ValueError: contains bad")
    assert validate_proposal(kind, 42) == (False, "a source proposal must be text, got int")


def test_symbolic_proposals_pass_the_gate_or_are_counted():
    out = symbolic_proposals(PRIORITY_SEED, random.Random(0), 20)
    assert len(out.valid) + out.invalid_proposals == 20
    assert out.valid and out.invalid_proposals == len(out.reasons)
    kind = priority_selection()
    assert all(validate_proposal(kind, source)[0] for source in out.valid)
    assert PRIORITY_SEED not in out.valid
    again = symbolic_proposals(PRIORITY_SEED, random.Random(0), 20)
    assert again.valid == out.valid  # deterministic for a seed


def test_insert_step_adds_a_bounded_step_on_a_count_with_thresholds_in_its_range():
    kind, rng, seen = priority_selection(), random.Random(3), set()
    for i in range(200):
        stepped = insert_step(PRIORITY_SEED, rng, budget=40)
        if i < 10:  # the gate (a jail start each) on a sample; the shape checks below on all 200
            assert validate_proposal(kind, stepped)[0]
        ret = next(n for n in ast.walk(ast.parse(stepped)) if isinstance(n, ast.Return)).value
        assert isinstance(ret, ast.BinOp) and isinstance(ret.op, ast.Add)  # the old value, plus a step
        assert ast.unparse(ret.left) in PRIORITY_SEED
        weight, step = ret.right.left, ret.right.right
        assert isinstance(step, ast.Compare) and isinstance(step.ops[0], ast.GtE)
        arg, threshold = step.left.id, step.comparators[0].value
        assert arg in COUNT_ARGS and 2 <= threshold <= 40
        value = weight.value if isinstance(weight, ast.Constant) else -weight.operand.value
        assert 0.1 <= abs(value) <= 2.0
        seen.add((arg, threshold, value < 0))
    # every count argument, both signs, and thresholds across the range are drawn
    assert {a for a, _, _ in seen} == set(COUNT_ARGS) and {s for _, _, s in seen} == {True, False}
    thresholds = {t for _, t, _ in seen}
    assert min(thresholds) <= 3 and max(thresholds) >= 30
    assert insert_step("not python (", rng) is None


DATACLASS_POLICY = """
from dataclasses import dataclass

@dataclass
class Policy:
    margin: float = 0.0

    def choose(self, members):
        pool = [m for m in members if m.confirmed]
        return max(pool, key=lambda m: m.train_mean + self.margin)
"""


def test_a_dataclass_policy_builds_in_the_jail():
    """Class machinery that looks its module up in sys.modules (@dataclass) works in the build,
    as it would in an imported module."""
    assert validate_proposal(policy_source("promotion"), DATACLASS_POLICY) == (True, "")
    broken = DATACLASS_POLICY.replace("margin: float = 0.0", "margin: float")  # Policy() needs an argument
    ok, why = validate_proposal(policy_source("promotion"), broken)
    assert not ok and "construct with no arguments" in why
