"""Decision slots: the paper's rules as defaults, resolve_slot's refusals, seed sources."""

import random

import pytest

from algorithms.meta.seeds import seed_source
from algorithms.meta.tree import FlatPuct, Tree
from algorithms.meta.values import policy_source
from algorithms.slots import (
    SLOTS,
    Entry,
    ExploreOrBestLineage,
    GateFigures,
    HighestTrainMean,
    Member,
    NodeSelection,
    ParentSelection,
    PreserveAndExtend,
    UniformScreen,
    UnionPairing,
    resolve_slot,
)
from rsi.errors import ConfigError

MEMBERS = [Member("a", 0.5, 0.2), Member("b", 0.9, 0.4), Member("c", 0.95, 0.9, confirmed=False),
           Member("d", 0.1, 0.4), Member("e", 0.3, 1.0, selectable=False)]


def test_parent_selection_exploits_best_lineage_with_ties_to_earlier():
    rule = ExploreOrBestLineage(exploration_probability=0.0)
    assert rule.select(MEMBERS, random.Random(0)).member_id == "b"  # b ties d on 0.4 and is earlier


def test_parent_selection_explores_uniformly_among_eligible_members_only():
    rule = ExploreOrBestLineage(exploration_probability=1.0)
    rng = random.Random(1)
    picked = {rule.select(MEMBERS, rng).member_id for _ in range(200)}
    assert picked == {"a", "b", "d"}


@pytest.mark.parametrize("top, allowed", [
    (0.5, {"b", "d"}),  # 2 of the 3 eligible (a 0.2, b 0.4, d 0.4): the best lineages, ties in order
    (0.34, {"b", "d"}),  # ceil(0.34 x 3) = 2
    (0.2, {"b"}),  # at least one: the first best lineage
    (0.0, {"b"}),
])
def test_exploration_can_be_narrowed_to_the_best_share_of_the_members(top, allowed):
    rule = ExploreOrBestLineage(exploration_probability=1.0, explore_top=top)
    rng = random.Random(1)
    assert {rule.select(MEMBERS, rng).member_id for _ in range(200)} == allowed


def test_exploring_all_members_draws_exactly_as_before_the_share_existed():
    """explore_top 1 is the default: a run without it makes the same choices, draw for draw."""
    rule, rng, ref = ExploreOrBestLineage(0.6, explore_top=1.0), random.Random(5), random.Random(5)
    pool = [m for m in MEMBERS if m.confirmed and m.selectable]
    for _ in range(100):
        got = rule.select(MEMBERS, rng)
        expected = pool[ref.randrange(len(pool))] if ref.random() < 0.6 else MEMBERS[1]
        assert got is expected


def test_screen_sampling_draws_distinct_tasks_and_rejects_bad_sizes():
    got = UniformScreen().sample([f"t{i}" for i in range(10)], 4, random.Random(3))
    assert len(got) == len(set(got)) == 4
    with pytest.raises(ValueError):
        UniformScreen().sample(["t0"], 2, random.Random(0))


@pytest.mark.parametrize("figures, accepted", [
    (GateFigures(0.5, 0.0), True),
    (GateFigures(1e-13, 0.0), False),  # within the 1e-12 tolerance of zero
    (GateFigures(0.5, 0.2, 0.2), True),
    (GateFigures(0.5, 0.2 + 1e-9, 0.2), False),
    (GateFigures(0.5, 0.0, 0.0, ("t3",)), False),
    (GateFigures(-0.1, 0.0), False),
])
def test_acceptance_is_the_preserve_and_extend_gate(figures, accepted):
    assert PreserveAndExtend().accept(figures) is accepted


