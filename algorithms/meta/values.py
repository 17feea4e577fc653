"""Slot value kinds: how the value of a decision slot is written, merged and compiled.

A value is what the outer search evolves; ``compile`` turns it into the object the engine
installs, or raises ``InvalidProposal``. ``validate_proposal`` is the one place proposals are
judged: an invalid one yields no candidate and the caller counts it (``invalid_proposals``);
nothing is ever silently replaced by a default.

| kind | value | gate |
| --- | --- | --- |
| ``ParamSlot(factory, params, bounds)`` | numeric constructor parameters | known names, within bounds |
| ``SourceSlot(initial, validate, build)`` | source text | ``validate`` and ``build`` must not raise |
| ``priority_selection()`` | ``def priority(...)`` source | narrow-face AST whitelist + finite grid |
| ``policy_source(slot)`` | ``class Policy`` source | four layers (``algorithms.meta.proposal_check``) |

The two source faces judge a proposal with their AST layers here and everything that runs it
(build, grid, smoke test) in the rollout jail: model-written source is never executed in the
driver. Their ``compile`` builds in this process, for trusted text only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from algorithms.meta.proposal_check import (
    FACE_ARGS,
    PRIORITY_FACE,
    PRIORITY_SEED,
    InvalidProposal,
    build_policy,
    build_priority,
    policy_face,
)
from algorithms.meta.seeds import seed_source
from algorithms.slots import slot as slot_spec


@dataclass(frozen=True)
class ParamSlot:
    """Numeric parameters of a policy class, e.g. ``ParamSlot(FlatPuct, {"c_puct": 1.0}, {"c_puct": (0, 4)})``.

    A proposal may name a subset of the parameters; the rest keep their initial values.
    """

    factory: Callable[..., Any]
    params: dict
    bounds: dict = field(default_factory=dict)
    description: str = ""

    def initial(self) -> dict:
        return dict(self.params)

    def check(self, value: Any) -> dict:
        if not isinstance(value, dict):
            raise InvalidProposal(f"a parameter proposal must be a mapping, got {type(value).__name__}")
        unknown = sorted(set(value) - set(self.params))
        if unknown:
            raise InvalidProposal(f"unknown parameter(s) {', '.join(unknown)}; valid: {', '.join(self.params)}")
        for name, v in value.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InvalidProposal(f"{name} = {v!r} is not a finite number")
            low, high = self.bounds.get(name, (-math.inf, math.inf))
            if not low <= v <= high:
                raise InvalidProposal(f"{name} = {v} is outside [{low}, {high}]")
        return self.initial() | value

    def compile(self, value: Any) -> Any:
        return self.factory(**self.check(value))

    def merge(self, proposals: list) -> tuple:
        """Union of proposals touching different parameters.

        Returns ``(merged, contradictions)``: ``contradictions`` maps each parameter that two
        proposals set to different values to those values, in order of appearance; such a
        parameter stays out of ``merged`` and is settled on hold-out by the caller.
        """
        seen: dict = {}
        for proposal in proposals:
            self.check(proposal)
            for name, v in proposal.items():
                if v not in seen.setdefault(name, []):
                    seen[name].append(v)
        contradictions = {k: v for k, v in seen.items() if len(v) > 1}
        merged = self.initial() | {k: v[0] for k, v in seen.items() if k not in contradictions}
        return merged, contradictions

    def render(self, value: dict) -> str:
        return "\n".join(f"{k} = {v!r}" for k, v in (self.initial() | value).items())

    def parse(self, text: str) -> dict:
        """``name = number`` lines (what ``render`` writes, and what a reflector is asked for)."""
        out = {}
        for line in text.strip().splitlines():
            name, sep, number = line.partition("=")
            try:
                out[name.strip()] = float(number)
            except ValueError:
                raise InvalidProposal(f"cannot read {line.strip()!r} as `name = number`") from None
            if not sep:
                raise InvalidProposal(f"cannot read {line.strip()!r} as `name = number`")
        return out

    def describe(self) -> str:
        bounds = ", ".join(f"{k} in {self.bounds.get(k, ('-inf', 'inf'))}" for k in self.params)
        return self.description or f"numeric parameters of {getattr(self.factory, '__name__', 'the policy')}: {bounds}"


@dataclass(frozen=True)
class SourceSlot:
    """Source text compiled by ``build``; ``validate`` raises on anything ``build`` must not see.

    ``check``, when set, judges a proposal without building it in this process:
    ``validate_proposal`` calls it instead of ``compile`` (the meta faces' check runs the rule in
    the rollout jail). ``compile`` always builds here, so it is for trusted text only.
    """

    initial_value: str
    validate: Callable[[str], None] | None = None
    build: Callable[[str], Any] | None = None
    description: str = ""
    check: Callable[[str], None] | None = None

    def initial(self) -> str:
        return self.initial_value

    def verify(self, value: Any) -> None:
        """Raise ``InvalidProposal`` unless ``value`` is acceptable (``check`` where set)."""
        if self.check is None:
            self.compile(value)
            return
        if not isinstance(value, str):
            raise InvalidProposal(f"a source proposal must be text, got {type(value).__name__}")
        if self.validate is not None:
            try:
                self.validate(value)
            except InvalidProposal:
                raise
            except Exception as exc:  # a user-supplied validate judging candidate text
                raise InvalidProposal(f"{type(exc).__name__}: {exc}") from None
        self.check(value)

    def compile(self, value: Any) -> Any:
        if not isinstance(value, str):
            raise InvalidProposal(f"a source proposal must be text, got {type(value).__name__}")
        try:
            if self.validate is not None:
                self.validate(value)
            return self.build(value) if self.build is not None else value
        except InvalidProposal:
            raise
        except Exception as exc:  # a user-supplied validate/build judging candidate text
            raise InvalidProposal(f"{type(exc).__name__}: {exc}") from None

    def render(self, value: str) -> str:
        return value

    def parse(self, text: str) -> str:
        return text

    def describe(self) -> str:
        return self.description


def _jailed(face: str, limits: Any) -> Callable[[str], None]:
    """The proposal check of ``face`` run in the rollout jail (``algorithms.meta.jailed``);
    ``limits``: a ``LimitsConfig``, an ``rsi.sandbox.Limits`` or None (the defaults)."""

    def check(source: str) -> None:
        from algorithms.meta.jailed import check_in_jail
        from rsi.sandbox import Limits

        lim = limits if limits is None or isinstance(limits, Limits) else Limits(**limits.model_dump())
        check_in_jail(source, face, lim)

    return check


def priority_selection(limits: Any = None) -> SourceSlot:
    """The tree search's narrow face: a scoring function wrapped by ``PrioritySelection``.
    Proposals are judged in the jail (``limits`` bound that run); ``compile`` builds in-process."""
    return SourceSlot(
        PRIORITY_SEED,
        build=build_priority,
        check=_jailed(PRIORITY_FACE, limits),
        description=(
            f"def priority({', '.join(FACE_ARGS)}) -> float: the node with the highest value is expanded next. "
            "rank in [0, 1] (1 = best value), visits = subtree visits, total = sum of visits over all nodes, "
            "prior sums to 1 over nodes (uniform when no node is rated), depth from the root, n_nodes = tree size. "
            "Allowed: arithmetic, comparisons, conditional expressions, local names, math and min/max/abs; "
            "no loops. Must be finite everywhere, including the root (visits = 0, total = 0)."
        ),
    )


def policy_source(slot: str, limits: Any = None) -> SourceSlot:
    """Any slot: the full source of a ``class Policy`` implementing the slot's Protocol.
    Proposals are judged in the jail (``limits`` bound that run); ``compile`` builds in-process."""
    spec = slot_spec(slot)
    return SourceSlot(
        seed_source(slot),
        build=lambda source: build_policy(source, slot),
        check=_jailed(policy_face(slot), limits),
        description=(
            f"the full source of `class Policy` implementing {spec.protocol.__name__}, constructible with no "
            "arguments. Imports: math, random, statistics, itertools, collections, functools, dataclasses, "
            "typing, enum, heapq, bisect, and the value types of algorithms.slots / algorithms.meta.tree. "
            "No dunder names or attributes, no exec/eval/open/getattr/setattr/type/super/compile, no global."
        ),
    )


def validate_proposal(kind: Any, value: Any) -> tuple:
    """``(ok, reason)``: the one place a proposal is judged. ``kind`` is a slot value kind; one
    with a ``verify`` judges without running the proposal here (the meta faces: in the jail)."""
    try:
        verify = getattr(kind, "verify", None)
        (verify or kind.compile)(value)
    except InvalidProposal as exc:
        return False, str(exc)
    return True, ""
