"""The jailed side of meta-evolve: a decision rule is built, smoke-tested and asked for its
selections here, inside the rollout jail, never in the driver or a Ray worker process.

Run by ``algorithms.meta.jailed`` as ``python -I -S jail_harness.py MODE ENTRY FACE TIMEOUT
MODULE_FILES...`` with cwd = a private checkout holding only the rule file ``ENTRY``. The jail
cannot import this project's packages (they are masked), so the few pure modules the gate needs
(``rsi/errors.py``, ``algorithms/slots.py``, ``algorithms/meta/{tree,proposal_check,smoke}.py``) arrive as
harness files, read-only, and are loaded here by path under their own names, so a policy's
whitelisted ``from algorithms.meta.tree import Node`` still resolves. FACE is ``priority`` (the
narrow face) or ``policy:<slot>``.

MODE ``check`` (the proposal check): the gate's executing layers (the narrow face's build and
finite grid; a class Policy's build, construction, Protocol and smoke test) on the rule; prints
``{"ok": true}`` or ``{"ok": false, "reason": ...}``.

MODE ``run`` (rollouts, a lockstep dialogue with ``jailed.SearchDialogue``). The inner searches
themselves run on the trusted side: the problems, their expansions, the curves and the scores
never enter the jail. This side keeps a mirror of each tree (what a rule may see: train values,
priors, structure, visits) and answers which node to expand next. The searches of the batch
advance in a few interleaved groups, one round per expansion, so a round trip carries one
answer per search of its group (and the trusted side expands one group while this side answers
another). One JSON line per round in, ``{"start": [[k, value, prior], ...], "child": [[k, value, prior],
...]}`` (search ``k`` starts from this root; the child of the node search ``k`` selected last),
and one line out: ``k index faults`` per selection (``faults``: the narrow face's priority
values that raised or were not finite, so far), then, if any search ended, a tab and a JSON
list of ``[k, kind, reason, faults]`` — ``error`` (the rule raised or answered with no node of
its tree), ``unusable`` (the rule fails its gate), ``timeout`` (the search ran past TIMEOUT
seconds).

Every search gets a fresh rule object, built from the source as the rollout did before it ran
in the jail (a class Policy is executed, constructed and smoke-tested per search; the narrow
face's pure function is compiled and grid-checked once), so nothing a rule keeps in itself
passes from one search to the next and rollouts stay independent and cacheable.

None of this is a security boundary: the jail is. Whatever this side prints, the trusted side
re-checks each answer (a node of its own tree) and computes every figure itself.
"""

import json
import os
import signal
import sys
import time
import types

sys.dont_write_bytecode = True  # a checkout is committed after rollouts: no __pycache__ in it

MODULES = (
    "rsi.errors",
    "algorithms.slots",
    "algorithms.meta.tree",
    "algorithms.meta.proposal_check",
    "algorithms.meta.smoke",
)


def load_modules(files):
    """The gate's modules, by path, under their package names (packages made up as needed)."""
    loaded = {}
    for name, path in zip(MODULES, files):
        parts = name.split(".")
        for i in range(1, len(parts)):
            pkg = ".".join(parts[:i])
            if pkg not in sys.modules:
                module = types.ModuleType(pkg)
                module.__path__ = []
                sys.modules[pkg] = module
                if i > 1:
                    setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], module)
        module = types.ModuleType(name)
        module.__file__ = path
        sys.modules[name] = module
        with open(path, "rb") as f:
            exec(compile(f.read(), path, "exec"), module.__dict__)
        setattr(sys.modules[".".join(parts[:-1])], parts[-1], module)
        loaded[name] = module
    return loaded


class Rule:
    """The source after the layers that run once per batch: the AST walk, and for the narrow
    face its compile and grid (a whitelisted pure function: no state to carry)."""

    def __init__(self, mods, face, source):
        self.proposal_check, self.tree = mods["algorithms.meta.proposal_check"], mods["algorithms.meta.tree"]
        self.face, self.source, self.reason = face, source, None
        try:
            if face == self.proposal_check.PRIORITY_FACE:
                self.priority = self.proposal_check.check_priority_source(source)
            else:
                self.slot = face.partition(":")[2]
                self.code = compile(self.proposal_check.check_policy_ast(source), "<policy>", "exec")
        except self.proposal_check.InvalidProposal as exc:
            self.reason = str(exc)

    def build(self):
        """A fresh selection object (raises InvalidProposal): the per-search layers."""
        if self.reason is not None:
            raise self.proposal_check.InvalidProposal(self.reason)
        if self.face == self.proposal_check.PRIORITY_FACE:
            return self.tree.PrioritySelection(self.priority, source=self.source)
        return self.proposal_check.build_checked_policy(self.code, self.slot)