def test_merge_pairing_orders_complementary_pairs_by_union_each_once():
    entries = [Entry("a", frozenset({"t1", "t2"}), 0.4), Entry("b", frozenset({"t3"}), 0.6),
               Entry("c", frozenset({"t1"}), 0.1), Entry("d", frozenset({"t4", "t5", "t6"}), 0.2)]
    pairs = [(p.entry_id, d.entry_id) for p, d in UnionPairing().pairs(entries)]
    # a-c is not complementary (c's solved set is inside a's); primary = higher train mean.
    assert pairs == [("a", "d"), ("b", "d"), ("d", "c"), ("b", "a"), ("b", "c")]


def test_promotion_takes_highest_confirmed_train_mean():
    assert HighestTrainMean().choose(MEMBERS).member_id == "b"  # c is higher but unconfirmed


def test_resolve_slot_defaults_and_structural_check():
    assert isinstance(resolve_slot("node_selection"), FlatPuct)
    assert isinstance(resolve_slot("parent_selection"), ParentSelection)
    rule = ExploreOrBestLineage(0.1)
    assert resolve_slot("parent_selection", rule) is rule
    with pytest.raises(ConfigError, match="does not implement Acceptance"):
        resolve_slot("acceptance", rule)


@pytest.mark.parametrize("name", ["executor", "records", "evaluator"])
def test_machine_level_slots_are_refused(name):
    with pytest.raises(ConfigError, match="machine-level"):
        resolve_slot(name)


def test_unknown_slot_names_the_valid_ones():
    with pytest.raises(ConfigError, match="valid: node_selection"):
        resolve_slot("staleness")


def _built(slot):
    kind = policy_source(slot)
    return kind.compile(kind.initial())


def test_seed_sources_decide_like_the_defaults():
    rng_a, rng_b = random.Random(7), random.Random(7)
    parent = _built("parent_selection")
    for _ in range(50):
        assert parent.select(MEMBERS, rng_a) is ExploreOrBestLineage().select(MEMBERS, rng_b)
    ids = [f"t{i}" for i in range(9)]
    assert _built("screen_sampling").sample(ids, 4, random.Random(2)) == UniformScreen().sample(ids, 4, random.Random(2))
    for figures in (GateFigures(0.5, 0.0), GateFigures(0.5, 0.1), GateFigures(0.5, 0.0, 0.0, ("t",))):
        assert _built("acceptance").accept(figures) == PreserveAndExtend().accept(figures)
    entries = [Entry("a", frozenset({"t1", "t2"}), 0.4), Entry("b", frozenset({"t3"}), 0.6)]
    assert _built("merge_pairing").pairs(entries) == UnionPairing().pairs(entries)
    assert _built("promotion").choose(MEMBERS) is HighestTrainMean().choose(MEMBERS)
    assert isinstance(_built("node_selection"), NodeSelection)
    assert set(SLOTS) == {"node_selection", "parent_selection", "screen_sampling", "acceptance",
                          "merge_pairing", "promotion"}


@pytest.mark.parametrize("name", sorted(SLOTS))
def test_each_seed_source_is_its_default_rule_written_out(name):
    """The seed is generated from the default rule, never a second copy of it."""
    import inspect
    import textwrap

    default = type(SLOTS[name].make_default())
    source = seed_source(name)
    body = textwrap.dedent(inspect.getsource(default)).split(f"class {default.__name__}:", 1)[1]
    assert f"class Policy:{body}" in source
    assert seed_source(name) is source  # generated once per process


def test_the_node_selection_seed_selects_like_flat_puct_with_rated_priors():
    tree = Tree(policy=None)
    tree.add_root(0.2)
    for parent, value, prior in ((0, 0.5, 0.9), (0, 0.1, None), (1, 0.7, 0.05), (2, 0.3, 2.0)):
        tree.reserve(tree.nodes[parent])
        tree.expand(tree.nodes[parent], value, prior=prior)
    seed = _built("node_selection")
    for _ in range(12):
        node = seed.select(tree)
        assert node is FlatPuct(1.0).select(tree)
        tree.reserve(node)
        tree.expand(node, 0.4, prior=0.3)
