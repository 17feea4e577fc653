"""Meta-evolve parameters (docs/algorithms/meta.md): defaults, ranges, and the keys the loop owns."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rsi.algorithm import AlgorithmParams

#: Keys a user might bring from an inner-search config; the meta loop owns what they name.
OWNED = {
    "strategy": "the search strategy is the meta loop itself (propose, gate, confirm)",
    "run": "how one inner search runs is the policy target's job (target.kind: policy)",
    "reward": "the meta-reward is a benchmark parameter: set benchmark.reward",
    "meta_reward": "the meta-reward is a benchmark parameter: set benchmark.reward",
    "agent": "proposals come from `proposer` (symbolic, or llm with algorithm.worker)",
}


class MetaEvolveParams(AlgorithmParams):
    max_rounds: int = Field(30, ge=0, le=10_000, description="outer rounds (propose, gate, confirm)")
    candidates_per_round: int = Field(
        4, ge=1, le=64, description="proposals per round; all valid ones are gated concurrently"
    )
    z_gate: float = Field(
        2.0, ge=0.0, le=100.0, description="a gain is accepted only if positive and >= z_gate standard errors"
    )
    confirm: bool = Field(
        True,
        description="confirm a gate pass on the oracle set (fresh instances) before it "
        "becomes the incumbent; false admits on the gate alone, as the seed's "
        "loop did (kept to reproduce its fail-open lesson)",
    )
    proposer: Literal["symbolic", "llm"] = Field(
        "symbolic", description="symbolic: offline mutator of the priority rule; llm: a reflector (needs a worker)"
    )
    slot: str = Field(
        "node_selection",
        description="the decision slot evolved (the meta benchmarks run tree searches, so node_selection)",
    )
    traces_in_prompt: int = Field(3, ge=0, le=32, description="inner search curves shown to the llm reflector")
    max_evidence_chars: int = Field(12000, ge=500, description="character budget of each evidence block")
    c_sweep: list[float] = Field(
        [0.0, 0.25, 0.5, 1.0, 2.0],
        min_length=1,
        max_length=16,
        description="flat-PUCT constants measured on validation as the hand-tuned family",
    )
    plot: bool = Field(True, description="write meta_report.png (needs the `plot` extra: matplotlib)")

    @model_validator(mode="before")
    @classmethod
    def _owned_keys(cls, data):
        if isinstance(data, dict):
            for key, why in OWNED.items():
                if key in data:
                    raise ValueError(f"algorithm.{key} is not a meta-evolve parameter: {why}")
        return data

    @model_validator(mode="after")
    def _sweep_values(self):
        bad = [c for c in self.c_sweep if not 0.0 <= c <= 100.0]
        if bad:
            raise ValueError(f"c_sweep values must lie in [0, 100], got {bad}")
        return self
