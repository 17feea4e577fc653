"""DarwinX's gate arithmetic on constructed data, in process: the paired uncertainty figure
(wins, losses, sign test, bootstrap interval) and the per-task gate figures. Expected values
are worked out by hand here, never by calling the function under test."""

from __future__ import annotations

from math import comb

import pytest

from algorithms.darwinx.gate_stats import gate_figures, paired_uncertainty, screen_passes


def scores(*values: float) -> dict[str, float]:
    return {f"t{i}": v for i, v in enumerate(values)}


# ---- paired_uncertainty ----------------------------------------------------------------------
def test_wins_losses_and_ties_are_counted_per_task():
    # per-task differences: +0.5 +0.25 +0.125 +1.0 +0.75 | -0.25 | 0 and 1e-13 (ties, under 1e-12)
    parent = scores(0.0, 0.5, 0.5, 0.0, 0.25, 0.5, 0.5, 0.5)
    cand = scores(0.5, 0.75, 0.625, 1.0, 1.0, 0.25, 0.5, 0.5 + 1e-13)
    u = paired_uncertainty(cand, parent)
    assert (u["wins"], u["losses"]) == (5, 1)
    # two-sided sign test over the 6 untied tasks: 2 * P(X <= 1), X ~ Binomial(6, 1/2)
    #   = 2 * (1 + 6) / 64 = 14 / 64 (ties excluded: counting them would give n = 8)
    assert u["sign_test_p"] == 0.21875


@pytest.mark.parametrize("wins,losses,expected", [
    (0, 3, 2 * 1 / 8),                  # 2 * C(3,0) / 2^3
    (8, 0, 2 * 1 / 256),                # 2 * C(8,0) / 2^8 = 0.0078125
    (7, 2, 2 * (1 + 9 + 36) / 512),     # 2 * (C(9,0) + C(9,1) + C(9,2)) / 2^9 = 0.1796875
    (3, 3, 1.0),                        # 2 * 42 / 64 > 1: capped at 1
])
def test_sign_test_p_is_the_two_sided_binomial_tail(wins, losses, expected):
    parent = scores(*[0.5] * (wins + losses + 2))
    cand = scores(*([0.75] * wins + [0.25] * losses + [0.5, 0.5]))
    u = paired_uncertainty(cand, parent)
    assert (u["wins"], u["losses"]) == (wins, losses)
    assert u["sign_test_p"] == pytest.approx(expected, abs=1e-6)  # reported rounded to 6 places


def test_binomial_tail_by_summation_matches_the_hand_figures():
    """The hand figures above, summed term by term from the binomial pmf."""
    def tail(n, k):
        return sum(comb(n, i) * 0.5**n for i in range(k + 1))
    assert 2 * tail(6, 1) == 0.21875 and 2 * tail(9, 2) == 0.1796875


def test_tasks_are_paired_by_id_not_by_dict_order():
    cand = {"a": 1.0, "b": 0.0}
    parent = {"b": 0.0, "a": 1.0}  # same scores, other insertion order: every task ties
    u = paired_uncertainty(cand, parent)
    assert (u["wins"], u["losses"], u["sign_test_p"]) == (0, 0, 1.0)
    assert u["bootstrap_gain_95"] == [0.0, 0.0]


def test_all_ties_give_p_one_and_a_zero_interval():
    u = paired_uncertainty(scores(0.5, 1.0, 0.0), scores(0.5, 1.0, 0.0), seed=3)
    assert u == {"wins": 0, "losses": 0, "sign_test_p": 1.0, "bootstrap_gain_95": [0.0, 0.0]}
    assert paired_uncertainty({}, {}) == {"wins": 0, "losses": 0, "sign_test_p": 1.0, "bootstrap_gain_95": [0.0, 0.0]}


def test_bootstrap_interval_is_of_the_summed_gain():
    # every task gains 0.25: every resample of 4 tasks sums to exactly 1.0 (a mean would be 0.25)
    u = paired_uncertainty(scores(0.75, 0.75, 0.5, 1.0), scores(0.5, 0.5, 0.25, 0.75))
    assert u["bootstrap_gain_95"] == [1.0, 1.0]
    # differences (1, 0): a resampled sum is 0, 1 or 2 with probability 1/4, 1/2, 1/4, so with
    # 2000 resamples (about 500 zeros and 500 twos) the 2.5th and 97.5th percentiles are 0 and 2;
    # resampling without replacement would always give 1
    for seed in (0, 1, 7):
        assert paired_uncertainty(scores(1.0, 0.5), scores(0.0, 0.5), seed=seed)["bootstrap_gain_95"] == [0.0, 2.0]


def test_bootstrap_interval_contains_the_observed_sum_and_is_seeded():
    parent = scores(*[0.5] * 10)
    cand = scores(0.9317, 0.7129, 0.6203, 0.5, 0.2741, 0.8866, 0.4913, 0.9734, 0.3352, 0.7588)
    observed = sum(cand[t] - parent[t] for t in cand)
    assert observed == pytest.approx(1.4843)
    u = paired_uncertainty(cand, parent, seed=5)
    lo, hi = u["bootstrap_gain_95"]
    assert lo < observed < hi
    # a resampled sum of 10 differences lies between 10 * min and 10 * max difference
    assert 10 * (0.2741 - 0.5) <= lo and hi <= 10 * (0.9734 - 0.5)
    assert paired_uncertainty(cand, parent, seed=5) == u, "same seed, same interval"
    intervals = {tuple(paired_uncertainty(cand, parent, seed=s)["bootstrap_gain_95"]) for s in range(8)}
    assert len(intervals) == 8, "irregular differences: every seed resamples to its own interval"
    # 6 wins, 3 losses, 1 tie: p = 2 * (C(9,0) + C(9,1) + C(9,2) + C(9,3)) / 2^9 = 260 / 512
    assert (u["wins"], u["losses"]) == (6, 3) and u["sign_test_p"] == pytest.approx(0.5078125, abs=1e-6)
    # numpy's seeded PCG64 stream, recorded: a change here means the reported figure changed
    assert [lo, hi] == [0.034783, 2.95091]


# ---- gate figures ----------------------------------------------------------------------------
def test_gate_figures_gain_against_primary_regression_against_reference():
    primary = scores(1.0, 0.0, 0.0)
    donor = scores(0.0, 1.0, 0.5)
    reference = {t: max(primary[t], donor[t]) for t in primary}
    cand = scores(1.0, 1.0, 0.25)
    f = gate_figures(cand, primary, reference, {"t0", "t1"}, 1.0, 0.0)
    assert (f.gain, f.regression_mass, f.lost_invariant) == (1.25, 0.25, ())
    # the same child against the primary alone shows no regression: the donor's t2 is what it lost
    assert gate_figures(cand, primary, primary, {"t0", "t1"}, 1.0, 0.0).regression_mass == 0.0
    lost = gate_figures(scores(1.0, 0.75, 0.5), primary, reference, {"t0", "t1"}, 1.0, 0.5)
    assert lost.lost_invariant == ("t1",) and lost.regression_mass == 0.25


def test_screen_needs_an_improvement_and_regression_within_tolerance():
    parent = scores(0.5, 0.5, 0.5)
    assert screen_passes(scores(0.5, 0.25, 0.5), parent, parent, 1.0) == (False, -0.25, 0.25), "nothing improved"
    assert screen_passes(scores(1.0, 0.0, 0.5), parent, parent, 0.25) == (False, 0.0, 0.5), "over tolerance"
    assert screen_passes(scores(1.0, 0.25, 0.5), parent, parent, 0.25) == (True, 0.25, 0.25), "at tolerance"
