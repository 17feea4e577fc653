"""The ERA tree: reservation, back-propagation, the seed rule pinned to FlatPuct(1.0), inner
search determinism, and the meta-rewards."""

import math
import random

import pytest

from algorithms.meta.inner import run_inner
from algorithms.meta.landscape import SOURCE, TARGET
from algorithms.meta.proposal_check import PRIORITY_SEED
from algorithms.meta.rewards import MetaOutcome, auc, final_reward, reward_named, rollouts_to
from algorithms.meta.tree import FlatPuct, PrioritySelection, Tree
from algorithms.meta.values import priority_selection
from rsi.errors import ConfigError


class Pick:
    """A policy that answers with a fixed node index."""

    def __init__(self, index):
        self.index = index

    def select(self, tree):
        return tree.nodes[self.index]


def test_reservation_walks_the_parent_chain_and_values_back_propagate():
    tree = Tree(Pick(0))
    root = tree.add_root(0.1)
    a = tree.expand(tree.select(), 0.4)
    tree.policy = Pick(1)
    b = tree.expand(tree.select(), 0.3)
    assert (root.visits, a.visits, b.visits) == (2, 2, 1)  # a child starts with one visit
    tree.policy = Pick(2)
    assert tree.select() is b
    assert (root.visits, a.visits, b.visits) == (3, 3, 2)
    assert tree.total_visits() == 8
    c = tree.expand(b, 0.9)
    assert (c.depth, c.parent, b.children) == (3, b, [c])
    assert root.best == a.best == b.best == 0.9
    tree.expand(b, 0.2)
    assert b.best == 0.9 and tree.expand(root, math.nan).value == -math.inf  # NaN is a failed node


def test_flat_puct_matches_the_formula_by_hand():
    tree = Tree(FlatPuct(1.0))
    root = tree.add_root(0.5)
    tree.reserve(root)
    a = tree.expand(root, 0.9)
    tree.reserve(root)
    tree.expand(root, 0.1)
    # ranks root 0.5, a 1.0, b 0.0; visits 2, 1, 1; total 4; prior 1/3
    scores = [0.5 + (1 / 3) * 2 / 3, 1.0 + (1 / 3) * 2 / 2, 0.0 + (1 / 3) * 2 / 2]
    assert max(range(3), key=scores.__getitem__) == 1 and tree.select() is a
    assert Tree(FlatPuct(0.0)).policy.c_puct == 0.0


def _lockstep(problem, budget, rng):
    """One search driven by FlatPuct(1.0); the seed source must pick the same node each step."""
    seed_rule = priority_selection().compile(PRIORITY_SEED)
    reference = FlatPuct(1.0)
    tree = Tree(reference)
    start = problem.root()
    tree.add_root(start.value, start.held_out, None, start.payload, key=rng.getrandbits(32))
    for _ in range(budget):
        expected = reference.select(tree)
        assert seed_rule.select(tree) is expected
        tree.reserve(expected)
        made = problem.expand(expected, random.Random(tree.child_key(expected)))
        # Random priors: FlatPuct ignores them at exponent 0, and so must the seed source.
        tree.expand(expected, made.value, made.held_out, rng.choice([None, rng.random()]), made.payload)
    return tree


def test_seed_source_picks_the_same_node_as_flat_puct_at_every_step():
    rng = random.Random(0)
    for family in (SOURCE, TARGET):
        for instance in range(6):
            tree = _lockstep(family.problem(instance), 60, rng)
            assert len(tree.nodes) == 61


def test_seed_source_and_flat_puct_give_identical_searches():
    for family in (SOURCE, TARGET):
        for instance in range(5):
            a = run_inner(PRIORITY_SEED, family, instance, 3, 60)
            b = run_inner(FlatPuct(1.0), family, instance, 3, 60)
            assert a.curve == b.curve and a.detail["nodes"] == b.detail["nodes"] == 61


def test_inner_search_is_deterministic_in_its_arguments():
    a = run_inner(FlatPuct(0.5), "landscape-target", 17, 4, 60)
    assert run_inner(FlatPuct(0.5), "landscape-target", 17, 4, 60) == a
    assert run_inner(FlatPuct(0.5), "landscape-target", 17, 5, 60).curve != a.curve
    assert run_inner(FlatPuct(0.5), "landscape-target", 18, 4, 60).curve != a.curve
    assert len(a.curve) == 61 and a.rollouts == 60 and a.final == a.curve[-1]


def test_a_failing_policy_is_an_outcome_not_a_crash():
    class Raises:
        def select(self, tree):
            raise RuntimeError("boom")

    out = run_inner(Raises(), SOURCE, 0, 0, 10)
    assert "RuntimeError: boom" in out.detail["error"] and auc(out) == 0.0 and out.rollouts == 0
    out = run_inner(Pick(0), SOURCE, 0, 0, 3)
    assert not out.failed and out.rollouts == 3


def test_priority_faults_score_minus_inf_and_are_counted():
    # Raises at visits == 1 (every fresh child): those nodes lose, the run goes on.
    rule = PrioritySelection(lambda rank, visits, total, prior, depth, n: rank + 1.0 / (visits - 1.0))
    out = run_inner(rule, SOURCE, 2, 0, 20)
    assert not out.failed and out.detail["faults"] > 0 and out.rollouts == 20


def test_invalid_inputs_to_run_inner_are_config_errors():
    with pytest.raises(ConfigError, match="rejected by the gate"):
        run_inner("def priority(rank, visits, total, prior, depth, n_nodes):\n    return rank / visits\n",
                  SOURCE, 0, 0, 5)
    with pytest.raises(ConfigError, match="unknown inner domain"):
        run_inner(FlatPuct(), "landscape-nowhere", 0, 0, 5)
    with pytest.raises(ConfigError, match="budget"):
        run_inner(FlatPuct(), SOURCE, 0, 0, 0)


def test_rewards_on_a_constructed_curve():
    out = MetaOutcome((0.1, 0.3, 0.2, 0.5), 0.5, 3)
    assert auc(out) == pytest.approx((0.1 + 0.3 + 0.3 + 0.5) / 4)
    assert final_reward(out) == 0.5
    assert rollouts_to(0.3)(out) == 0.5  # reached at sweep 1
    assert rollouts_to(0.1)(out) == 1.0  # the root already reaches it
    assert rollouts_to(0.9)(out) == 0.0
    failed = MetaOutcome((0.9,), 0.9, 0, {"error": "policy raised"})
    assert auc(failed) == final_reward(failed) == rollouts_to(0.1)(failed) == 0.0
    assert reward_named("rollouts_to:0.3")(out) == 0.5 and reward_named("auc") is auc
    with pytest.raises(ConfigError):
        reward_named("median")
