"""ADAS parameters (docs/algorithms/adas.md): defaults and ranges."""

from __future__ import annotations

from pydantic import Field

from rsi.algorithm import AlgorithmParams


class ADASParams(AlgorithmParams):
    max_steps: int = Field(
        10,
        ge=1,
        le=10_000,
        description="designs to try; one step = one design (with its reflections) + one dev evaluation",
    )
    num_reflections: int = Field(
        2, ge=0, le=10, description="review passes in the same checkout before the one evaluation; 0 skips"
    )
    max_evidence_chars: int = Field(
        30_000,
        ge=500,
        le=1_000_000,
        description="per evidence block; the archive and the component rules are cut independently",
    )
