"""Rules run in the rollout jail (``algorithms.meta.jailed``): a batch of inner searches in one
jail gives exactly the in-process searches' outcomes (both faces, the c-rules, bin packing),
each search starts from a fresh rule, the proposal check gives the gate's own reasons, and the
trusted side refuses answers that are not nodes of its trees."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest

from algorithms.meta import jailed
from algorithms.meta.benchmark import BinpackParams, BinpackSearchBenchmark, LandscapeBenchmark, MetaParams
from algorithms.meta.inner import InnerSearch, run_inner
from algorithms.meta.landscape import SOURCE
from algorithms.meta.proposal_check import PRIORITY_SEED
from algorithms.meta.rewards import auc
from algorithms.meta.seeds import seed_source
from algorithms.meta.target import PolicyTarget, build
from algorithms.meta.tree import mix
from algorithms.meta.validation import c_rule
from algorithms.meta.values import policy_source, priority_selection, validate_proposal
from rsi.config import TargetConfig
from rsi.sandbox import DialogueError

pytestmark = pytest.mark.timeout(300)


def policy_target(bench) -> PolicyTarget:
    return PolicyTarget(TargetConfig(path=".", kind="policy"), bench)


def run_many(tmp_path: Path, target: PolicyTarget, source: str, tasks):
    work = tmp_path / f"rule-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    (work / "policy.py").write_text(source)
    return target.run_many(work, [(t, 0, 0) for t in tasks])


def in_process(source: str, domain, task, budget: int):
    return run_inner(build(source), domain, task.input["instance"], task.input["seed"], budget)


STATEFUL = '''class Policy:
    """Keeps state in itself and in its class: fresh per search, so per search deterministic."""

    history = []

    def __init__(self):
        self.calls = 0

    def select(self, tree):
        self.calls += 1
        self.history.append(len(tree.nodes))
        best = tree.nodes[0]
        for node in tree.nodes:
            if node.value > best.value:
                best = node
        return best if (self.calls + len(self.history)) % 3 else tree.nodes[-1]
'''


@pytest.mark.parametrize("source", [c_rule(1.0), c_rule(0.0), c_rule(0.25), seed_source("node_selection"), STATEFUL],
                         ids=["c1-seed", "c0", "c0.25", "class-seed", "stateful"])
def test_a_jailed_batch_gives_the_in_process_searches_exactly(tmp_path, source):
    bench = LandscapeBenchmark(MetaParams(name="meta_landscape", holdout=12, validation=3, budget=30))
    target = policy_target(bench)
    tasks = bench.split("train")[:9] + bench.split("test")[-3:]  # both families
    batch = run_many(tmp_path, target, source, tasks)
    for task, got in zip(tasks, batch):
        want = in_process(source, task.input["domain"], task, 30)
        assert got.status == "ok" and got.score == auc(want)
        assert got.trace["detail"] == want.detail and len(got.trace["curve"]) == 31
        assert got.duration_s > 0
    alone = [run_many(tmp_path, target, source, [t])[0] for t in tasks[:3]]
    assert [r.score for r in alone] == [r.score for r in batch[:3]], "a search does not depend on its batch"


def test_bin_packing_searches_through_the_jail_match_in_process(tmp_path):
    bench = BinpackSearchBenchmark(BinpackParams(name="meta_binpack", holdout=3, budget=4, items=30, lists=1))
    tasks = bench.split("train")
    batch = run_many(tmp_path, policy_target(bench), PRIORITY_SEED, tasks)
    assert [r.score for r in batch] == [auc(in_process(PRIORITY_SEED, bench.domain(t.input["domain"]), t, 4))
                                        for t in tasks]


def test_a_rule_failing_its_gate_or_mid_search_fails_only_its_rollouts(tmp_path):
    bench = LandscapeBenchmark(MetaParams(name="meta_landscape", holdout=3, budget=20))
    target, tasks = policy_target(bench), bench.split("train")
    divides = "def priority(rank, visits, total, prior, depth, n_nodes):\n    return rank / visits\n"
    out = run_many(tmp_path, target, divides, tasks)
    assert [r.status for r in out] == ["error"] * 3
    assert out[0].trace == {"error": "rule not usable: priority(0.0, 0.0, 0.0, 0.0, 0.0, 1.0) raised "
                                     "ZeroDivisionError: float division by zero"}
    late = ("class Policy:\n    def select(self, tree):\n        if len(tree.nodes) > 12:\n"
            "            raise ValueError('lost')\n        return tree.nodes[-1]\n")
    out = run_many(tmp_path, target, late, tasks)
    assert [r.status for r in out] == ["error"] * 3
    assert out[0].trace["detail"]["error"] == "selection policy raised ValueError: lost"
    assert len(out[0].trace["curve"]) == 13 and out[0].trace["detail"]["selection"] == "Policy"
    # visits = 3 is off the gate's grid: the rule passes it, then faults (scores -inf) mid-search
    faulty = "def priority(rank, visits, total, prior, depth, n_nodes):\n    return rank + 1.0 / (visits - 3.0)\n"
    got = run_many(tmp_path, target, faulty, tasks[:1])[0]
    want = in_process(faulty, "landscape-source", tasks[0], 20)
    assert got.status == "ok" and got.score == auc(want)
    assert got.trace["detail"]["faults"] == want.detail["faults"] > 0


@pytest.mark.parametrize("face, source", [
    ("priority", PRIORITY_SEED),
    ("priority", "def priority(rank, visits, total, prior, depth, n_nodes):\n    return math.log(total)\n"),
    ("priority", "import math\n\ndef priority(rank, visits, total, prior, depth, n_nodes):\n    return 9 ** 9 ** 9\n"),
    ("priority", "import os\n\ndef priority(rank, visits, total, prior, depth, n_nodes):\n    return rank\n"),
    ("policy", seed_source("node_selection")),
    ("policy", "class Policy:\n    def select(self, tree):\n        return None\n"),
    ("policy", "class Policy:\n    def select(self, tree):\n        return 1 / 0\n"),
    ("policy", "class Policy:\n    def __init__(self, c):\n        self.c = c\n    def select(self, tree):\n"
               "        return tree.nodes[0]\n"),
    ("policy", "import os\nclass Policy:\n    pass\n"),
])
def test_the_jailed_check_gives_the_in_process_gates_reasons(face, source):
    kind = priority_selection() if face == "priority" else policy_source("node_selection")
    try:
        kind.compile(source)  # trusted in-process build: only for this comparison
        want = (True, "")
    except Exception as exc:  # InvalidProposal
        want = (False, str(exc))
    assert validate_proposal(kind, source) == want


def test_the_check_runs_the_proposal_in_the_jail_only(monkeypatch):
    calls = []
    real = jailed.run_program

    def spy(argv, cwd, *args, **kwargs):
        calls.append((argv, kwargs.get("harness")))
        return real(argv, cwd, *args, **kwargs)

    monkeypatch.setattr(jailed, "run_program", spy)
    assert validate_proposal(policy_source("node_selection"), seed_source("node_selection")) == (True, "")
    (argv, harness), = calls
    assert argv[:4] == [argv[0], "-I", "-S", str(jailed.HARNESS)] and argv[4:7] == ["check", "policy.py",
                                                                                      "policy:node_selection"]
    assert set(harness.values()) == {"jail_harness.py", "errors.py", "slots.py", "tree.py", "proposal_check.py", "smoke.py"}
    # The AST layers reject without a jail at all.
    assert not validate_proposal(priority_selection(), "import os\n")[0] and len(calls) == 1


class Fake:
    """The trusted side of a batch of ``n`` searches of 3 expansions, fed answers by hand."""

    def __init__(self, n, groups=1):
        self.dialogue = jailed.SearchDialogue(
            [lambda i=i: InnerSearch(SOURCE.problem(i), 3, mix(i, 0)) for i in range(n)], "Root", groups)
        self.opening = self.dialogue.opening()

    def say(self, text: str):
        return self.dialogue.reply(text.encode())


@pytest.mark.parametrize("answer, needle", [
    ("0 5 0 1 0 0", "node 5 is not in the tree"),
    ("0 0 0", "the round asked searches [0, 1]"),
    ("0 0 0 0 0 0", "the round asked searches"),
    ("0 0 0 7 0 0", "the round asked searches"),
    ("0 0 0 1 -1 0", "selections must be 'search node faults' triples"),
    ("0 0 0 1 0", "selections must be 'search node faults' triples"),
    ("0 0 0 1 1e3 0", "selections must be 'search node faults' triples"),
    ("0 0 0 1 0 0 ", "the round asked searches [0, 1]"),  # trailing blank: fine, same triples
    ('\t[[0, "won", "x", 0], [1, "error", "x", 0]]', "an ending must be"),
    ('\t{"0": "error"}', "endings must be a list"),
    ("\t[[0, \"error\", \"x\", NaN]]", "round answer"),
])
def test_answers_that_are_not_nodes_of_the_trusted_tree_break_the_batch(answer, needle):
    if answer == "0 0 0 1 0 0 ":
        assert Fake(2).say(answer), "a well-formed answer: the next round"
        return
    with pytest.raises(DialogueError) as err:
        Fake(2).say(answer)
    assert needle in str(err.value)


def test_groups_of_searches_are_answered_in_the_order_asked():
    fake = Fake(3, groups=2)
    first, second = fake.opening.decode().splitlines()
    assert [k for k, _, _ in json.loads(first)["start"]] == [0, 2]
    assert [k for k, _, _ in json.loads(second)["start"]] == [1]
    with pytest.raises(DialogueError, match=r"asked searches \[0, 2\]"):
        fake.say("1 0 0")  # the second group's answer before the first's
    fake = Fake(3, groups=2)
    assert json.loads(fake.say("0 0 0 2 0 0"))["child"][0][0] == 0
    assert fake.say('\t[[1, "error", "lost", 2]]') == b""  # group 2 is over, group 1 is not
    assert fake.dialogue.ended[1].outcome.detail["error"] == "lost"


def test_the_trusted_side_scores_from_its_own_tree():
    """The jail names nodes, nothing else: the curve and the summary are the trusted search's."""
    fake = Fake(1)
    for _ in range(3):
        message = fake.say("0 0 5")
    assert message is None and fake.dialogue.result() == {"searches": 1}
    ended = fake.dialogue.ended[0]

    class Root:
        faults = 0

        def select(self, tree):
            return tree.nodes[0]

    want = run_inner(Root(), SOURCE, 0, 0, 3)
    assert ended.status == "ok" and ended.outcome.curve == want.curve
    assert ended.outcome.detail == want.detail | {"faults": 5}
    with pytest.raises(DialogueError, match="after the last round"):
        fake.say("")


