"""DarwinX's ``Candidate``: an archive record of one measured candidate, admitted or not,
with what it measured.

Plain records (JSON-ready) go into prompts, ``archive.jsonl`` and the ``promote`` decision;
the Snapshot itself stays beside them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from algorithms.slots import Entry, Member
from rsi.snapshot import Snapshot


@dataclass
class Candidate:
    index: int
    snapshot: Snapshot
    step: int
    kind: str  # seed | mutation | recombination
    parent_id: str | None = None
    donor_id: str | None = None  # a recombination's donor
    graft_id: str | None = None  # the member a mutation grafted from (``graft_probability``)
    level: str = "seed"  # seed | screen | confirm
    admitted: bool = False
    means: dict[str, float] = field(default_factory=dict)  # full-pool confirm means
    screen_means: dict[str, float] = field(default_factory=dict)
    solved: set[str] = field(default_factory=set)
    invariant: set[str] = field(default_factory=set)
    lineage_gain: float = 0.0
    gain: float | None = None
    regression_mass: float | None = None
    reply: str = ""
    learning: str = ""
    trace_refs: dict[str, list[str]] = field(default_factory=dict)
    island: int = 0  # the lineage it was proposed in (``islands.py``); the seed's is 0

    @property
    def snapshot_id(self) -> str:
        return self.snapshot.snapshot_id

    @property
    def train_mean(self) -> float:
        return sum(self.means.values()) / len(self.means) if self.means else 0.0

    def member(self) -> Member:
        return Member(self.snapshot_id, self.train_mean, self.lineage_gain, confirmed=self.admitted)

    def entry(self) -> Entry:
        return Entry(self.snapshot_id, frozenset(self.solved), self.train_mean)

    def record(self) -> dict:
        return {
            "index": self.index,
            "snapshot_id": self.snapshot_id,
            "parent_id": self.parent_id,
            "donor_id": self.donor_id,
            "graft_id": self.graft_id,
            "step": self.step,
            "kind": self.kind,
            "level": self.level,
            "admitted": self.admitted,
            "train_mean": self.train_mean,
            "lineage_gain": self.lineage_gain,
            "gain": self.gain,
            "regression_mass": self.regression_mass,
            "solved": sorted(self.solved),
            "invariant": sorted(self.invariant),
            "means": self.means,
            "screen_means": self.screen_means,
            "reply": self.reply,
            "learning": self.learning,
            "trace_refs": self.trace_refs,
            "island": self.island,
        }

    @classmethod
    def from_record(cls, rec: dict, snapshot: Snapshot) -> Candidate:
        c = cls(index=rec["index"], snapshot=snapshot, step=rec["step"], kind=rec["kind"])
        for key in (
            "parent_id",
            "donor_id",
            "level",
            "admitted",
            "lineage_gain",
            "gain",
            "regression_mass",
            "means",
            "screen_means",
            "reply",
            "learning",
            "trace_refs",
        ):
            setattr(c, key, rec[key])
        c.solved, c.invariant = set(rec["solved"]), set(rec["invariant"])
        c.island = rec.get("island", 0)  # records written before islands existed
        c.graft_id = rec.get("graft_id")  # ... and before grafts
        return c


def common_ancestor(a: Candidate, b: Candidate, by_id: dict[str, Candidate]) -> Candidate:
    """Lowest common ancestor along ``parent_id`` links (donor links are not ancestry)."""
    seen = set()
    node: Candidate | None = a
    while node is not None:
        seen.add(node.snapshot_id)
        node = by_id.get(node.parent_id) if node.parent_id else None
    node = b
    while node is not None:
        if node.snapshot_id in seen:
            return node
        node = by_id.get(node.parent_id) if node.parent_id else None
    raise ValueError(f"{a.snapshot_id} and {b.snapshot_id} share no ancestor")
