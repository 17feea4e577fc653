"""Restarts into islands: what DarwinX does when its search has stopped moving.

A long search can find its best member early and then spend the rest of its budget editing
the neighbours of it and of its ancestors, none of which ever gains again (goal 2 of the
bin-packing study: one seed found its best at step 260 of 1500). With ``restart_after`` K,
once the current island's best train mean has not risen for K steps, a new island begins
from the seed: parents are drawn from its members (and the seed) only, so the next edits
explore a lineage that owes nothing to the stalled one. Nothing is thrown away: every island
stays in the archive, promotion still chooses among all confirmed members, and merges may
pair members of any islands.

The trigger reads only the train means the gates measured and consumes no random draws, so a
run is step for step the run without restarts until its first restart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from algorithms.slots import TOLERANCE


@dataclass
class Islands:
    restart_after: int  # steps without a rise before a new island; 0: never
    current: int = 0
    best_mean: float = 0.0  # the current island's best train mean (its seed's at its start)
    best_step: int = 0  # the step at which it last rose (the island's first step at its start)

    def holds(self, candidate) -> bool:
        """Whether ``candidate`` is a possible parent now: the seed belongs to every island."""
        return candidate.kind == "seed" or candidate.island == self.current

    def observe(self, candidates) -> None:
        """Take in a round's confirmed candidates (any order): a rise of the island's best."""
        for c in candidates:
            if c.admitted and c.island == self.current and c.train_mean > self.best_mean + TOLERANCE:
                self.best_mean, self.best_step = c.train_mean, max(self.best_step, c.step)

    def due(self, step: int, max_steps: int) -> bool:
        """A restart is due after ``restart_after`` steps without a rise, unless no step is left."""
        return bool(self.restart_after) and step - self.best_step >= self.restart_after and step < max_steps

    def restart(self, step: int, seed_mean: float) -> None:
        self.current += 1
        self.best_mean, self.best_step = seed_mean, step

    def state(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state(cls, restart_after: int, state: dict | None) -> Islands:
        """A saved run without islands (older records) resumes in island 0."""
        return cls(restart_after, **{k: v for k, v in (state or {}).items() if k != "restart_after"})