def test_run_batch_runs_a_policy_batch_in_one_jail(monkeypatch, tmp_path):
    from actors import rollout
    from actors.rollout import RolloutSpec, run_batch
    from rsi.results import from_ipc
    from rsi.snapshot import Snapshot

    monkeypatch.setattr(rollout, "NODE_CACHE", tmp_path / "cache")
    starts = []
    real = jailed.run_program
    monkeypatch.setattr(jailed, "run_program", lambda *a, **k: starts.append(1) or real(*a, **k))
    bench = LandscapeBenchmark(MetaParams(name="meta_landscape", holdout=6, budget=10))
    tasks = {t.task_id: t for t in bench.split("train")}
    seed = Snapshot.from_dir(Path(__file__).resolve().parents[1] / "targets" / "meta_policy")
    rows, traces = run_batch(seed, policy_target(bench), tasks, [RolloutSpec(t, 0, random.randrange(99))
                                                                 for t in tasks], "r", "train")
    table = from_ipc(rows)
    assert len(starts) == 1 and table.num_rows == 6 and set(table["status"].to_pylist()) == {"ok"}
    assert table["score"].to_pylist() == [auc(run_inner(PRIORITY_SEED, "landscape-source", t.input["instance"],
                                                        t.input["seed"], 10)) for t in tasks.values()]
    assert all(len(t["curve"]) == 11 for t in traces)


def test_target_run_many_defaults_to_run_each():
    from rsi.target import RolloutResult, Target

    class Echo(Target):
        kind = "echo"

        def run(self, workdir, task, trial, sample_seed):
            return RolloutResult(float(trial), "ok", 0.0, {"task": task, "seed": sample_seed})

    out = Echo(None, None).run_many(Path("."), [("a", 1, 5), ("b", 2, 6)])
    assert [(r.score, r.trace) for r in out] == [(1.0, {"task": "a", "seed": 5}), (2.0, {"task": "b", "seed": 6})]
