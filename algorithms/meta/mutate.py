"""Offline proposals: the project's mutator applied to one source text, and the symbolic
mutator of the narrow face. No model is involved.

``mutate_source`` runs the real ``MutatorWorker`` (perturb a constant, swap an operator or a
math function, insert a term built from the function's own names, drop a term) on a one-file
checkout, seeded per call, so an inner search that mutates programs stays a pure function of
its seed. ``mutate_priority`` adds the narrow face's own moves: swap one of ``rank, visits,
total, prior, depth, n_nodes`` for another, and add a bounded step on one of the arguments that
count things in the tree (see ``insert_step``). ``symbolic_proposals`` sends every output
through ``validate_proposal``: what fails is counted, never repaired.
"""

from __future__ import annotations

import ast
import math
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from algorithms.meta.proposal_check import FACE_ARGS
from algorithms.meta.values import priority_selection, validate_proposal

if TYPE_CHECKING:
    from rsi.workers._probe import ProbeMode

MARKER = "# rsi: evolve"
PROBE_FILE = "probe_calls.json"  # where mutate_source puts recorded calls beside the program


def mutate_source(
    source: str,
    seed: int,
    max_ops: int = 3,
    scale: float = 10.0,
    probe: ProbeMode = "equal",
    probe_calls: str | None = None,
    data_thresholds: float = 0.0,
) -> str:
    """One mutator edit of the functions marked ``# rsi: evolve`` in ``source``.

    ``probe``, ``probe_calls`` (the JSON text of recorded calls, as a ``probe_inputs`` file holds)
    and ``data_thresholds`` are the mutator's options of the same names: unset, the probe compares
    results on synthetic inputs. Returns ``source`` unchanged when the mutator found no valid change.
    """
    from rsi.workers.mutator import MutatorWorker  # imported on use: the rest of meta does not need it

    config = MutatorWorker.Config(
        type="mutator",
        max_ops=max_ops,
        constant_scale=scale,
        probe=probe,
        probe_inputs=None if probe_calls is None else PROBE_FILE,
        data_thresholds=data_thresholds,
    )
    worker = MutatorWorker(config, seed=seed)
    with tempfile.TemporaryDirectory(prefix="rsi-mutate-") as tmp:
        path = Path(tmp) / "program.py"
        path.write_text(source)
        if probe_calls is not None:
            (Path(tmp) / PROBE_FILE).write_text(probe_calls)
        worker.edit(Path(tmp), "")
        return path.read_text()


def _marked(source: str) -> str:
    """The priority function marked for the mutator (the face's text carries no marker)."""
    lines = source.splitlines()
    return "\n".join(MARKER + "\n" + line if line.startswith("def priority(") else line for line in lines) + "\n"


def _unmarked(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if line.strip() != MARKER) + "\n"


def _swap_name(source: str, rng: random.Random) -> str | None:
    """Replace one use of a face argument by another face argument."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in FACE_ARGS]
    if not uses:
        return None
    node = uses[rng.randrange(len(uses))]
    node.id = rng.choice([a for a in FACE_ARGS if a != node.id])
    return ast.unparse(tree) + "\n"


#: Face arguments that count things in the tree (integers from 0 to about the inner budget).
COUNT_ARGS = ("visits", "total", "depth", "n_nodes")


def insert_step(source: str, rng: random.Random, budget: int = 60) -> str | None:
    """Add ``w * (arg >= t)`` to a return value, ``arg`` one of ``COUNT_ARGS``.

    A step is how a rule gives up on a node (a negative weight on ``visits``: a visit cap) or
    commits to one, and the generic mutator rarely builds one whose threshold lies where the
    argument's values are: its constants are drawn around the face's scale of 1, while counts
    run from 1 to the inner budget. So the threshold is an integer drawn log-uniformly from 2 to
    ``budget`` (counts are heavy-tailed: most nodes have few visits), the weight log-uniformly
    from 0.1 to 2 in magnitude, either sign; a rank lies in [0, 1], so the larger weights
    overrule it and the smaller ones break near-ties.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    returns = [(n, n.value) for n in ast.walk(tree) if isinstance(n, ast.Return) and n.value is not None]
    if not returns:
        return None
    top = max(2, budget)
    threshold = min(top, round(math.exp(rng.uniform(math.log(2), math.log(top)))))
    weight = rng.choice((-1.0, 1.0)) * round(math.exp(rng.uniform(math.log(0.1), math.log(2.0))), 3)
    term = ast.parse(f"{weight!r} * ({rng.choice(COUNT_ARGS)} >= {threshold})", mode="eval").body
    ret, value = returns[rng.randrange(len(returns))]
    ret.value = ast.BinOp(value, ast.Add(), term)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def mutate_priority(
    source: str,
    rng: random.Random,
    swap_probability: float = 0.2,
    step_probability: float = 0.5,
    budget: int = 60,
) -> str:
    """One symbolic edit of a narrow-face rule: a name swap, a step term, or a mutator edit.

    Half of the edits are steps: on the stage-0 landscapes the visit caps that transfer best and
    those that transfer less tie on SOURCE, so a run lands on a good one only by drawing caps
    often (``perf/results/meta-stage0.md`` has the shares tried and their figures).
    """
    draw = rng.random()
    if draw < swap_probability:
        swapped = _swap_name(source, rng)
        if swapped is not None:
            return swapped
    elif draw < swap_probability + step_probability:
        stepped = insert_step(source, rng, budget)
        if stepped is not None:
            return stepped
    edited = mutate_source(_marked(source), seed=rng.getrandbits(63), max_ops=2, scale=1.0)
    return _unmarked(edited)


@dataclass
class Proposals:
    valid: list = field(default_factory=list)
    invalid_proposals: int = 0
    reasons: list = field(default_factory=list)


def symbolic_proposals(source: str, rng: random.Random, n: int, kind: Any = None, budget: int = 60) -> Proposals:
    """``n`` mutations of ``source``; each passes the slot's gate or is counted invalid.

    An unchanged or repeated output is counted invalid too: it would be no new candidate.
    """
    kind = kind or priority_selection()
    out, seen = Proposals(), {source}
    for _ in range(n):
        candidate = mutate_priority(source, rng, budget=budget)
        ok, reason = (False, "unchanged or repeated") if candidate in seen else validate_proposal(kind, candidate)
        seen.add(candidate)
        if ok:
            out.valid.append(candidate)
        else:
            out.invalid_proposals += 1
            out.reasons.append(reason)
    return out
