"""Decision slots: the engine's decisions as injectable objects, the paper's rule by default.

Each slot is a runtime-checkable Protocol, so an evolved policy (``algorithms.meta``) is checked
structurally after it is built, and ``None`` always means today's behaviour. The value types the
policies see are small frozen dataclasses, so DarwinX builds them from its own records in one
line and a policy written as source text can import them (they are on the gate's whitelist).

| slot | call | default (the paper's rule) |
| --- | --- | --- |
| node_selection | ``select(tree) -> node`` | flat PUCT, ``c_puct=1`` (``algorithms.meta.tree``) |
| parent_selection | ``select(members, rng) -> member`` | explore with probability p, else best lineage gain |
| screen_sampling | ``sample(task_ids, k, rng) -> list`` | ``k`` distinct tasks uniformly at random |
| acceptance | ``accept(figures) -> bool`` | preserve-and-extend gate |
| merge_pairing | ``pairs(entries) -> [(primary, donor)]`` | complementary pairs by union of solved sets |
| promotion | ``choose(members) -> member`` | highest train mean among confirmed members |

``rng`` is always a ``random.Random`` owned by the caller (DarwinX's own ``algorithm.seed``), so a
policy never holds hidden global randomness and a resumed run draws the same sequence.
"""

from __future__ import annotations

import importlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rsi.errors import ConfigError

#: Float comparisons of gate figures use this tolerance (docs/algorithms/darwinx.md).
TOLERANCE = 1e-12


@dataclass(frozen=True)
class Member:
    """A population member as parent selection and promotion see it."""

    member_id: str
    train_mean: float = 0.0
    #: Cumulative gain along the lineage (sum of confirmed gains from the seed to this member).
    lineage_gain: float = 0.0
    confirmed: bool = True
    #: False for members the algorithm has retired from parenthood (e.g. exhausted).
    selectable: bool = True


@dataclass(frozen=True)
class Entry:
    """An archive entry measured at the confirm level (admitted or not), for merge pairing."""

    entry_id: str
    solved: frozenset = frozenset()
    train_mean: float = 0.0


@dataclass(frozen=True)
class GateFigures:
    """What the confirm gate decides on; ``lost_invariant`` names inherited solved tasks that fell."""

    gain: float
    regression_mass: float
    regression_tolerance: float = 0.0
    lost_invariant: tuple = ()


# ---- the Protocols ---------------------------------------------------------------------------
@runtime_checkable
class NodeSelection(Protocol):
    def select(self, tree: Any) -> Any: ...


@runtime_checkable
class ParentSelection(Protocol):
    def select(self, members: Sequence[Member], rng: random.Random) -> Member: ...


@runtime_checkable
class ScreenSampling(Protocol):
    def sample(self, task_ids: Sequence[str], k: int, rng: random.Random) -> list: ...


@runtime_checkable
class Acceptance(Protocol):
    def accept(self, figures: GateFigures) -> bool: ...


@runtime_checkable
class MergePairing(Protocol):
    def pairs(self, entries: Sequence[Entry]) -> list: ...


@runtime_checkable
class Promotion(Protocol):
    def choose(self, members: Sequence[Member]) -> Member: ...


# ---- the paper's rules -----------------------------------------------------------------------
def eligible(members: Sequence[Member]) -> list[Member]:
    """Members that may become parents: confirmed and not retired."""
    return [m for m in members if m.confirmed and m.selectable]


def _first_max(items: Sequence, key) -> Any:
    """The earliest item with the largest key: every tie in these rules goes to the earlier one."""
    best = items[0]
    for item in items[1:]:
        if key(item) > key(best):
            best = item
    return best


@dataclass(frozen=True)
class ExploreOrBestLineage:
    """DarwinX parent choice: uniform exploration, otherwise exploit the best lineage.

    ``explore_top`` narrows exploration to that share of the members, best lineages first (at
    least one): a long run's archive fills with early, weak members whose edits rarely reach
    past the best, and a share below 1 spends those draws on the strong ones instead. At 1 (the
    default) the draw is the paper's, number for number."""

    exploration_probability: float = 0.5
    explore_top: float = 1.0

    def select(self, members: Sequence[Member], rng: random.Random) -> Member:
        pool = eligible(members)
        if not pool:
            raise ValueError("parent selection needs at least one confirmed, selectable member")
        if rng.random() < self.exploration_probability:
            if self.explore_top < 1:
                ranked = sorted(pool, key=lambda m: -m.lineage_gain)  # stable: ties keep archive order
                pool = ranked[: max(1, math.ceil(self.explore_top * len(pool)))]
            return pool[rng.randrange(len(pool))]
        return _first_max(pool, key=lambda m: m.lineage_gain)


@dataclass(frozen=True)
class UniformScreen:
    """A random screen subset: no task is favoured, so the screen is an unbiased sample."""

    def sample(self, task_ids: Sequence[str], k: int, rng: random.Random) -> list:
        if not 0 < k <= len(task_ids):
            raise ValueError(f"screen size {k} must be in 1..{len(task_ids)}")
        return rng.sample(list(task_ids), k)


@dataclass(frozen=True)
class PreserveAndExtend:
    """Gain on the pool, no regression beyond tolerance, no inherited solved task lost."""

    def accept(self, figures: GateFigures) -> bool:
        return (
            figures.gain > TOLERANCE
            and figures.regression_mass <= figures.regression_tolerance + TOLERANCE
            and not figures.lost_invariant
        )


