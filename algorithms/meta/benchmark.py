"""Meta benchmarks: the outer loop's tasks are whole inner search problems.

A task is one ``(family, instance id, seed)``; the ``policy`` target runs one inner search on
it and scores its meta-reward. The three splits are the three sets the seed's protocol needs,
drawn from disjoint instance-id ranges so no two ever share an instance:

- ``train``: the gate hold-out, SOURCE family. Every candidate is measured here paired by
  instance and seed against the incumbent. It defaults to hundreds of pairs: the seed's gate
  holding out 9 instances committed a rule that loses 88/109 on its own family, because the
  standard error of 9 paired differences is wider than the whole available gain.
- ``dev``: the oracle set, SOURCE family, fresh instances: a gain must be confirmed here before
  the candidate becomes the incumbent (a second opinion on *different* numbers).
- ``test``: validation instances of both families, disjoint from everything the outer loop saw;
  TARGET is never seen by the outer loop at all. The runner measures it once; the algorithm
  adds the seed rule and the c-sweep there for the validation report.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

from pydantic import Field, field_validator, model_validator

from algorithms.meta.inner import Domain, domain_named
from algorithms.meta.jailed import HARNESS, support_files
from algorithms.meta.rewards import Reward, reward_named
from rsi.benchmark import Benchmark, BenchmarkParams, Score, Task
from rsi.errors import ConfigError

if TYPE_CHECKING:
    from algorithms.meta.binpack import BinpackDomain
    from rsi.sandbox import Limits

#: First instance id of each split. Sizes are capped below the gaps, so the ranges never
#: overlap, and resizing the hold-out never changes which instances the oracle or validation use.
BASES = {"train": 0, "dev": 100_000, "test": 200_000}
MAX_INSTANCES = 50_000
REPO = Path(__file__).resolve().parents[2]


class MetaParams(BenchmarkParams):
    holdout: int = Field(
        200,
        ge=2,
        le=MAX_INSTANCES,
        description="gate hold-out (train): SOURCE instances, each with `seeds` inner seeds",
    )
    oracle: int = Field(
        200, ge=2, le=MAX_INSTANCES, description="confirm set (dev): fresh SOURCE instances a gain must hold on"
    )
    validation: int = Field(
        200, ge=2, le=MAX_INSTANCES, description="validation instances per family (test), disjoint from both"
    )
    seeds: int = Field(1, ge=1, le=64, description="inner seeds per instance (pairs = instances x seeds)")
    budget: int = Field(60, ge=1, le=100_000, description="expansions per inner search")
    reward: str = Field("auc", description="meta-reward: auc | final_reward | rollouts_to:<target value>")

    @field_validator("reward")
    @classmethod
    def _known_reward(cls, v: str) -> str:
        v = "final" if v == "final_reward" else v
        try:
            reward_named(v)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return v


class MetaBenchmark(Benchmark):
    """Splits of ``(family, instance, seed)`` tasks; subclasses name the two families.

    The jailed script that runs a rule (``algorithms/meta/jail_harness.py``) and the pure
    modules it loads are this suite's harness files: read-only in the jail, and part of the
    rollout cache's fingerprint."""

    Params: ClassVar[type[MetaParams]] = MetaParams
    params: MetaParams
    harness: Path | None = HARNESS
    harness_support: ClassVar[tuple[Path, ...]] = support_files()
    source: ClassVar[str]
    target: ClassVar[str]

    def _split(self, split: str) -> list[Task]:
        p = self.params
        if split == "train":
            return self._tasks(self.source, "source", BASES["train"], p.holdout)
        if split == "dev":
            return self._tasks(self.source, "source", BASES["dev"], p.oracle)
        return self._tasks(self.source, "source", BASES["test"], p.validation) + self._tasks(
            self.target, "target", BASES["test"], p.validation
        )

    def _tasks(self, family: str, role: str, base: int, n: int) -> list[Task]:
        return [
            Task(
                f"{family}/{base + i}/{s}",
                {"domain": family, "instance": base + i, "seed": s},
                {"dataset": family, "role": role},
            )
            for i in range(n)
            for s in range(self.params.seeds)
        ]

    def domain(self, name: str, limits: Limits | None = None) -> Domain:
        """The inner domain a task names, sized by this benchmark's parameters. ``limits``: the
        rollout jail's, for a domain that runs programs (bin packing's nodes)."""
        return domain_named(name)

    def reward(self) -> Reward:
        # Built on use, not stored: ``rollouts_to`` is a closure and the benchmark must pickle.
        return reward_named(self.params.reward)

    def score(self, task: Task, output: dict, trial: int) -> Score:
        """The policy target computes the meta-reward itself; this reads it back from an output."""
        value = output.get("score") if isinstance(output, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return Score(min(max(float(value), 0.0), 1.0))
        return Score(0.0)

    def report(self, table, split: str) -> list[dict]:
        rows = super().report(table, split)
        roles = {self.source: "source", self.target: "target"}
        return [
            {
                "family": r["dataset"],
                "role": roles.get(r["dataset"], "-"),
                "pairs": r["rollouts"],
                "mean_meta_reward": r["mean_score"],
                "failed": r["failed"],
            }
            for r in rows
        ]

    def family_of(self, task: Task) -> str:
        return task.meta["dataset"]

    def describe(self) -> dict[str, Any]:
        p = self.params
        return {
            "source": self.source,
            "target": self.target,
            "holdout_pairs": p.holdout * p.seeds,
            "oracle_pairs": p.oracle * p.seeds,
            "validation_pairs_per_family": p.validation * p.seeds,
            "budget": p.budget,
            "reward": p.reward,
        }


class LandscapeBenchmark(MetaBenchmark):
    """Stage 0: synthetic landscapes, milliseconds per inner search (``algorithms.meta.landscape``).

    SOURCE is smooth and greedy-friendly; TARGET has more dimensions, peaks, failures, dead
    ends and noise, and the best flat-PUCT constant differs between them.
    """

    name = "meta_landscape"
    source = "landscape-source"
    target = "landscape-target"


class BinpackParams(MetaParams):
    holdout: int = Field(40, ge=2, le=MAX_INSTANCES, description="gate hold-out (train): OR instances")
    oracle: int = Field(24, ge=2, le=MAX_INSTANCES, description="confirm set (dev): fresh OR instances")
    validation: int = Field(24, ge=2, le=MAX_INSTANCES, description="validation instances per family (test)")
    budget: int = Field(16, ge=1, le=100_000, description="expansions (mutated programs) per inner search")
    items: int = Field(60, ge=10, le=5000, description="items per list of a SOURCE (OR) instance")
    target_items: int = Field(100, ge=10, le=5000, description="items per list of a TARGET (Weibull) instance")
    lists: int = Field(2, ge=1, le=20, description="train lists and held-out lists per instance (each)")
    redraws: int = Field(
        0,
        ge=0,
        le=64,
        description="draw a mutation again (up to this many times) when it packs the train lists as its parent does",
    )
    expansion: Literal["plain", "recorded"] = Field(
        "plain",
        description="how the mutator checks its edits before a node packs: 'plain' compares results on "
        "synthetic inputs; 'recorded' ranks the bins of calls recorded on the family (probe: order), as the "
        "DarwinX bin-packing configs run it, so far fewer children pack exactly as their parent",
    )
    data_thresholds: float = Field(
        0.0,
        ge=0,
        le=1,
        description="with expansion 'recorded': share of new conditions thresholded between two neighbouring "
        "values of the recorded calls",
    )

    @model_validator(mode="after")
    def _data_thresholds_need_recorded_calls(self):
        if self.data_thresholds > 0 and self.expansion != "recorded":
            raise ValueError("data_thresholds draws from recorded calls: set expansion: recorded, or data_thresholds 0")
        return self


class BinpackSearchBenchmark(MetaBenchmark):
    """Stage 1: tree search over real online bin-packing heuristics (``algorithms.meta.binpack``).

    An expansion is an offline mutation of the parent program; a node's value is its measured
    packing quality. SOURCE is the OR family, TARGET the Weibull family with longer lists.
    Each node's program packs in the rollout jail: seconds per inner search, so the default sets
    are tens, not hundreds, of pairs.
    """

    name = "meta_binpack"
    Params = BinpackParams
    #: An inner search runs the mutator from best fit and packs with the bin-packing suite's
    #: instances and skeleton: an edit to any of them changes a reward, so the cache key holds them.
    code_dependencies = (
        *(
            REPO / "rsi" / "workers" / f
            for f in ("mutator.py", "_mutations.py", "_probe.py", "_pyedit.py", "_merge.py", "probe_harness.py")
        ),
        REPO / "benchmarks" / "binpack",
        REPO / "targets" / "binpack_bestfit",
    )
    params: BinpackParams
    source = "binpack-or"
    target = "binpack-weibull"

    def domain(self, name: str, limits: Limits | None = None) -> Domain:
        p = self.params
        items = p.items if name == self.source else p.target_items
        from algorithms.meta.binpack import expansion  # loaded with the domain, on use

        base = cast("BinpackDomain", domain_named(name))  # both families of this suite are bin packing
        return dataclasses.replace(
            base,
            items=items,
            n_train=p.lists,
            n_held_out=p.lists,
            redraws=p.redraws,
            mutate=expansion(p.expansion, base.family, p.data_thresholds),
            limits=limits,
        )
