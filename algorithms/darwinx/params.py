"""DarwinX parameters (docs/algorithms/darwinx.md): defaults, ranges and cross-field rules."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rsi.algorithm import AlgorithmParams


class DarwinXParams(AlgorithmParams):
    max_steps: int = Field(
        10, ge=0, description="edit attempts; mutation, recombination and invalid edits each use one"
    )
    screen_size: int = Field(3, ge=1, description="random screen subset size; at most the train size")
    screen_samples: int = Field(1, ge=1, description="repetitions per screen task")
    confirm_samples: int = Field(3, ge=1, description="repetitions per confirm task; at least screen_samples")
    screen_regression_tolerance: float = Field(1.0, ge=0, description="regression mass allowed at screen")
    regression_tolerance: float = Field(0.0, ge=0, description="regression mass allowed at confirm")
    regression_gain_ratio: float = Field(
        0.0,
        ge=0,
        description="a confirm that regresses is admitted only when its gain is at least this multiple of its "
        "regression mass; 0 disables",
    )
    decline_known_screens: bool = Field(
        False,
        description="a candidate that passes the screen with the exact screen scores of a version already "
        "measured (not its parent or donor) is not confirmed: it behaves as that version",
    )
    solved_threshold: float = Field(1.0, gt=0, le=1, description="avg@k at which a task counts solved, in (0, 1]")
    exploration_probability: float = Field(0.5, ge=0, le=1, description="probability of a uniform parent choice")
    explore_top: float = Field(
        1.0,
        ge=0,
        le=1,
        description="share of the members, best lineages first, that a uniform parent choice draws from "
        "(at least one; 1: all)",
    )
    islands: int = Field(
        1,
        ge=1,
        le=64,
        description="lineages searched side by side: step s draws its parent from island (s - 1) mod N and "
        "the seed only; promotion sees every island, merges may pair any two",
    )
    restart_after: int = Field(
        0,
        ge=0,
        description="steps without a rise of an island's best train mean before its lane starts a new island "
        "from the seed (parents then come from it alone; promotion still sees every island); 0: never",
    )
    restart_from: Literal["seed", "best"] = Field(
        "seed",
        description="what a restarted lane's new island starts from: the seed, or (islands > 1) the best admitted "
        "member of the other islands, as FunSearch resets its weaker islands (a lane holding the run's best is "
        "then never restarted)",
    )
    merge_every: int = Field(3, ge=0, description="recombination cadence in steps (of each island's lane); 0 disables")
    duplicate_retries: int = Field(
        3,
        ge=0,
        description="an edit that reproduces a version already measured (or proposed earlier in the round) "
        "is asked again, of the same parent, up to this many times before it is declined and uses its step",
    )
    graft_probability: float = Field(
        0.0,
        ge=0,
        le=1,
        description="probability that a mutation also gets another admitted member of its island as a donor: "
        "the offline mutator then grafts one of the donor's expressions into the parent (subtree crossover), a "
        "model worker finds it read-only beside the checkout; the gates still measure against the parent alone",
    )
    promote_on_dev: int = Field(
        0,
        ge=0,
        le=64,
        description="at the end, measure the confirmed members with the K highest train means on the dev split "
        "and promote the best there (ties: the higher train mean), so the final choice is made on instances no "
        "gate saw; 0: promote the highest train mean",
    )
    seed: int = Field(42, description="RNG for parent choice and screen subsets (not model sampling)")
    max_evidence_chars: int = Field(24000, ge=500, description="per evidence block; newest kept")
    parallel_candidates: int = Field(
        1, ge=1, le=64, description="proposals per round, measured concurrently, decided in candidate order"
    )
    policies: dict[str, dict] = Field(
        default_factory=dict,
        description="decision slots by built-in rule: {parent_selection|screen_sampling|acceptance|merge_pairing|"
        "promotion: {rule: NAME, PARAM: VALUE}}; unset slots keep the paper's rule "
        "(parent_selection then uses exploration_probability)",
    )

    @model_validator(mode="after")
    def _policies(self):
        from algorithms.slots import build_rule
        from rsi.errors import ConfigError

        for name, spec in self.policies.items():
            if name == "node_selection":
                raise ValueError("node_selection is meta-evolve's inner-search slot, not a DarwinX decision")
            try:
                build_rule(name, spec)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return self

    @model_validator(mode="after")
    def _samples(self):
        if self.confirm_samples < self.screen_samples:
            raise ValueError(
                f"confirm_samples ({self.confirm_samples}) must be >= screen_samples ({self.screen_samples})"
            )
        return self

    @model_validator(mode="after")
    def _promote_on_dev(self):
        if self.promote_on_dev and "promotion" in self.policies:
            raise ValueError(
                "promote_on_dev chooses the promoted member on dev; it replaces the promotion slot, so set one of them"
            )
        return self

    @model_validator(mode="after")
    def _restart_from(self):
        if self.restart_from == "best" and (self.islands < 2 or not self.restart_after):
            raise ValueError(
                "restart_from: best needs islands >= 2 and restart_after > 0 (a lane restarts from another island's best)"
            )
        return self