@dataclass(frozen=True)
class UnionPairing:
    """Complementary pairs (each solves a task the other does not), largest union first.

    Each unordered pair appears once; ties keep the order of ``entries``. In a pair the primary
    is the entry with the higher train mean (ties: the earlier), since a merge is measured
    against the primary and should extend the stronger version.
    """

    def pairs(self, entries: Sequence[Entry]) -> list:
        found = []
        for i, a in enumerate(entries):
            for b in entries[i + 1 :]:
                if a.solved - b.solved and b.solved - a.solved:
                    primary, donor = (b, a) if b.train_mean > a.train_mean else (a, b)
                    found.append((len(a.solved | b.solved), primary, donor))
        found.sort(key=lambda t: -t[0])  # stable: ties stay in entry order
        return [(p, d) for _, p, d in found]


@dataclass(frozen=True)
class HighestTrainMean:
    """Promote the confirmed member with the highest train mean (ties: the earlier)."""

    def choose(self, members: Sequence[Member]) -> Member:
        pool = [m for m in members if m.confirmed]
        if not pool:
            raise ValueError("promotion needs at least one confirmed member")
        return _first_max(pool, key=lambda m: m.train_mean)


def train_shortlist(members: Sequence[Member], k: int) -> list[Member]:
    """The ``k`` confirmed members with the highest train means, best first (ties: the earlier)."""
    pool = [m for m in members if m.confirmed]
    order = sorted(range(len(pool)), key=lambda i: (-pool[i].train_mean, i))
    return [pool[i] for i in order[:k]]


def best_held_out(shortlist: Sequence[Member], held_out: Mapping[str, float]) -> Member:
    """The shortlisted member with the highest held-out mean (``held_out``: member id -> mean);
    ties go to the higher train mean, then to the earlier in ``shortlist``. A train mean is
    measured on the instances every gate selected on, so it flatters the members that fitted them
    most; a held-out mean does not."""
    if not shortlist:
        raise ValueError("promotion needs at least one confirmed member")
    return _first_max(shortlist, key=lambda m: (held_out[m.member_id], m.train_mean))


# ---- registry --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Slot:
    name: str
    protocol: type
    default: str  # "module:attr", imported on first use

    def make_default(self) -> Any:
        module, _, attr = self.default.partition(":")
        return getattr(importlib.import_module(module), attr)()


SLOTS = {
    s.name: s
    for s in (
        Slot("node_selection", NodeSelection, "algorithms.meta.tree:FlatPuct"),
        Slot("parent_selection", ParentSelection, "algorithms.slots:ExploreOrBestLineage"),
        Slot("screen_sampling", ScreenSampling, "algorithms.slots:UniformScreen"),
        Slot("acceptance", Acceptance, "algorithms.slots:PreserveAndExtend"),
        Slot("merge_pairing", MergePairing, "algorithms.slots:UnionPairing"),
        Slot("promotion", Promotion, "algorithms.slots:HighestTrainMean"),
    )
}

#: Parts of the machine, not decisions: evolving them would let a candidate change how it is
#: measured or recorded (the "training code" of the analogy), so they are never slots.
MACHINE_SLOTS = ("executor", "records", "evaluator")


def slot(name: str) -> Slot:
    """The slot named ``name``; a name the engine cannot honour raises instead of being ignored."""
    if name in MACHINE_SLOTS:
        raise ConfigError(f"{name!r} is machine-level and not evolvable; decision slots: {', '.join(SLOTS)}")
    if name not in SLOTS:
        raise ConfigError(f"unknown decision slot {name!r}; valid: {', '.join(SLOTS)}")
    return SLOTS[name]


#: Built-in rules by the name a config gives them: ``{rule: NAME, PARAM: VALUE, ...}``.
RULES: dict[str, dict[str, type]] = {
    "parent_selection": {"explore_or_best_lineage": ExploreOrBestLineage},
    "screen_sampling": {"uniform": UniformScreen},
    "acceptance": {"preserve_and_extend": PreserveAndExtend},
    "merge_pairing": {"union": UnionPairing},
    "promotion": {"highest_train_mean": HighestTrainMean},
}


def build_rule(name: str, spec: dict) -> Any:
    """The policy a config names for slot ``name``: ``{rule: NAME, **params}`` -> an instance of
    that built-in rule. Unknown slots, rules and parameters raise ConfigError naming the valid
    ones (checked by ``rsi validate``, before anything starts)."""
    import dataclasses

    slot(name)
    rules = RULES.get(name, {})
    if not isinstance(spec, dict) or "rule" not in spec:
        raise ConfigError(f"policy for {name}: give {{rule: NAME, ...parameters}}; rules: {', '.join(rules)}")
    params = {k: v for k, v in spec.items() if k != "rule"}
    cls = rules.get(spec["rule"])
    if cls is None:
        raise ConfigError(f"policy for {name}: unknown rule {spec['rule']!r}; valid: {', '.join(rules) or 'none'}")
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise ConfigError(
            f"policy {name}.{spec['rule']}: unknown parameter {unknown[0]!r}; "
            f"valid: {', '.join(sorted(fields)) or 'none'}"
        )
    policy = cls(**params)
    for f in dataclasses.fields(cls):  # the rules' numeric parameters are probabilities
        value = getattr(policy, f.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ConfigError(f"policy {name}.{spec['rule']}: {f.name} must be a number in [0, 1], got {value!r}")
    return policy


def resolve_slot(name: str, value: Any = None) -> Any:
    """The policy object for ``name``: ``value`` itself after a structural check, or the default."""
    spec = slot(name)
    if value is None:
        return spec.make_default()
    if not isinstance(value, spec.protocol):
        raise ConfigError(
            f"value for slot {name!r} ({type(value).__name__}) does not implement {spec.protocol.__name__}"
        )
    return value
