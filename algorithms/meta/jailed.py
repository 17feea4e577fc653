"""The trusted side of meta-evolve's containment: candidate rules run only in the rollout jail.

A proposed rule is hostile code. The AST gate is a pre-filter, not a boundary (a module
attribute such as ``random._os`` reaches the whole interpreter), so nothing here executes
candidate source: it writes the rule into a private checkout and starts the jailed script
``jail_harness.py`` (``rsi.sandbox.run_program``: its own user, PID, network and mount
namespaces; it sees the checkout, the interpreter and the harness files, nothing else).

* ``check_in_jail``: the proposal check. The AST layers run here (they execute nothing), then one
  small jailed run builds the rule and runs its grid or smoke test; the reasons are the gate's.
* ``run_searches``: rollouts, lockstep. The inner searches run *here*, on the trusted side
  (``InnerSearch``: the problem, every expansion, the curve and the score); the jail keeps a
  mirror of each tree and is asked only which node to expand next (``SearchDialogue``). A
  whole batch of searches of one rule shares one jail and advances together, one round trip
  per expansion for all of them; each search gets a fresh rule object.

Why lockstep rather than letting the jail run whole searches and replaying its decisions: a rule
in the same process as the problem could ask the problem about nodes it never paid for (walk
the stack to the domain and expand off-budget, read a node's payload or clean held-out value),
then report a decision sequence that replays legally with a better score. In lockstep the jail
never holds the problem: it learns a node's train value and prior only once the search has paid
for that expansion, and every answer is checked against the trusted tree (an index of a node
that exists). The cost is one pipe round trip per round of the batch, shared by all its
searches, and the domain's expansions (bin packing's programs above all) run once, not twice.

What a rule sees in its mirror: each node's train value, prior, depth, visits, parent and
children (and ``best``). Not the held-out value the curve reports (a mirror node's ``held_out``
is its train value), nor the domain's payload or the node keys that seed its randomness.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from algorithms.meta.inner import InnerSearch
from algorithms.meta.proposal_check import InvalidProposal, prefilter
from algorithms.meta.rewards import MetaOutcome
from rsi import untrusted
from rsi.sandbox import Dialogue, DialogueError, Limits, run_program

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "jail_harness.py"
RULE_FILE = "policy.py"
MAX_LINE = 64 * 1024  # a round's answer: this, plus 64 bytes per search asked
MAX_REASON = 2000


def support_files() -> tuple[Path, ...]:
    """The pure modules the jailed script loads by path, in the order it names them
    (``jail_harness.MODULES``)."""
    import algorithms.slots
    import rsi.errors

    return (
        Path(rsi.errors.__file__).resolve(),
        Path(algorithms.slots.__file__).resolve(),
        HERE / "tree.py",
        HERE / "proposal_check.py",
        HERE / "smoke.py",
    )


def mounts() -> dict[str, str]:
    """Host path -> name under /harness of every file the jail gets (read-only)."""
    return {str(p): p.name for p in (HARNESS, *support_files())}


def argv(mode: str, entry: str, face: str, timeout_s: float) -> list[str]:
    return [
        sys.executable,
        "-I",
        "-S",
        str(HARNESS),
        mode,
        entry,
        face,
        repr(float(timeout_s)),
        *(str(p) for p in support_files()),
    ]


def default_limits() -> Limits:
    return Limits()


def _clip(text: str, limit: int = MAX_REASON) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---- the proposal check ------------------------------------------------------------------------
def check_in_jail(source: str, face: str, limits: Limits | None = None) -> None:
    """Judge ``source`` as ``face`` (``priority`` or ``policy:<slot>``); raise ``InvalidProposal``
    with the gate's reason. Nothing of the source runs in this process."""
    prefilter(face, source)  # the AST layers: a fast reject, same reasons, no execution
    limits = limits or default_limits()
    with tempfile.TemporaryDirectory(prefix="rsi-meta-check-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        (work / RULE_FILE).write_text(source)
        out = run_program(
            argv("check", RULE_FILE, face, limits.timeout_s),
            work,
            None,
            limits,
            harness=mounts(),
            required_keys=("ok",),
        )
    if out.status != "ok" or out.output is None:  # an ok outcome always carries its output
        raise InvalidProposal(f"the proposal check ended {out.status} in the jail: {out.reason}")
    if out.output.get("ok") is True:
        return
    reason = out.output.get("reason")
    raise InvalidProposal(
        _clip(reason)
        if isinstance(reason, str) and reason.strip()
        else "rejected by the jailed check (no reason given)"
    )


# ---- rollouts: lockstep searches -----------------------------------------------------------------
@dataclass
class Ended:
    """How one search of a batch ended. ``outcome`` is None when the rule never ran."""

    status: str  # ok | error | timeout | protocol_error
    outcome: MetaOutcome | None
    reason: str
    duration_s: float


class SearchDialogue(Dialogue):
    """Runs a batch of inner searches here, asking the jail for each round's selections (the
    protocol: ``jail_harness.py``).

    The searches advance in ``groups`` interleaved groups, a round of one group in flight while
    this side expands the other's: both processes keep working instead of waking each other
    once per round. Every answer is checked: it answers the oldest round in flight, names each
    search of it exactly once, and a selection is the index of a node of that search's trusted
    tree. Anything else ends the batch (``protocol_error`` for the searches not finished)."""

    def __init__(self, starts: Sequence[Callable[[], InnerSearch]], selection: str, groups: int = 2):
        self.starts, self.selection = list(starts), selection
        self.groups = max(1, min(groups, len(self.starts)))
        self.searches: dict[int, InnerSearch] = {}
        self.faults: dict[int, int] = {}
        self.spent: dict[int, float] = {}
        self.ended: dict[int, Ended] = {}
        self.pending: deque[list[int]] = deque()  # the searches each round in flight asked, oldest first
        self.mark = 0.0

    def _round(self, start: list, child: list) -> bytes:
        asked = [k for k, _, _ in start] + [k for k, _, _ in child]
        if not asked:
            return b""
        self.pending.append(asked)
        return (json.dumps({"start": start, "child": child}) + "\n").encode()

    def opening(self) -> bytes:
        self.mark = time.perf_counter()
        rounds = []
        for g in range(self.groups):
            start = []
            for k in range(g, len(self.starts), self.groups):
                t0 = time.perf_counter()
                s = self.searches[k] = self.starts[k]()
                self.faults[k], self.spent[k] = 0, time.perf_counter() - t0
                root = s.tree.nodes[0]
                start.append([k, root.value, root.prior])
            rounds.append(self._round(start, []))
        return b"".join(rounds)

    def _end(self, k: int, status: str, outcome: MetaOutcome | None, reason: str = "") -> None:
        self.ended[k] = Ended(status, outcome, reason, self.spent[k])
        del self.searches[k]

    def reply(self, line: bytes) -> bytes | None:
        if not self.pending:
            raise DialogueError("an answer after the last round")
        asked = self.pending.popleft()
        # time: each search's own expansions, plus an equal share of the wait for this answer
        now = time.perf_counter()
        for k in asked:
            self.spent[k] += (now - self.mark) / len(asked)
        if len(line) > MAX_LINE + 64 * len(asked):
            raise DialogueError(f"a round answer of {len(line)} bytes")
        head, tab, tail = line.rstrip(b"\r\n").partition(b"\t")
        numbers = head.split()
        if len(numbers) % 3 or not all(n.isdigit() and len(n) <= 12 for n in numbers):
            raise DialogueError(f"round answer: selections must be 'search node faults' triples, got {head[:60]!r}")
        ints = [int(n) for n in numbers]
        selected = [tuple(ints[i : i + 3]) for i in range(0, len(ints), 3)]
        endings = []
        if tab:
            try:
                msg = untrusted.loads(tail, max_depth=4, max_bytes=MAX_LINE + 64 * len(asked))
                if not isinstance(msg, list):
                    raise untrusted.Invalid("endings must be a list")
                endings = [self._ending(a) for a in msg]
            except untrusted.Invalid as exc:
                raise DialogueError(f"round answer: {exc}") from None
        named = [k for k, _, _ in selected] + [k for k, _, _, _ in endings]
        if sorted(named) != sorted(asked):
            raise DialogueError(
                f"the round asked searches {sorted(asked)[:8]}... and the answer named {sorted(named)[:8]}..."
            )
        for k, kind, why, faults in endings:
            s = self.searches[k]
            if kind == "unusable":
                self._end(k, "error", None, f"rule not usable: {why}")
            else:
                self._end(k, "timeout" if kind == "timeout" else "error", s.outcome(self.selection, faults, why), why)
        child = []
        for k, index, faults in selected:
            s = self.searches[k]
            nodes = s.tree.nodes
            if index >= len(nodes):
                raise DialogueError(f"search {k}: node {index} is not in the tree ({len(nodes)} nodes)")
            t0 = time.perf_counter()
            node = nodes[index]
            s.tree.reserve(node)
            made = s.expand(node)
            self.spent[k] += time.perf_counter() - t0
            self.faults[k] = faults
            if s.done:
                self._end(k, "ok", s.outcome(self.selection, faults))
            else:
                child.append([k, made.value, made.prior])
        self.mark = time.perf_counter()
        message = self._round([], child)
        return message if message or self.pending else None  # None: every search has ended

    def _ending(self, a) -> tuple[int, str, str, int]:
        if not (
            isinstance(a, list) and len(a) == 4 and a[1] in ("error", "unusable", "timeout") and isinstance(a[2], str)
        ):
            raise untrusted.Invalid(
                f"an ending must be [search, error|unusable|timeout, reason, faults], got {untrusted.show(a)}"
            )
        k = untrusted.nonneg_int(a[0], "search", 10**9)
        if k not in self.searches:
            raise untrusted.Invalid(f"search {k} is not running")
        return k, a[1], _clip(a[2], 300), untrusted.nonneg_int(a[3], "faults", 10**12)

    def result(self) -> dict:
        if len(self.ended) != len(self.starts):
            raise DialogueError(f"the jail ended after {len(self.ended)} of {len(self.starts)} searches")
        return {"searches": len(self.ended)}


def run_searches(
    source: str,
    face: str,
    starts: Sequence[Callable[[], InnerSearch]],
    selection: str,
    limits: Limits | None = None,
    mounts_: dict[str, str] | None = None,
) -> list[Ended]:
    """Every search of ``starts`` with the rule ``source``, in one jail; one ``Ended`` each, in
    order. A jail that fails part-way (start, protocol, time) leaves the searches it did not
    finish with its status; those it finished keep theirs, computed here."""
    if not starts:
        return []
    limits = limits or default_limits()
    n = len(starts)
    # Each search may spend ``timeout_s`` in the rule (the harness ends it past that); the jail
    # as a whole, one process, gets the sum, in wall-clock and CPU time alike.
    batch = dataclasses.replace(
        limits, timeout_s=limits.timeout_s * n + 30.0, cpu_s=None if limits.cpu_s is None else limits.cpu_s * n + 30
    )
    dialogue = SearchDialogue(starts, selection)
    with tempfile.TemporaryDirectory(prefix="rsi-meta-rule-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        (work / RULE_FILE).write_text(source)
        out = run_program(
            argv("run", RULE_FILE, face, limits.timeout_s),
            work,
            None,
            batch,
            harness=mounts_ or mounts(),
            dialogue=dialogue,
        )
    if len(dialogue.ended) < n:
        status = out.status if out.status != "ok" else "protocol_error"
        why = _clip(
            f"the jail ended {status}: {out.reason}"
            + (f" (stderr: {out.stderr_tail[-300:]})" if out.stderr_tail.strip() else ""),
            600,
        )
        for k in range(n):
            if k in dialogue.ended:
                continue
            s = dialogue.searches.get(k)  # a search under way: its curve so far
            outcome = s.outcome(selection, dialogue.faults[k], why) if s is not None else None
            dialogue.ended[k] = Ended(status, outcome, why, dialogue.spent.get(k, 0.0))
    return [dialogue.ended[k] for k in range(n)]


def finite(v: float) -> float | None:
    return round(float(v), 6) if math.isfinite(v) else None
