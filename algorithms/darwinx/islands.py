"""Islands: lineages that DarwinX keeps apart, side by side and after a stall.

A long search can find its best member early and then spend the rest of its budget editing
the neighbours of it and of its ancestors, none of which ever gains again (goal 2 of the
bin-packing study: one seed found its best at step 260 of 1500). Two remedies, alone or together:

- ``islands`` N > 1 searches N lineages side by side, as FunSearch does: step s edits a parent
  drawn from lane ``(s - 1) mod N`` (its island's members and the seed), so each lineage gets
  every N-th step and none is ever left. A run is then about as good as its best lineage.
- ``restart_after`` K > 0: once a lane's island has not raised its best train mean in K of
  its own steps (K x N steps of the run), that lane starts a new island from the seed, so its
  next edits explore a lineage that owes nothing to the stalled one.
- ``restart_from: best`` (with N > 1): the new island starts instead from the best admitted
  member of the other islands (its *founder*), as FunSearch resets its weaker islands, so a
  stalled lane's steps go on to edit the best lineage with their own draws; a lane whose island
  holds the run's best member is never restarted this way.

Nothing is thrown away: every island stays in the archive, promotion still chooses among all
confirmed members, and merges may pair members of any islands (the only exchange between them).
A lane is a position in the rotation; an island is a lineage, numbered in order of creation
(lane i starts with island i; a restart takes the next free number).

Lanes and restarts read only the step number and the train means the gates measured, and draw
no random numbers, so with one lane a run is step for step the run without restarts until its
first restart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from algorithms.slots import TOLERANCE


@dataclass
class Islands:
    restart_after: int  # steps without a rise before a lane starts a new island; 0: never
    count: int = 1  # lanes searched side by side
    current: list[int] = field(default_factory=list)  # each lane's island
    best_mean: list[float] = field(default_factory=list)  # each lane's island's best train mean
    best_step: list[int] = field(default_factory=list)  # the step at which it last rose (or began)
    founder: list[str | None] = field(default_factory=list)  # the member from another island it began from

    def __post_init__(self):
        if not self.current:
            self.current = list(range(self.count))
            self.best_mean = [0.0] * self.count
            self.best_step = [0] * self.count
        if not self.founder:
            self.founder = [None] * len(self.current)

    def lane(self, step: int) -> int:
        return (step - 1) % self.count

    def own_step(self, step: int) -> int:
        """``step``'s number among its lane's steps: cadences such as ``merge_every`` count these,
        so that every lane merges as often (with two lanes and merges every 6 steps of the run,
        all merges would fall in lane 1)."""
        return (step - 1) // self.count + 1

    def holds(self, candidate, lane: int) -> bool:
        """Whether ``candidate`` is a possible parent in ``lane``: the seed belongs to every island,
        an island's founder to its island."""
        return (
            candidate.kind == "seed"
            or candidate.island == self.current[lane]
            or candidate.snapshot_id == self.founder[lane]
        )

    def start(self, seed_mean: float) -> None:
        self.best_mean = [seed_mean] * self.count

    def observe(self, candidates) -> None:
        """Take in a round's confirmed candidates (any order): rises of the lanes' best."""
        for c in candidates:
            if not c.admitted or c.island not in self.current:
                continue
            i = self.current.index(c.island)
            if c.train_mean > self.best_mean[i] + TOLERANCE:
                self.best_mean[i], self.best_step[i] = c.train_mean, max(self.best_step[i], c.step)

    def due(self, step: int, max_steps: int) -> list[int]:
        """The lanes whose island has gone ``restart_after`` of its own steps (every ``count``-th
        step is a lane's) without a rise, unless no step is left."""
        if not self.restart_after or step >= max_steps:
            return []
        wait = self.restart_after * self.count
        return [i for i in range(self.count) if step - self.best_step[i] >= wait]

    def restart(self, lane: int, step: int, start_mean: float, founder: str | None = None) -> None:
        """A new island in ``lane``, from the seed or from ``founder`` (whose train mean is
        ``start_mean``, the level the new island must rise above)."""
        self.current[lane] = max(self.current) + 1  # the newest island is always some lane's
        self.best_mean[lane], self.best_step[lane] = start_mean, step
        self.founder[lane] = founder

    def wait(self, lane: int, step: int) -> None:
        """Count ``lane``'s stall again from ``step`` (a lane that was due but had nothing
        better to start from)."""
        self.best_step[lane] = step

    def state(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state(cls, restart_after: int, count: int, state: dict | None) -> Islands:
        """Saved runs from before lanes (one island, scalar fields) resume in their island."""
        if not state:
            return cls(restart_after, count)
        lanes = {k: v if isinstance(v, list) else [v] for k, v in state.items() if k in _LANE_FIELDS}
        return cls(restart_after, len(lanes["current"]), **lanes)


_LANE_FIELDS = ("current", "best_mean", "best_step", "founder")
