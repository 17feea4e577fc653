"""DarwinX's gate at its edges: every comparison against TOLERANCE exactly at the boundary, the
fields a GateFigures carries, and the rounding of the reported uncertainty. Each test was written
against a mutant ``perf/mutation.py darwinx-gate`` found alive; values are worked out by hand."""

from __future__ import annotations

from algorithms.darwinx.gate_stats import gate_figures, paired_uncertainty, screen_passes, solved_set
from algorithms.slots import TOLERANCE


def test_solved_set_includes_scores_within_tolerance_of_the_threshold_and_the_edge_itself():
    edge = 1.0 - TOLERANCE  # exactly threshold - TOLERANCE: solved (>=, not >)
    means = {"full": 1.0, "within": 1.0 - TOLERANCE / 10, "edge": edge, "below": 1.0 - 1e-9, "zero": 0.0}
    assert solved_set(means, 1.0) == {"full", "within", "edge"}
    assert solved_set({"a": 0.5, "b": 0.25}, 0.5) == {"a"}
    assert solved_set({}, 1.0) == set()


def test_an_invariant_task_at_exactly_threshold_minus_tolerance_is_not_lost():
    primary = {"a": 1.0, "b": 1.0}
    cand = {"a": 1.0 - TOLERANCE, "b": 1.0 - 1e-9}
    f = gate_figures(cand, primary, primary, {"a", "b"}, 1.0, 0.5)
    assert f.lost_invariant == ("b",)


def test_gate_figures_carry_the_tolerance_they_were_judged_with():
    primary = {"a": 0.5}
    f = gate_figures({"a": 0.75}, primary, primary, set(), 1.0, 0.25)
    assert (f.gain, f.regression_mass, f.regression_tolerance, f.lost_invariant) == (0.25, 0.0, 0.25, ())


def test_lost_invariant_names_only_tasks_the_candidate_was_measured_on_sorted():
    primary = {"z": 1.0, "a": 1.0, "m": 1.0}
    cand = {"z": 0.0, "a": 0.0, "m": 1.0}
    f = gate_figures(cand, primary, primary, {"z", "a", "m", "unmeasured"}, 1.0, 0.0)
    assert f.lost_invariant == ("a", "z") and f.regression_mass == 2.0 and f.gain == -2.0


def test_screen_improvement_must_exceed_tolerance_strictly():
    parent = {"a": 0.5, "b": 0.5}
    # a gain of exactly TOLERANCE is a tie, not an improvement
    edge = {"a": 0.5 + TOLERANCE, "b": 0.5}
    assert edge["a"] - parent["a"] <= TOLERANCE
    ok, gain, regression = screen_passes(edge, parent, parent, 1.0)
    assert ok is False and regression == 0.0


def test_screen_regression_may_equal_tolerance_plus_slack_exactly():
    # regression 1e-12 against tolerance 0.0: 0.0 + TOLERANCE == 1e-12, within (<=, not <)
    parent = {"a": 1e-12, "b": 0.5}
    cand = {"a": 0.0, "b": 1.0}
    assert screen_passes(cand, parent, parent, 0.0) == (True, 0.5 - 1e-12, 1e-12)
    assert screen_passes({"a": 0.0, "b": 1.0}, {"a": 2e-12, "b": 0.5}, {"a": 2e-12, "b": 0.5}, 0.0)[0] is False


def test_a_difference_of_exactly_tolerance_is_a_tie_either_way():
    parent = {"up": 0.0, "down": 1e-12, "win": 0.0, "loss": 0.5}
    cand = {"up": 1e-12, "down": 0.0, "win": 0.5, "loss": 0.0}
    u = paired_uncertainty(cand, parent)
    assert (u["wins"], u["losses"]) == (1, 1)


def test_default_seed_is_zero():
    cand = {f"t{i}": v for i, v in enumerate([0.123456789, 0.987654321, 0.5555555, 0.3141592653, 0.2718281828])}
    parent = {t: 0.5 for t in cand}
    default = paired_uncertainty(cand, parent)
    assert default == paired_uncertainty(cand, parent, seed=0)
    assert default["bootstrap_gain_95"] != paired_uncertainty(cand, parent, seed=1)["bootstrap_gain_95"]
    # numpy's seeded PCG64 stream, recorded, rounded to 6 places (an interval end with more
    # decimals: a rounding to 7 would show)
    assert default == {"wins": 2, "losses": 3, "sign_test_p": 1.0, "bootstrap_gain_95": [-1.437602, 1.141975]}


def test_sign_test_p_is_rounded_to_six_places():
    # 10 wins, no loss: 2 / 2^10 = 0.001953125 -> 0.001953
    u = paired_uncertainty({f"t{i}": 1.0 for i in range(10)}, {f"t{i}": 0.0 for i in range(10)})
    assert u == {"wins": 10, "losses": 0, "sign_test_p": 0.001953, "bootstrap_gain_95": [10.0, 10.0]}
