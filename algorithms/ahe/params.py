"""AHE parameters (docs/algorithms/ahe.md): defaults and ranges. Unknown keys (such as the removed
``mode``) are errors, not silently ignored."""

from __future__ import annotations

from pydantic import Field

from rsi.algorithm import AlgorithmParams


class AHEParams(AlgorithmParams):
    max_steps: int = Field(
        10, ge=1, le=10_000, description="rounds; one round = one edit + one candidate evaluation on train"
    )
    target_score: float = Field(1.0, gt=0, le=1, description="stop early once the train mean reaches this, in (0, 1]")
    use_debugger: bool = Field(True, description="false: the Evolve Agent sees raw traces instead of debugger reports")
    debugger_max_tasks: int = Field(90, ge=1, le=10_000, description="traces diagnosed per round, failures first")
    max_evidence_chars: int = Field(30_000, ge=1_000, le=1_000_000, description="evidence budget per role prompt")
