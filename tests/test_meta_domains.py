"""The three inner domains: landscapes (the c-sweep), bin packing over mutated heuristics,
and Harbor tasks through the local runner."""

import dataclasses
import math
import random
import sys

import pytest

from algorithms.meta.benchmark import BinpackSearchBenchmark
from algorithms.meta.binpack import BinpackDomain, RecordedCallMutation, offline_mutation
from algorithms.meta.harbor import DockerRunner, HarborProblem, LocalRunner, docker_client, load_task
from algorithms.meta.inner import c_sweep, run_inner, tree_search
from algorithms.meta.landscape import SOURCE, TARGET
from algorithms.meta.proposal_check import PRIORITY_SEED
from algorithms.meta.tree import FlatPuct, mix
from benchmarks.binpack.instances import CAPACITY
from benchmarks.binpack.online import best_fit, count_bins, l1_bound, pack
from rsi.errors import ConfigError

PAIRS = [(i, 0) for i in range(120)]
CS = (0.0, 0.25, 0.5, 1.0, 2.0)


def _gap(sweep, better, worse):
    d = sweep[better] - sweep[worse]
    return d.mean(), d.std(ddof=1) / math.sqrt(len(d))


def test_c_sweep_best_constant_differs_between_source_and_target():
    source, target = c_sweep(SOURCE, PAIRS, 60, CS), c_sweep(TARGET, PAIRS, 60, CS)
    best_source = max(CS, key=lambda c: source[c].mean())
    best_target = max(CS, key=lambda c: target[c].mean())
    assert best_source in (0.0, 0.25) and best_target >= 0.5  # greed wins on SOURCE only
    gain, se = _gap(source, 0.0, 1.0)
    assert gain > 2 * se  # the seed rule c = 1 is clearly not best on SOURCE
    gain, se = _gap(target, best_target, 0.0)
    assert gain > 2 * se  # and greed clearly loses on TARGET


SMALL_OR = BinpackDomain("binpack-test", "or", 99, items=60, n_train=2, n_held_out=2)


def test_binpack_root_is_measured_best_fit_and_search_is_deterministic():
    problem = SMALL_OR.problem(0)
    root = problem.root()  # the seed program is best fit, packed in the jail

    def best_fit_quality(lists):
        return sum(l1_bound(x, CAPACITY["or"]) / count_bins(x, CAPACITY["or"], pack(x, CAPACITY["or"], best_fit))
                   for x in lists) / len(lists)

    assert (root.value, root.held_out) == pytest.approx((best_fit_quality(problem.train),
                                                         best_fit_quality(problem.held_out)))
    assert 0.5 < root.value <= 1.0 and 0.5 < root.held_out <= 1.0
    a = run_inner(FlatPuct(1.0), SMALL_OR, 0, 1, 6)
    assert run_inner(FlatPuct(1.0), SMALL_OR, 0, 1, 6) == a
    assert a.curve[0] == root.held_out and a.rollouts == 6 and not a.failed
    assert run_inner(PRIORITY_SEED, SMALL_OR, 0, 1, 6).curve == a.curve


def test_binpack_expansion_mutates_the_parent_program():
    problem = SMALL_OR.problem(1)
    root = problem.root()

    class Parent:
        payload = root.payload

    children = [problem.expand(Parent, random.Random(mix(1, k))) for k in range(4)]
    assert all(c.payload != root.payload and "def priority" in c.payload for c in children)
    assert all(c.value == -math.inf or 0.0 < c.value <= 1.0 for c in children)
    broken = problem._score("def priority(item, bins):\n    return bins[len(bins) + 5]\n")
    assert broken.value == -math.inf  # an IndexError in the heuristic is a failed node


def test_binpack_expansion_draws_again_while_the_child_packs_as_its_parent():
    """A child that packs the train lists exactly as its parent is drawn again, up to
    ``redraws`` times. The mutate function here is a scripted double: first a rewrite of the
    parent that packs identically (a constant added to every priority), then the real mutator."""
    neutral = "def priority(item, bins):\n    return -(bins - item) + 7.0\n"
    calls = []

    def neutral_first(source, rng):
        calls.append(source)
        return neutral if len(calls) == 1 else offline_mutation(source, rng)

    base = SMALL_OR.problem(1)
    root = base.root()

    class Parent:
        payload, value = root.payload, root.value

    def expand(redraws):
        calls.clear()
        domain = dataclasses.replace(SMALL_OR, mutate=neutral_first, redraws=redraws)
        return domain.problem(1).expand(Parent, random.Random(mix(1, 0))), len(calls)

    kept, n = expand(0)  # no redraws: the neutral child is the node
    assert n == 1 and kept.payload == neutral and kept.value == root.value
    redrawn, n = expand(8)  # drawn again until the child packs differently, or 9 draws in all
    assert redrawn.payload != neutral and 2 <= n <= 9
    assert redrawn.value != root.value or n == 9
    assert expand(8) == (redrawn, n)  # the node's RNG decides every draw: deterministic


