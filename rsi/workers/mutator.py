"""Mutator: an offline variation operator for Python code. It is not a language model.

It lets every search run end to end without a model: an ``edit`` rewrites functions marked
with a ``# rsi: evolve`` comment line directly above their ``def`` by 1..``max_ops`` random
operators on the body's syntax tree (perturb a constant, swap an arithmetic or comparison
operator, swap an elementwise math function, insert a term built from the function's own
names, drop a term; with a positive weight, step every constant at once). Every result parses and differs from the input; with ``probe`` set, an
edit that gives the parent's results (or their order) on a few synthetic inputs is drawn again
(``_probe``), and with ``local_share`` that share of the edits must change the outcome of at
most ``local_decisions`` probe calls (a step that is small in what the function decides).
Arguments annotated as plain numbers beside an array are never the only names in
an inserted term or condition (it would be the same for every element). With ``ancestor`` and
``donor`` references, ``edit`` instead three-way merges the donor's changes into the checkout
(recombination); with a ``donor`` reference alone, the edit is one graft: an expression of the
donor's version of a marked function replaces one of the parent's (subtree crossover; the donor
is parsed, never run). Randomness is one seeded generator whose state travels through
``get_state``/``set_state``, so a resumed run draws the same edits.
"""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rsi.errors import WorkerError
from rsi.snapshot import RUNTIME_DIRS
from rsi.workers._merge import merge
from rsi.workers._mutations import OPERATORS, Mutations, scalar_args
from rsi.workers._probe import Comparison, Probe, ProbeMode, compare_many, is_pure, load_cases
from rsi.workers._pyedit import MARKER, Function, ModuleNames, clone, marked_functions, module_names, splice
from rsi.workers.base import Worker

__all__ = ["MutatorWorker", "merge"]

MAX_ATTEMPTS = 50  # whole-edit retries before reporting that no valid change was found
# Edits drawn and probed in one jailed process: starting the jail costs far more than probing
# (about 0.16 s against milliseconds), and near a good heuristic most draws are redrawn.
PROBE_BATCH = 8


class OperatorWeights(BaseModel):
    """Relative frequency of each operator; 0 switches one off."""

    model_config = ConfigDict(extra="forbid")
    perturb_constant: float = Field(3.0, ge=0, description="scale, shift, negate or reset a numeric literal")
    swap_operator: float = Field(1.0, ge=0, description="swap + - * / ** within sensible families")
    swap_compare: float = Field(1.0, ge=0, description="swap < <= > >= (and == !=)")
    swap_function: float = Field(1.0, ge=0, description="swap an elementwise numpy/math function, domain-guarded")
    insert_term: float = Field(2.0, ge=0, description="add a term, factor, step or np.where branch on names in scope")
    drop_term: float = Field(1.0, ge=0, description="replace an operation by one of its operands")
    jitter_constants: float = Field(
        0.0,
        ge=0,
        description="scale every numeric literal at once by its own small random factor (a joint step); off by "
        "default: on a stalled bin-packing member no such step improved it (perf/results/search-quality.md)",
    )
    rebuild_band: float = Field(
        0.0,
        ge=0,
        description="replace a returned value by a whole two-band rule on a difference of two names, "
        "np.where(x < t, k - x, -np.abs(x - c)) (the shape of the hand rules that reach the published level "
        "on Weibull bin packing); off by default, 4 in configs/binpack_hour.yaml",
    )
    step_threshold: float = Field(
        0.0,
        ge=0,
        description="move one threshold (a literal compared with, or subtracted from, a varying quantity) by "
        "1 to 3 units of a tenth of constant_scale; off by default",
    )

    @model_validator(mode="after")
    def _some_positive(self):
        if not any(getattr(self, op) > 0 for op in OPERATORS):
            raise ValueError("at least one operator weight must be positive")
        return self


@dataclass
class _Target:
    """One marked function in one file of the checkout."""

    path: str
    source: str
    tree: ast.Module
    fn: Function

    @property
    def label(self) -> str:
        return f"{self.path}:{self.fn.name}"

    @cached_property
    def text(self) -> str:
        """The function as ``ast.unparse`` writes it: an edit must change this."""
        return ast.unparse(self.fn)

    @cached_property
    def names(self) -> ModuleNames:
        return module_names(self.tree)


