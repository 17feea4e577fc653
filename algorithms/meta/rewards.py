"""What one inner search is worth to the outer loop.

A selection rule cannot produce better answers, only find them sooner: under a fixed budget the
final values of two rules barely differ, so the default meta-reward is the area under the
best-so-far held-out curve (``auc``). ``curve[0]`` is the root (sweep 0), ``curve[t]`` the
held-out value of the incumbent after sweep ``t``. An inner search whose policy failed
(``detail["error"]``) is worth 0, like any rollout that did not end ``ok``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rsi.errors import ConfigError


@dataclass(frozen=True)
class MetaOutcome:
    curve: tuple
    final: float
    #: Inner rollouts (expansions) actually run.
    rollouts: int
    #: For people and reflectors: tree summary, policy faults, the error of a failed run.
    detail: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return "error" in self.detail


Reward = Callable[[MetaOutcome], float]


def best_so_far(curve) -> np.ndarray:
    return np.maximum.accumulate(np.asarray(curve, dtype=float)) if len(curve) else np.zeros(0)


def auc(outcome: MetaOutcome) -> float:
    """Mean of the best-so-far held-out curve."""
    if outcome.failed or not outcome.curve:
        return 0.0
    return float(best_so_far(outcome.curve).mean())


def final_reward(outcome: MetaOutcome) -> float:
    """The last held-out value: for when only the end quality matters."""
    return 0.0 if outcome.failed else float(outcome.final)


def rollouts_to(target: float) -> Reward:
    """Time to quality: ``1 / (1 + first sweep whose best-so-far reaches target)``, 0 if never."""

    def reward(outcome: MetaOutcome) -> float:
        if outcome.failed:
            return 0.0
        reached = np.nonzero(best_so_far(outcome.curve) >= target)[0]
        return 1.0 / (1.0 + int(reached[0])) if reached.size else 0.0

    reward.__name__ = f"rollouts_to({target:g})"
    return reward


REWARDS = {"auc": auc, "final": final_reward}


def reward_named(name: str) -> Reward:
    """``auc``, ``final`` or ``rollouts_to:<target>`` (the config spelling)."""
    if name.startswith("rollouts_to:"):
        try:
            return rollouts_to(float(name.partition(":")[2]))
        except ValueError:
            raise ConfigError(f"meta-reward {name!r}: the target after ':' must be a number") from None
    if name not in REWARDS:
        raise ConfigError(f"unknown meta-reward {name!r}; valid: auc, final, rollouts_to:<target>")
    return REWARDS[name]