def test_recorded_call_expansion_leaves_fewer_children_that_pack_as_their_parent():
    """The mutator run as the DarwinX bin-packing configs run it (its probe ranks the bins of
    calls recorded on the family) redraws inside the mutator what the synthetic probe lets
    through: on the same expansions of best fit, fewer children pack exactly as the root does.
    Each child still packs in the jail, and the node's RNG still decides everything."""

    def children(mutate):
        problem = dataclasses.replace(SMALL_OR, mutate=mutate).problem(1)
        root = problem.root()

        class Parent:
            payload = root.payload

        return root, [problem.expand(Parent, random.Random(mix(1, k))) for k in range(12)]

    root, plain = children(offline_mutation)
    _, recorded = children(RecordedCallMutation("or"))

    def same(kids):
        return sum(k.value == root.value for k in kids)

    assert same(recorded) < same(plain)  # measured 3 against 8 of 12
    assert all(k.payload != root.payload and "def priority" in k.payload for k in recorded)
    assert children(RecordedCallMutation("or"))[1] == recorded


def test_meta_binpack_params_choose_the_expansion():
    def domain(**params):
        suite = BinpackSearchBenchmark(BinpackSearchBenchmark.Params(name="meta_binpack", **params))
        return suite.domain(suite.target)

    assert domain().mutate is offline_mutation
    recorded = domain(expansion="recorded", data_thresholds=0.5).mutate
    assert recorded == RecordedCallMutation("weibull", 0.5)
    with pytest.raises(ValueError, match="data_thresholds draws from recorded calls"):
        BinpackSearchBenchmark.Params(name="meta_binpack", data_thresholds=0.5)


TEST_SH = """#!/bin/bash
cd "$WORKSPACE"
if "$PYTHON" -c 'import calc, sys; sys.exit(0 if calc.add(2, 3) == 5 else 1)'; then
  echo 1 > "$LOGS_DIR/verifier/reward.txt"
else
  echo 0.25 > "$LOGS_DIR/verifier/reward.txt"
fi
"""

FIX = """--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""

WRONG_CONTEXT = FIX.replace(" def add(a, b):", " def plus(a, b):")


@pytest.fixture
def task_dir(tmp_path):
    root = tmp_path / "calc-task"
    (root / "environment" / "workspace").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "environment" / "workspace" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "instruction.md").write_text("Make calc.add add.\n")
    (root / "task.toml").write_text(
        f'version = "1.0"\n[task]\nname = "demo/calc"\n[verifier]\ntimeout_sec = 30.0\n'
        f'env = {{ PYTHON = "{sys.executable}" }}\n')
    (root / "tests" / "test.sh").write_text(TEST_SH)
    return root


def test_harbor_loader_reads_the_task_and_refuses_incomplete_ones(task_dir, tmp_path):
    task = load_task(task_dir)
    assert (task.name, task.verifier_timeout, task.instruction) == ("demo/calc", 30.0, "Make calc.add add.\n")
    (task_dir / "instruction.md").unlink()
    with pytest.raises(ConfigError, match="missing instruction.md"):
        load_task(task_dir)


def test_harbor_local_runner_pass_fail_patch_failure_and_timeout(task_dir):
    task, runner = load_task(task_dir), LocalRunner()
    fixed = runner.run(task, FIX)
    assert (fixed.status, fixed.reward, fixed.exit_code) == ("ok", 1.0, 0)
    baseline = runner.run(task, "")
    assert (baseline.status, baseline.reward) == ("ok", 0.25)  # the verifier's own reward file
    assert (task_dir / "environment" / "workspace" / "calc.py").read_text().endswith("a - b\n")  # copy only
    bad = runner.run(task, WRONG_CONTEXT)
    assert (bad.status, bad.reward) == ("patch_failed", 0.0)
    (task_dir / "tests" / "test.sh").write_text("sleep 30\n")
    slow = LocalRunner(timeout_s=0.5).run(task, "")
    assert (slow.status, slow.reward) == ("timeout", 0.0) and slow.duration_s < 10
    (task_dir / "tests" / "test.sh").write_text("exit 3\n")
    assert LocalRunner().run(task, "").reward == 0.0  # no reward file: the exit code decides


def test_harbor_tree_search_finds_the_fixing_patch(task_dir):
    task = load_task(task_dir)
    script = iter([WRONG_CONTEXT, FIX, FIX])  # a scripted proposer stands in for an agent

    def propose(task, parent_patch, rng):
        return next(script)

    out = tree_search(HarborProblem(task, LocalRunner(), propose), FlatPuct(1.0), 2)
    assert out.curve == (0.25, 0.25, 1.0)


def test_harbor_docker_runner_needs_an_engine(task_dir):
    client, why = docker_client()
    if client is None:
        with pytest.raises(ConfigError, match="no Docker engine|not installed"):
            DockerRunner().run(load_task(task_dir), FIX)
        pytest.skip(f"Docker runner not exercised: {why}")
    # In the container the task's files are where Harbor puts them (/tests, /logs/verifier); the
    # image's own python3 decides the reward, written where Harbor's verifiers write it.
    (task_dir / "tests" / "test.sh").write_text(
        "#!/bin/bash\npython3 -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' "
        "&& echo 0.75 > /logs/verifier/reward.txt\n")
    runner = DockerRunner(image="python:3.11-slim", client=client)
    verdict = runner.run(load_task(task_dir), "")
    assert (verdict.status, verdict.reward, verdict.exit_code) == ("ok", 0.75, 0)
    # The image holds no calc.py (nor git): the fix cannot apply there.
    bad = runner.run(load_task(task_dir), FIX)
    assert (bad.status, bad.reward) == ("patch_failed", 0.0)
