"""``evaluate``: no evolution. Measures the target as it is on train and dev; the runner then
measures test once. Useful before any search, and as the baseline row of a study."""

from __future__ import annotations

from pydantic import Field

from rsi.algorithm import Algorithm, AlgorithmParams
from rsi.results import ScoreMatrix
from rsi.snapshot import Snapshot


class EvaluateParams(AlgorithmParams):
    trials: int = Field(1, ge=1, le=100, description="repetitions per task (avg@k)")


class Evaluate(Algorithm):
    Params = EvaluateParams
    params: EvaluateParams

    def seed(self) -> None:
        """The whole algorithm: the target as given, measured on train and dev."""
        seed = self.ctx.seed_snapshot
        self.decide("seed", seed.snapshot_id, None, reason="target as given", reason_code="seed")
        for split in ("train", "dev"):
            if not self.ctx.evaluator.split_ids(split):
                continue
            table = self.ctx.evaluator.evaluate(
                seed, split, trials=self.params.trials, salt=f"evaluate/{split}", label=f"{split}"
            )
            m = ScoreMatrix.from_table(table)
            self.decide(
                "measure",
                seed.snapshot_id,
                None,
                reason=f"{split} mean {m.mean():.4f}",
                reason_code="measured",
                split=split,
                mean=m.mean(),
                tasks=len(m.task_ids),
                trials=self.params.trials,
            )

    def done(self) -> bool:
        return True  # no steps: nothing is evolved

    def finish(self) -> Snapshot:
        return self.promote(self.ctx.seed_snapshot, "evaluate promotes the seed", reason_code="seed_as_given")
