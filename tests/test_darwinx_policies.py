"""DarwinX's decision slots are reachable from config: built-in rules by name with parameters,
checked by ``rsi validate``, and used by the run."""

from __future__ import annotations

import pytest
from _runs import of, run
from test_darwinx import SPLITS, scenario, version

from algorithms.darwinx import configured_policies
from algorithms.slots import ExploreOrBestLineage
from rsi.config import load_config
from rsi.driver.cli import main

TABLE = {"splits": SPLITS, "scores": {
    "v0": {"t1": 0.2, "t2": 0.2, "t3": 0.2, "x1": 0.1},
    "v1": {"t1": 0.5, "t2": 0.2, "t3": 0.2, "x1": 0.4},
    "v2": {"t1": 0.0, "t2": 0.9, "t3": 0.9},
    "v3": {"t1": 0.5, "t2": 0.6, "t3": 0.2, "x1": 0.8}}}
EDITS = [version("v1"), version("v3"), version("v2"), version("v0")]


def parents(tmp_path, algorithm):
    decisions, _, records = run(scenario(tmp_path, TABLE, EDITS, {"max_steps": 4, "merge_every": 0, **algorithm}))
    names = {d["snapshot_id"]: records.get_snapshot(d["snapshot_id"]).text("VERSION").strip()
             for d in decisions if d["kind"] in ("seed", "screen")}
    return [names[d["parent_id"]] for d in of(decisions, "screen")]


def parent_rule(tmp_path, algorithm):
    """The parent rule a run of this config would use, resolved from the config file as a run does."""
    config = scenario(tmp_path, TABLE, EDITS, {"max_steps": 4, "merge_every": 0, **algorithm})
    return configured_policies(load_config(config).algo_params)["parent_selection"]


def test_a_configured_parent_rule_is_the_one_the_run_uses(tmp_path, ray_session):
    # Always exploit: after v1 (+0.3) and v3 (+0.7 over the seed, built on v1) are admitted,
    # every later parent is the best lineage. Always explore with the same seed draws differently.
    exploit_cfg = {"policies": {"parent_selection": {"rule": "explore_or_best_lineage", "exploration_probability": 0.0}}}
    exploit = parents(tmp_path / "a", exploit_cfg)
    assert exploit == ["v0", "v1", "v3"]
    explore = parents(tmp_path / "c", {"exploration_probability": 0.0, "policies": {
        "parent_selection": {"rule": "explore_or_best_lineage", "exploration_probability": 1.0}}})
    assert explore != exploit, "the configured policy overrides exploration_probability"
    narrowed = parents(tmp_path / "e", {"exploration_probability": 1.0, "explore_top": 0.0})
    assert narrowed == exploit, "exploring only the best share (here: the best lineage) exploits"
    # The run draws its parents with the rule its config resolves to (above: two rules, two
    # draws), so configs resolving to the exploiting rule run as it does.
    rule = parent_rule(tmp_path / "f", exploit_cfg)
    assert rule == ExploreOrBestLineage(exploration_probability=0.0, explore_top=1.0)
    assert parent_rule(tmp_path / "b", {"exploration_probability": 0.0}) == rule, \
        "the rule by name equals the paper's rule with the same parameter"
    unset = parent_rule(tmp_path / "d", {"exploration_probability": 0.0, "explore_top": 0.5, "policies": {
        "parent_selection": {"rule": "explore_or_best_lineage"}}})
    assert unset == ExploreOrBestLineage(exploration_probability=0.0, explore_top=0.5), \
        "a rule named without its parameters takes the algorithm's"
    assert parent_rule(tmp_path / "g", {"exploration_probability": 0.3, "policies": {
        "parent_selection": {"rule": "explore_or_best_lineage", "exploration_probability": 0.9}}}) \
        == ExploreOrBestLineage(exploration_probability=0.9, explore_top=1.0), "the rule's own parameter wins"


@pytest.mark.parametrize("policies, needle", [
    ("{parent_selection: {rule: nope}}", "unknown rule 'nope'; valid: explore_or_best_lineage"),
    ("{acceptance: {rule: preserve_and_extend, strict: 1}}", "unknown parameter 'strict'"),
    ("{parent_selection: {rule: explore_or_best_lineage, exploration_probability: 1.5}}", "in [0, 1]"),
    ("{records: {rule: x}}", "'records' is machine-level and not evolvable"),
    ("{node_selection: {rule: x}}", "inner-search slot"),
    ("{promotion: highest_train_mean}", "algorithm.policies.promotion: Input should be a valid dictionary"),
])
def test_bad_policies_exit_2_at_validate(tmp_path, capsys, policies, needle):
    config = scenario(tmp_path, TABLE, EDITS, {"max_steps": 1})
    assert main(["validate", str(config), "--algorithm.policies", policies]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1, err