class MutatorWorker(Worker):
    """Random syntax-tree edits of marked functions, grafts from a donor and three-way merges;
    no model involved."""

    kind = "agent"
    offline = True

    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")
        type: Literal["mutator"]
        replicas: int = Field(1, ge=1, description="worker actors; each gets its own derived seed")
        max_ops: int = Field(3, ge=1, le=20, description="an edit applies 1..max_ops random operators")
        seed_offset: int = Field(
            0, ge=0, description="mixed into the run seed, to vary the edits without changing the run seed"
        )
        constant_scale: float = Field(
            10.0,
            gt=0,
            description="typical magnitude of the evolved code's quantities; new thresholds, "
            "penalties and length scales are drawn log-uniformly around it (bin packing with capacity 100: 10)",
        )
        data_thresholds: float = Field(
            0.0,
            ge=0,
            le=1,
            description="share of inserted conditions whose threshold is drawn halfway between two "
            "neighbouring values the compared quantity (an argument, or a difference of two) takes on the "
            "probe inputs, where a decision on recorded calls flips; needs probe_inputs. 0: every threshold "
            "is drawn around constant_scale",
        )
        local_share: float = Field(
            0.0,
            ge=0,
            le=1,
            description="share of edits that must be local: a drawn edit that changes the outcome (the "
            "first-ranked element with probe 'order', the result with 'equal') of more than local_decisions "
            "probe calls is drawn again. Near a good heuristic nearly every edit that moves many decisions "
            "is a large loss; needs a probe. 0: no bound",
        )
        local_decisions: int = Field(
            2, ge=0, description="most probe calls whose outcome a local edit may change (see local_share)"
        )
        max_nodes: int = Field(
            200,
            ge=20,
            description="size cap in syntax nodes: no edit grows a marked function past it (bloat "
            "control; a function already larger only gets edits and drops)",
        )
        weights: OperatorWeights = Field(default_factory=OperatorWeights, description="relative operator frequencies")
        probe: ProbeMode = Field(
            "equal",
            description="draw again when an edit is neutral on a cheap probe of synthetic inputs (pure "
            "expression functions only): 'equal' = same results as the parent, 'order' = results in the "
            "same order (for functions whose result is ranked or maximised, like a priority), 'off'",
        )
        probe_inputs: str | None = Field(
            None,
            description="JSON file in the checkout with example inputs for the probe: a list of objects mapping "
            "each argument name to a number or a list of numbers (recorded from real calls, they make the probe "
            "see the function's actual domain); unset, missing or unreadable: synthetic inputs around constant_scale",
        )

        @field_validator("probe", mode="before")
        @classmethod
        def _unquoted_off(cls, v):
            # YAML 1.1 reads a bare `off` (in a file or a --algorithm.worker.probe override) as false.
            return "off" if v is False else v

        @model_validator(mode="after")
        def _data_thresholds_need_recorded_calls(self):
            # Without recorded calls the option would do nothing, silently: say so at load time.
            if self.data_thresholds > 0 and (self.probe_inputs is None or self.probe == "off"):
                raise ValueError(
                    "data_thresholds draws thresholds from the recorded calls in probe_inputs: set "
                    "probe_inputs (with probe 'equal' or 'order'), or set data_thresholds to 0"
                )
            return self

        @model_validator(mode="after")
        def _local_edits_need_a_probe(self):
            if self.local_share > 0 and self.probe == "off":
                raise ValueError(
                    "local_share bounds the decisions an edit changes on the probe: set probe to 'order' "
                    "or 'equal' (best with probe_inputs), or set local_share to 0"
                )
            return self

    def __init__(self, config: MutatorWorker.Config, base_dir: Path | None = None, seed: int = 0):
        super().__init__()
        self.config = config
        self.rng = np.random.default_rng([seed % 2**63, config.seed_offset])
        self.edits = 0
        self.last = "no edit yet"

    # ---- Worker interface -----------------------------------------------------------------
    def ask(self, prompt: str) -> str:
        return f"mutator (offline variation operator, not a language model): edit {self.edits}: {self.last}"

    def edit(self, checkout: Path, prompt: str, references: dict[str, str] | None = None) -> str:
        checkout = Path(checkout)
        self.edits += 1
        references = references or {}
        if "ancestor" in references and "donor" in references:
            reply = self._recombine(checkout, references)
        else:
            reply = self._mutate(checkout, skip=set(references.values()), donor=references.get("donor"))
        self.last = reply
        return reply

    def get_state(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "edits": self.edits, "last": self.last}

    def set_state(self, state: dict) -> None:
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]
        self.edits = int(state.get("edits", 0))
        self.last = str(state.get("last", "no edit yet"))

    # ---- recombination --------------------------------------------------------------------
    def _recombine(self, checkout: Path, references: dict[str, str]) -> str:
        ancestor, donor = checkout / references["ancestor"], checkout / references["donor"]
        for role, path in (("ancestor", ancestor), ("donor", donor)):
            if not path.is_dir():
                raise WorkerError(f"mutator: {role} reference {references[role]!r} is not a directory in the checkout")
        changed = merge(ancestor, checkout, donor)
        if not changed:
            return "merge: the donor changed nothing that main lacks; no change"
        return f"merge: took the donor's changes to {', '.join(changed)} (conflicting lines keep main)"

    # ---- mutation -------------------------------------------------------------------------
    def _mutate(self, checkout: Path, skip: set[str], donor: str | None = None) -> str:
        targets = _find_targets(checkout, skip)
        if not targets:
            return f"mutate: no function marked '{MARKER}' in any Python file; no change"
        self._cases = self._probe_cases(checkout)
        grafts = self._donor_functions(checkout, donor, targets) if donor is not None else {}
        if donor is not None and not grafts:
            return "graft: the donor has none of the marked functions; no change"
        # The draw happens only when local edits are on, so runs without them repeat; a function
        # the probe cannot run gets no bound (no drawn edit could show that it is local).
        local = (
            self.config.local_share > 0
            and self.rng.random() < self.config.local_share
            and all(is_pure(t.fn, t.names) for t in targets)
        )
        fallback, wide, neutral_draws, wide_draws = None, None, 0, 0
        for files, applied, seen, state in self._attempts(targets, grafts, count=local):
            if seen.neutral:
                neutral_draws += 1
                fallback = fallback or (files, applied)
                continue
            if local and (seen.changed is None or seen.changed > self.config.local_decisions):
                wide_draws += 1
                wide = wide or (files, applied)
                continue
            self.rng.bit_generator.state = state  # as if no draw after this one had been made
            note = f" [local: {seen.changed} of {seen.calls} probe calls decide otherwise]" if local else ""
            return self._write(checkout, files, applied, neutral_draws, wide_draws) + note
        if wide is not None:  # no local change found: the first change that was not neutral
            return self._write(checkout, *wide, neutral_draws, wide_draws) + " (no local edit found)"
        if fallback is not None:  # every change found was neutral on the probe: still a change
            return self._write(checkout, *fallback, neutral_draws) + " (neutral on the probe)"
        return f"mutate: no operator found a valid change in {len(targets)} marked function(s); no change"

    def _probe_cases(self, checkout: Path) -> list[dict] | None:
        if self.config.probe == "off" or not self.config.probe_inputs:
            return None
        try:
            return load_cases(json.loads((checkout / self.config.probe_inputs).read_text()))
        except (OSError, ValueError):
            return None

    @staticmethod
    def _write(
        checkout: Path, files: dict[str, str], applied: list[str], neutral_draws: int, wide_draws: int = 0
    ) -> str:
        for rel, text in files.items():
            (checkout / rel).write_bytes(text.encode())
        redrawn = f" [{neutral_draws} neutral edit(s) redrawn]" if neutral_draws else ""
        redrawn += f" [{wide_draws} edit(s) changing more decisions redrawn]" if wide_draws else ""
        return "mutate: " + "; ".join(applied) + redrawn

    @staticmethod
    def _donor_functions(checkout: Path, donor: str, targets: list[_Target]) -> dict[int, Function]:
        """The donor's version of each marked function, by target index (same file, same name)."""
        root = checkout / donor
        if not root.is_dir():
            raise WorkerError(f"mutator: donor reference {donor!r} is not a directory in the checkout")
        theirs = {(t.path, t.fn.name): t.fn for t in _find_targets(root, set())}
        return {i: fn for i, t in enumerate(targets) if (fn := theirs.get((t.path, t.fn.name))) is not None}

    def _attempts(
        self, targets: list[_Target], grafts: dict[int, Function], count: bool
    ) -> Iterator[tuple[dict[str, str], list[str], Comparison, Mapping[str, Any]]]:
        """Up to ``MAX_ATTEMPTS`` candidate edits, each with what the probe saw of it and the
        generator's state right after its draw. Edits are drawn ``PROBE_BATCH`` at a time and
        probed in one jailed process; a caller that takes an edit restores its state, so the
        edits made are the same as drawing and probing one at a time (only the jail is started
        fewer times)."""
        batch = PROBE_BATCH if self.config.probe != "off" else 1
        for first in range(0, MAX_ATTEMPTS, batch):
            drawn = []
            for _ in range(min(batch, MAX_ATTEMPTS - first)):
                candidate = self._draw(targets, grafts)
                if candidate is not None:
                    drawn.append((candidate, self.rng.bit_generator.state))
            probes = [self._probe(targets, i, fn) for (_, _, copies), _ in drawn for i, fn in copies.items()]
            seen = iter(compare_many(probes))
            for (files, applied, copies), state in drawn:
                yield files, applied, self._seen([next(seen) for _ in copies], count), state

    def _draw(
        self, targets: list[_Target], grafts: dict[int, Function]
    ) -> tuple[dict[str, str], list[str], dict[int, Function]] | None:
        """One candidate edit: (new file texts, the operators applied, the changed functions by
        target index), or None when it changed nothing or failed to parse. With a donor
        (``grafts``) the edit is one graft from it."""
        copies: dict[int, Function] = {}
        applied = []
        if grafts:
            i = list(grafts)[int(self.rng.integers(len(grafts)))]
            copies[i] = clone(targets[i].fn)
            if self._mutations(targets[i]).graft(copies[i], grafts[i]):
                applied.append(f"graft in {targets[i].label}")
        for _ in range(0 if grafts else int(self.rng.integers(1, self.config.max_ops + 1))):
            i = int(self.rng.integers(len(targets)))
            if i not in copies:
                copies[i] = clone(targets[i].fn)  # only functions an operator touches are copied
            op = self._operator(copies[i])
            if self._mutations(targets[i]).apply(op, copies[i]):
                applied.append(f"{op} in {targets[i].label}")
        if any(_size(fn) > max(self.config.max_nodes, _size(targets[i].fn)) for i, fn in copies.items()):
            return None  # grew past the cap: draw again
        rendered = {i: ast.unparse(ast.fix_missing_locations(fn)) for i, fn in copies.items()}
        changed = {i: text for i, text in rendered.items() if text != targets[i].text}
        files = {}
        for path in sorted({targets[i].path for i in changed}):
            edits = [(targets[i].fn, text) for i, text in changed.items() if targets[i].path == path]
            source = splice(next(t.source for t in targets if t.path == path), edits)
            try:
                ast.parse(source)
            except SyntaxError:
                return None
            files[path] = source
        if not files:
            return None
        return files, applied, {i: copies[i] for i in changed}

    def _probe(self, targets: list[_Target], i: int, fn: Function) -> Probe:
        t = targets[i]
        cases = getattr(self, "_cases", None)
        return Probe(t.fn, fn, t.names, scalar_args(t.fn), self.config.constant_scale, self.config.probe, cases)

    @staticmethod
    def _seen(comparisons: list[Comparison], count: bool) -> Comparison:
        """One edit's verdict from its changed functions' comparisons, in order: neutral if all
        are; the count of changed probe calls summed over them, known only if every one counted.
        Without ``count``, the first changed function that is not neutral decides (the ones after
        it are not looked at)."""
        seen = []
        for c in comparisons:
            seen.append(c)
            if not (c.neutral or count):
                break
        counts = [c.changed for c in seen if c.changed is not None]
        total = sum(counts) if len(counts) == len(comparisons) else None
        return Comparison(all(c.neutral for c in seen), total, sum(c.calls for c in seen))

    def _mutations(self, target: _Target) -> Mutations:
        return Mutations(
            self.rng,
            target.names,
            self.config.constant_scale,
            getattr(self, "_cases", None),
            self.config.data_thresholds,
        )

    def _operator(self, fn: Function) -> str:
        weights = np.array([getattr(self.config.weights, op) for op in OPERATORS], dtype=float)
        if _size(fn) >= self.config.max_nodes:
            weights[OPERATORS.index("insert_term")] = 0.0
        if weights.sum() == 0:
            weights[OPERATORS.index("drop_term")] = 1.0
        return OPERATORS[int(self.rng.choice(len(OPERATORS), p=weights / weights.sum()))]


def _size(fn: ast.AST) -> int:
    return sum(1 for _ in ast.walk(fn))


def _find_targets(checkout: Path, skip: set[str]) -> list[_Target]:
    """Marked functions of every parseable Python file, in path order."""
    targets = []
    skip = {os.path.normpath(s) for s in skip}
    for dirpath, dirnames, filenames in os.walk(checkout):
        rel_dir = os.path.relpath(dirpath, checkout)
        dirnames[:] = sorted(
            d for d in dirnames if d not in RUNTIME_DIRS and os.path.normpath(os.path.join(rel_dir, d)) not in skip
        )
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, name)).replace(os.sep, "/")
            try:
                source = (checkout / rel).read_bytes().decode()
                if MARKER not in source:
                    continue
                tree = ast.parse(source)
            except (UnicodeDecodeError, SyntaxError, ValueError):
                continue  # not ours to repair: a file that does not parse is left alone
            targets += [_Target(rel, source, tree, fn) for fn in marked_functions(source, tree)]
    return targets
