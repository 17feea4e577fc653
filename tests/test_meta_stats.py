"""Outer-loop statistics on constructed data: the paired gate's edges, validation, transfer."""

import math

import numpy as np
import pytest

from algorithms.meta.stats import meta_validate, paired_gate, required_holdout, transfer_ratio


def test_paired_gate_accepts_a_gain_two_standard_errors_clear():
    gains = np.array([0.02, 0.04] * 50)  # mean 0.03, sd 0.01005, se 0.001005
    result = paired_gate(np.zeros(100), gains)
    assert result.accepted and result.n == 100 and result.wins == 100 and result.losses == 0
    assert result.mean_gain == pytest.approx(0.03) and result.z == pytest.approx(0.03 / result.se)


def test_paired_gate_edges():
    base = np.full(4, 0.5)
    # mean 0.1, sd 0.11547, se 0.057735: z = 1.732 < 2 -> rejected; accepted at z_gate 1.7
    cand = base + np.array([0.0, 0.2, 0.0, 0.2])
    assert not paired_gate(base, cand).accepted
    assert paired_gate(base, cand, z_gate=1.7).accepted
    # either side of the boundary mean == z_gate * se
    z = paired_gate(base, cand).z
    assert paired_gate(base, cand, z_gate=z - 1e-9).accepted
    assert not paired_gate(base, cand, z_gate=z + 1e-9).accepted
    # identical gains, zero se: accepted with infinite z; no gain at all: rejected
    same = paired_gate(base, base + 0.01)
    assert same.accepted and same.se == 0.0 and same.z == math.inf
    tie = paired_gate(base, base)
    assert not tie.accepted and tie.z == 0.0 and tie.wins == tie.losses == 0
    # a significant loss is never accepted; one pair has unknown se
    assert not paired_gate(base, base - 0.1).accepted
    single = paired_gate([0.1], [0.9])
    assert not single.accepted and single.se == math.inf
    with pytest.raises(ValueError):
        paired_gate([0.1, 0.2], [0.1])


def test_required_holdout_reflects_the_seed_lesson():
    # paired sd 0.05 and a hoped-for gain 0.02: 25 instances at z=2; a 9-instance gate is far too small
    assert required_holdout(0.05, 0.02) == 25
    assert required_holdout(0.06, 0.01) == 144
    with pytest.raises(ValueError):
        required_holdout(0.05, 0.0)


def _family(values):
    return {(i, 0): v for i, v in enumerate(values)}


def test_meta_validate_pairs_by_instance_and_seed():
    before = {"source": _family([0.5, 0.6, 0.7]), "target": _family([0.2, 0.2, 0.2])}
    after = {"source": _family([0.6, 0.6, 0.9]), "target": _family([0.25, 0.15, 0.2])}
    report = meta_validate(before, after)
    src, tgt = report["source"], report["target"]
    assert (src.n, src.wins, src.losses) == (3, 2, 0)
    assert src.before == pytest.approx(0.6) and src.after == pytest.approx(0.7) and src.gain == pytest.approx(0.1)
    assert src.sd == pytest.approx(np.std([0.1, 0.0, 0.2], ddof=1))
    assert (tgt.wins, tgt.losses) == (1, 1) and tgt.gain == pytest.approx(0.0)
    assert transfer_ratio(report, "source", "target") == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="paired"):
        meta_validate({"source": _family([0.5])}, {"source": {(5, 0): 0.5}})


def test_transfer_ratio_is_none_without_a_source_gain():
    flat = meta_validate({"s": _family([0.5, 0.5]), "t": _family([0.1, 0.2])},
                         {"s": _family([0.5, 0.5]), "t": _family([0.3, 0.4])})
    assert transfer_ratio(flat, "s", "t") is None
    report = meta_validate({"s": _family([0.5, 0.5]), "t": _family([0.1, 0.2])},
                           {"s": _family([0.6, 0.6]), "t": _family([0.05, 0.15])})
    assert transfer_ratio(report, "s", "t") == pytest.approx(-0.5)