def check(mods, face, source):
    proposal_check = mods["algorithms.meta.proposal_check"]
    try:
        if face == proposal_check.PRIORITY_FACE:
            proposal_check.check_priority_source(source)
        else:
            proposal_check.build_policy(source, face.partition(":")[2])
    except proposal_check.InvalidProposal as exc:
        return {"ok": False, "reason": str(exc)}
    return {"ok": True}


# ---- run mode ------------------------------------------------------------------------------
class SearchTimeout(BaseException):
    """A search's time is up (not an Exception: the tree's own handler must not turn it into a
    rule fault)."""


def _alarm(signum, frame):
    raise SearchTimeout()


class Lines:
    """Messages from stdin, one line each (several may arrive in one read: rounds of different
    groups are in flight together); b"" once stdin is closed."""

    def __init__(self, fd=0):
        self.fd, self.buf = fd, bytearray()

    def next(self):
        while True:
            end = self.buf.find(b"\n")
            if end >= 0:
                line = bytes(self.buf[: end + 1])
                del self.buf[: end + 1]
                return line
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                line, self.buf = bytes(self.buf), bytearray()
                return line
            self.buf += chunk


def count_faults(policy, before):
    try:
        n = int(getattr(policy, "faults", 0)) - before
    except Exception:  # a rule's own attribute of that name: not a count
        return 0
    return max(n, 0)


class Search:
    """The mirror of one trusted search: a fresh rule object and the tree it sees."""

    def __init__(self, rule, k, value, prior, timeout):
        self.k, self.rule, self.left = k, rule, timeout
        self.policy = self.timed(rule.build)
        try:
            self.before = int(getattr(self.policy, "faults", 0))
        except Exception:
            self.before = 0
        self.tree = rule.tree.Tree(self.policy)
        self.tree.add_root(value, None, prior)
        self.last = None

    def timed(self, call):
        """``call()`` under what is left of this search's time (SearchTimeout past it)."""
        if self.left <= 0:
            raise SearchTimeout()
        t0 = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, self.left)
        try:
            return call()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.left -= time.monotonic() - t0

    def select(self):
        self.last = self.timed(self.tree.select)
        return self.last.index


def run(rule, out, timeout):
    """Rounds of the lockstep dialogue until stdin closes, answered in the order they come.
    In: ``{"start": [[k, v, p], ...], "child": [[k, v, p], ...]}``; out: ``k index faults`` per
    selection, space-separated, then (only if some search ended) a tab and ``[[k, kind, reason,
    faults], ...]``: one answer for every search named."""
    signal.signal(signal.SIGALRM, _alarm)
    searches, lines = {}, Lines()
    while True:
        line = lines.next()
        if not line:
            return
        msg = json.loads(line)
        selected, ended = [], []
        starts, children = msg.get("start", []), msg.get("child", [])
        for k, value, prior in starts:
            try:
                searches[k] = Search(rule, k, value, prior, timeout)
            except rule.proposal_check.InvalidProposal as exc:
                ended.append([k, "unusable", str(exc), 0])
            except SearchTimeout:
                ended.append([k, "timeout", f"building the rule ran past the search's {timeout:g} s limit", 0])
        for k, value, prior in children:
            s = searches[k]
            s.tree.expand(s.last, value, None, prior)
        for k, _, _ in starts + children:
            s = searches.get(k)
            if s is None:
                continue
            try:
                index = s.select()
            except rule.tree.PolicyError as exc:
                ended.append([k, "error", str(exc), count_faults(s.policy, s.before)])
                del searches[k]
                continue
            except SearchTimeout:
                ended.append(
                    [k, "timeout", f"the search ran past its {timeout:g} s limit", count_faults(s.policy, s.before)]
                )
                del searches[k]
                continue
            selected.append([k, index, count_faults(s.policy, s.before)])
        answer = " ".join(f"{k} {index} {faults}" for k, index, faults in selected)
        if ended:
            answer += "\t" + json.dumps(ended)
        os.write(out, (answer + "\n").encode())


def main():
    mode, entry, face, timeout, *files = sys.argv[1:]
    # Answers go out on a private copy of stdout; fd 1 becomes stderr.
    out = os.dup(1)
    os.dup2(2, 1)
    mods = load_modules(files)
    with open(entry, encoding="utf-8") as f:
        source = f.read()
    if mode == "check":
        os.write(out, (json.dumps(check(mods, face, source)) + "\n").encode())
        return
    run(Rule(mods, face, source), out, float(timeout))


if __name__ == "__main__":
    main()
