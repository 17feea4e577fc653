import ast
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from rsi.config import load_yaml
from rsi.workers import worker_class
from rsi.workers._pyedit import MARKER
from rsi.workers.mutator import MutatorWorker, merge

HEURISTIC = '''"""Scores bins for online packing."""
import math

import numpy as np

SCALE = 3.0


def helper(x):
    return x * 2 + 1  # not marked: must never change


# rsi: evolve
def priority(item, bins):
    """Prefer tight fits."""
    gap = bins - item
    score = -gap + 0.5 * np.sqrt(np.abs(gap))
    if item > 10:
        score = np.where(gap < 5, score - 2.0, score)
    return score / (1 + math.exp(-item / 20))  # trailing comment survives


class Policy:
    # rsi: evolve
    @staticmethod
    def weight(a, b=2):
        total = 0.0
        for k in range(3):
            total += a[k] * b ** 2 if a[k] >= 0 else -a[k]
        return total

    def untouched(self):
        return 1.5
'''
BEST_FIT = f"import numpy as np\n\n\n{MARKER}\ndef priority(item, bins):\n    return -(bins - item)\n"


def make(seed=0, **fields) -> MutatorWorker:
    return MutatorWorker(MutatorWorker.Config(type="mutator", **fields), base_dir=Path("."), seed=seed)


def checkout_with(tmp_path: Path, files: dict[str, str], name="checkout") -> Path:
    root = tmp_path / name
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def outside_marked(source: str) -> str:
    """The file with every marked function's lines cut out: what an edit must leave alone."""
    lines = source.splitlines(keepends=True)
    for node in sorted((n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)),
                       key=lambda n: n.lineno, reverse=True):
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        if lines[first - 2].strip() == MARKER:
            lines[first - 1:node.end_lineno] = ["<marked>\n"]
    return "".join(lines)


def test_registry_resolves_mutator_and_marks_it_offline():
    cls = worker_class("mutator")
    assert cls is MutatorWorker and cls.kind == "agent" and cls.offline is True
    assert "not a language model" in make().ask("what did you learn?")


def test_chained_mutations_always_parse_differ_and_touch_only_marked_functions(tmp_path):
    root = checkout_with(tmp_path, {"heuristic.py": HEURISTIC, "notes.txt": "keep\n"})
    worker = make(seed=3)
    source = HEURISTIC
    before_top, before_tail = HEURISTIC.split(MARKER)[0], HEURISTIC.split("    def untouched")[1]
    for _ in range(100):
        reply = worker.edit(root, "improve")
        new = (root / "heuristic.py").read_text()
        assert reply.startswith("mutate: ") and new != source
        tree = ast.parse(new)
        assert ast.dump(tree) != ast.dump(ast.parse(source))
        assert new.startswith(before_top) and new.endswith("    def untouched" + before_tail)
        assert new.count(MARKER) == 2
        sizes = [sum(1 for _ in ast.walk(n)) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                 and n.name in ("priority", "weight")]
        assert max(sizes) <= 200  # the default max_nodes cap holds
        source = new
    assert "def helper(x):\n    return x * 2 + 1  # not marked: must never change\n" in source
    assert (root / "notes.txt").read_text() == "keep\n"


def test_many_seeds_from_best_fit_all_parse_and_differ(tmp_path):
    results = set()
    for seed in range(100):
        root = checkout_with(tmp_path, {"heuristic.py": BEST_FIT}, name=f"c{seed}")
        make(seed=seed, probe="off").edit(root, "improve")  # the operators alone (the probe only redraws)
        new = (root / "heuristic.py").read_text()
        ast.parse(new)
        assert new != BEST_FIT and new.startswith(f"import numpy as np\n\n\n{MARKER}\ndef priority(item, bins):\n")
        results.add(new)
    assert len(results) > 50  # the operators really vary


def test_unmarked_code_is_byte_identical(tmp_path):
    root = checkout_with(tmp_path, {"heuristic.py": HEURISTIC, "other.py": "def f(x):\n    return x + 1.5\n"})
    worker = make(seed=11)
    for _ in range(30):
        worker.edit(root, "improve")
    new = (root / "heuristic.py").read_text()
    assert outside_marked(new) == outside_marked(HEURISTIC)
    assert outside_marked(HEURISTIC).count("<marked>") == 2
    assert (root / "other.py").read_text() == "def f(x):\n    return x + 1.5\n"


def test_deterministic_for_a_seed_and_different_for_another(tmp_path):
    def run(seed, offset=0):
        name = f"s{seed}-{offset}-{len(os.listdir(tmp_path))}"
        root = checkout_with(tmp_path, {"heuristic.py": HEURISTIC}, name=name)
        worker = make(seed=seed, seed_offset=offset)
        return [(worker.edit(root, "p"), (root / "heuristic.py").read_text()) for _ in range(5)]

    assert run(1) == run(1)
    assert run(1) != run(2)
    assert run(1) != run(1, offset=1)


def test_state_round_trip_continues_the_same_sequence(tmp_path):
    a_root = checkout_with(tmp_path, {"heuristic.py": HEURISTIC}, name="a")
    b_root = checkout_with(tmp_path, {"heuristic.py": HEURISTIC}, name="b")
    first = make(seed=5)
    for _ in range(3):
        first.edit(a_root, "p")
    shutil.rmtree(b_root)
    shutil.copytree(a_root, b_root)
    resumed = make(seed=5)
    resumed.set_state(json.loads(json.dumps(first.get_state())))  # states travel as JSON records
    assert resumed.ask("p") == first.ask("p")
    for _ in range(4):
        assert resumed.edit(b_root, "p") == first.edit(a_root, "p")
        assert (b_root / "heuristic.py").read_text() == (a_root / "heuristic.py").read_text()
    fresh = make(seed=5)
    fresh_root = checkout_with(tmp_path, {"heuristic.py": HEURISTIC}, name="fresh")
    fresh.edit(fresh_root, "p")  # without the state the sequence restarts: first edit again
    assert fresh.get_state()["edits"] == 1 and first.get_state()["edits"] == 7


def test_no_marked_function_means_no_change_and_says_why(tmp_path):
    plain = "import numpy as np\n\n\ndef priority(item, bins):\n    return -(bins - item)\n"
    root = checkout_with(tmp_path, {"heuristic.py": plain, "broken.py": f"{MARKER}\ndef f(:\n"})
    reply = make().edit(root, "improve")
    assert "no function marked" in reply and "no change" in reply
    assert (root / "heuristic.py").read_text() == plain


def test_bin_packing_terms_use_the_functions_own_names(tmp_path):
    seen = set()
    for seed in range(60):
        root = checkout_with(tmp_path, {"heuristic.py": BEST_FIT}, name=f"c{seed}")
        make(seed=seed, max_ops=1, probe="off").edit(root, "improve")
        fn = next(n for n in ast.walk(ast.parse((root / "heuristic.py").read_text())) if isinstance(n, ast.FunctionDef))
        seen |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
        seen |= {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
    assert {"item", "bins", "np", "where"} <= seen
    assert seen - {"item", "bins", "np", "where", "abs"}, "shapes such as exp, sqrt or log1p appear"


def test_config_validation():
    with pytest.raises(ValidationError, match="extra"):
        MutatorWorker.Config(type="mutator", temperature=1.0)
    with pytest.raises(ValidationError):
        MutatorWorker.Config(type="mutator", max_ops=0)
    with pytest.raises(ValidationError, match="at least one operator weight"):
        MutatorWorker.Config(type="mutator", weights={name: 0 for name in (
            "perturb_constant", "swap_operator", "swap_compare", "swap_function", "insert_term", "drop_term")})
    with pytest.raises(ValidationError, match="data_thresholds draws thresholds from the recorded calls"):
        MutatorWorker.Config(type="mutator", data_thresholds=0.5)
    with pytest.raises(ValidationError, match="data_thresholds draws thresholds from the recorded calls"):
        MutatorWorker.Config(type="mutator", data_thresholds=0.5, probe="off", probe_inputs="probe.json")
    assert MutatorWorker.Config(type="mutator", data_thresholds=0.5, probe_inputs="probe.json").data_thresholds == 0.5
    # YAML reads a bare `off` as false, in a config file and in a command-line override alike.
    assert MutatorWorker.Config(type="mutator", probe=load_yaml("off", "override")).probe == "off"
    with pytest.raises(ValidationError, match="Input should be 'off', 'equal' or 'order'"):
        MutatorWorker.Config(type="mutator", probe=True)


def test_weights_restrict_the_operators(tmp_path):
    root = checkout_with(tmp_path, {"heuristic.py": HEURISTIC})
    worker = make(seed=2, max_ops=1, weights={"perturb_constant": 1.0, "swap_operator": 0, "swap_compare": 0,
                                              "swap_function": 0, "insert_term": 0, "drop_term": 0})
    for _ in range(10):
        assert worker.edit(root, "p").startswith("mutate: perturb_constant in heuristic.py:")


# ---- three-way merge ----------------------------------------------------------------------------
LINES = "".join(f"line {i}\n" for i in range(1, 21))


def trees(tmp_path: Path, ancestor: dict, main: dict, donor: dict) -> tuple[Path, Path, Path]:
    return tuple(checkout_with(tmp_path, files, name) for name, files in
                 (("ancestor", ancestor), ("main", main), ("donor", donor)))


def test_merge_takes_donor_only_changes_and_keeps_main_only_changes(tmp_path):
    a, m, d = trees(tmp_path, {"x.py": "x = 1\n", "y.py": "y = 1\n"},
                    {"x.py": "x = 1\n", "y.py": "y = 2  # main\n"},
                    {"x.py": "x = 3  # donor\n", "y.py": "y = 1\n"})
    assert merge(a, m, d) == ["x.py"]
    assert (m / "x.py").read_text() == "x = 3  # donor\n"
    assert (m / "y.py").read_text() == "y = 2  # main\n"


def test_merge_combines_hunks_and_keeps_main_on_conflict(tmp_path):
    main = LINES.replace("line 2\n", "line 2 main\n").replace("line 10\n", "line 10 main\n")
    donor = LINES.replace("line 15\n", "line 15 donor\n").replace("line 10\n", "line 10 donor\n")
    a, m, d = trees(tmp_path, {"f.txt": LINES}, {"f.txt": main}, {"f.txt": donor})
    assert merge(a, m, d) == ["f.txt"]
    merged = (m / "f.txt").read_text()
    assert "line 2 main\n" in merged and "line 15 donor\n" in merged
    assert "line 10 main\n" in merged and "line 10 donor" not in merged
    assert merged.count("\n") == 20


def test_merge_carries_deletion_addition_and_executable_bit(tmp_path):
    a, m, d = trees(tmp_path, {"gone.py": "g\n", "run.sh": "echo\n", "same.py": "s\n"},
                    {"gone.py": "g\n", "run.sh": "echo\n", "same.py": "s\n", "mine.py": "m\n"},
                    {"run.sh": "echo\n", "same.py": "s\n", "pkg/new.py": "n\n"})
    (d / "run.sh").chmod(0o755)
    assert merge(a, m, d) == ["gone.py", "pkg/new.py", "run.sh"]
    assert not (m / "gone.py").exists()
    assert (m / "pkg/new.py").read_text() == "n\n"
    assert os.access(m / "run.sh", os.X_OK)
    assert (m / "mine.py").read_text() == "m\n"


def test_merge_keeps_main_when_one_side_deletes_what_the_other_changed(tmp_path):
    a, m, d = trees(tmp_path, {"f.py": "a\n", "b.bin": "\0x"}, {"f.py": "main\n", "b.bin": "\0main"},
                    {"b.bin": "\0donor"})
    assert merge(a, m, d) == []
    assert (m / "f.py").read_text() == "main\n" and (m / "b.bin").read_text() == "\0main"


def test_recombination_edit_merges_and_skips_reference_folders(tmp_path):
    root = checkout_with(tmp_path, {"heuristic.py": HEURISTIC, "extra.py": "a = 1\n",
                                    ".refs/ancestor/heuristic.py": HEURISTIC, ".refs/ancestor/extra.py": "a = 1\n",
                                    ".refs/donor/heuristic.py": HEURISTIC, ".refs/donor/extra.py": "a = 2\n"})
    worker = make()
    reply = worker.edit(root, "merge", references={"ancestor": ".refs/ancestor", "donor": ".refs/donor"})
    assert "extra.py" in reply and ".refs" not in reply.replace(".refs/", "")
    assert (root / "extra.py").read_text() == "a = 2\n"
    assert (root / "heuristic.py").read_text() == HEURISTIC
    assert (root / ".refs/ancestor/extra.py").read_text() == "a = 1\n"
    assert "merge" in worker.ask("what did you learn?")
    again = worker.edit(root, "merge", references={"ancestor": ".refs/ancestor", "donor": ".refs/donor"})
    assert "no change" in again


def test_mutation_ignores_reference_folders(tmp_path):
    root = checkout_with(tmp_path, {"heuristic.py": BEST_FIT, "ref/heuristic.py": BEST_FIT})
    make().edit(root, "p", references={"ancestor": "ref"})
    assert (root / "ref/heuristic.py").read_text() == BEST_FIT
    assert (root / "heuristic.py").read_text() != BEST_FIT


def test_mutants_run_on_bin_packing_inputs(tmp_path):
    """Inserted terms are ordinary numpy over the arguments: most mutants still score bins."""
    ok = 0
    bins, item = np.array([60.0, 45.0, 100.0]), 40
    for seed in range(40):
        root = checkout_with(tmp_path, {"heuristic.py": BEST_FIT}, name=f"c{seed}")
        make(seed=seed).edit(root, "p")
        namespace = {}
        exec((root / "heuristic.py").read_text(), namespace)
        with np.errstate(all="ignore"):
            out = np.broadcast_to(np.asarray(namespace["priority"](item, bins), dtype=float), bins.shape)
        ok += bool(np.isfinite(out).all())
    assert ok >= 36


# ---- typed atoms and the neutrality probe -------------------------------------------------------
TYPED_BEST_FIT = (
    f"import numpy as np\n\n\n{MARKER}\ndef priority(item: float, bins: np.ndarray) -> np.ndarray:\n"
    "    return -(bins - item)\n"
)


def _function(source: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef))


def test_scalar_args_are_the_numbers_beside_an_array():
    from rsi.workers._mutations import scalar_args

    assert scalar_args(_function(TYPED_BEST_FIT)) == {"item"}
    assert scalar_args(_function("def f(a: float, b: int):\n    return a + b\n")) == set(), "all scalars: none singled out"
    assert scalar_args(_function(BEST_FIT)) == set(), "no annotations: no hint"


def test_inserted_conditions_and_terms_vary_between_elements(tmp_path):
    """With ``item: float`` beside ``bins: np.ndarray``, no inserted comparison or term is built
    on ``item`` alone (it would be the same for every bin and change no choice)."""
    from rsi.workers._mutations import Mutations, scalar_args
    from rsi.workers._pyedit import module_names

    tree = ast.parse(TYPED_BEST_FIT)
    scalars, inserted = scalar_args(_function(TYPED_BEST_FIT)), 0
    for seed in range(200):
        fn = _function(TYPED_BEST_FIT)
        assert Mutations(np.random.default_rng(seed), module_names(tree)).apply("insert_term", fn)
        for node in ast.walk(fn):
            if isinstance(node, ast.Compare):
                inserted += 1
                used = {n.id for n in ast.walk(node.left) if isinstance(n, ast.Name)}
                assert used - scalars, ast.unparse(node)
    assert inserted > 20


def test_probe_finds_order_preserving_edits_neutral():
    from rsi.workers._probe import compare
    from rsi.workers._pyedit import ModuleNames

    names, parent = ModuleNames(numpy="np"), _function(TYPED_BEST_FIT)

    def child(body: str) -> ast.FunctionDef:
        return _function(f"def priority(item: float, bins: np.ndarray):\n    return {body}\n")

    def check(body, mode):
        return compare(parent, child(body), names, {"item"}, 10.0, mode).neutral

    assert check("-(bins - item) * 1", "equal") and check("-(bins - item) * 1", "order")
    assert not check("-(bins + item)", "equal"), "a shift changes the results"
    assert check("-(bins + item)", "order") and check("-2.5 * (bins - item) + 7", "order")
    assert not check("np.where((bins - item > 0) & (bins - item < 9), -(bins - item) * 20, -(bins - item))", "order")
    assert not check("bins - item", "order"), "a reversed order is a change"
    assert not check("-(bins - item) * 1", "off")


def test_probe_runs_only_pure_expression_functions():
    from rsi.workers._probe import is_pure
    from rsi.workers._pyedit import ModuleNames

    names = ModuleNames(numpy="np", math="math")
    assert is_pure(_function(TYPED_BEST_FIT), names)
    assert is_pure(_function('def f(a, b):\n    """Doc."""\n    g = a - b\n    return np.where(g > 1, g, -g)\n'), names)
    for body in (
        "import os\n    return a",
        "return open('x')",
        "return a.sum()",
        "return [a, b]",
        "return 'x' * 10",
        "return 3 ** 999999",
        "return np.save('x', a)",
        "for k in range(3):\n        a = a + k\n    return a",
        "return undefined_name",
        "return (lambda: a)()",
    ):
        assert not is_pure(_function(f"def f(a, b):\n    {body}\n"), names), body


def test_a_probe_that_passes_the_syntax_check_still_runs_only_in_the_jail(monkeypatch):
    """The syntax check admits chained integer powers (each power at most 64), which grow a
    number past any memory: 10**64, then **64 four times more is a 445 MB integer computed for
    minutes. The probe runs it in the jail: this process neither computes it nor grows, the jail
    ends at its limit, and the edit counts as a change (the probe decided nothing)."""
    import resource
    import time

    from rsi.sandbox import Limits
    from rsi.workers import _probe
    from rsi.workers._pyedit import ModuleNames

    monkeypatch.setattr(_probe, "PROBE_LIMITS", Limits(timeout_s=3, memory_mb=512, max_procs=8))
    bomb = _function("def f(a, b):\n    x = 10 ** 64\n    y = x ** 64\n    z = y ** 64\n    w = z ** 64\n"
                     "    v = w ** 64\n    return a + v\n")
    names = ModuleNames(numpy="np")
    assert _probe.is_pure(bomb, names)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    assert not _probe.compare(bomb, bomb, names, set(), 1.0, "equal").neutral
    assert time.monotonic() - start < 30
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 50 * 1024, "the bomb ran in this process"
    # the same check on a harmless function runs in the jail and finds it neutral
    assert _probe.compare(_function("def f(a, b):\n    return a - b\n"), _function("def f(a, b):\n    return a - b * 1\n"),
                          names, set(), 1.0, "equal").neutral


def test_the_jailed_probe_compares_nan_and_infinite_results_as_numbers():
    """Results the jail sends that JSON cannot hold (NaN, infinities) come back as numbers: an
    edit that keeps a NaN or an infinity where its parent has one is neutral, one that changes
    it is not."""
    from rsi.workers._probe import compare
    from rsi.workers._pyedit import ModuleNames

    names = ModuleNames(numpy="np")
    parent = _function("def f(a, b):\n    return np.sqrt(a - b) + 1 / (b - 3)\n")
    cases = [{"a": 2.0, "b": np.array([1.0, 3.0, 5.0])}, {"a": 3.0, "b": np.array([4.0, 1.0, 0.0])}]
    same = _function("def f(a, b):\n    return np.sqrt(a - b) * 1 + 1 / (b - 3)\n")
    other = _function("def f(a, b):\n    return np.sqrt(np.abs(a - b)) + 1 / (b - 3)\n")
    assert compare(parent, same, names, {"a"}, 1.0, "equal", cases).neutral
    assert not compare(parent, other, names, {"a"}, 1.0, "equal", cases).neutral


def test_order_probe_redraws_neutral_edits(tmp_path):
    """Over the same seeds, the order probe leaves fewer edits of best fit that only shift or
    rescale every bin's priority alike, and says how many it redrew."""
    from rsi.workers._probe import compare
    from rsi.workers._pyedit import ModuleNames

    def neutral_share(probe: str) -> tuple[int, int]:
        count, redrawn = 0, 0
        for seed in range(20):  # 8 of these 20 edits are neutral without the probe
            root = checkout_with(tmp_path, {"heuristic.py": TYPED_BEST_FIT}, name=f"{probe}{seed}")
            reply = make(seed=seed, probe=probe).edit(root, "improve")
            redrawn += "redrawn" in reply
            child = _function((root / "heuristic.py").read_text())
            count += compare(_function(TYPED_BEST_FIT), child, ModuleNames(numpy="np"), {"item"}, 10.0, "order").neutral
        return count, redrawn

    off, off_redrawn = neutral_share("off")
    order, order_redrawn = neutral_share("order")
    assert off >= 5 and off_redrawn == 0
    assert order == 0 and order_redrawn >= 5


def test_probe_cases_from_json_keep_only_numbers_and_number_lists():
    from rsi.workers._probe import load_cases

    cases = load_cases([{"item": 3, "bins": [4, 9]}, {"item": "x", "bins": [1]}, {"item": 2, "bins": [1, None]}, 7, {}])
    assert len(cases) == 1 and cases[0]["item"] == 3 and cases[0]["bins"].tolist() == [4, 9]
    assert load_cases({"item": 3}) == []


def test_probe_inputs_show_the_functions_real_domain(tmp_path):
    """On synthetic inputs (residuals of either sign) ``-r - 3*sqrt(|r|)`` ranks bins unlike
    ``-r``; on recorded inputs, where every residual r = bins - item is >= 0, it ranks them the
    same: neutral only there."""
    from rsi.workers._probe import compare, load_cases
    from rsi.workers._pyedit import ModuleNames

    parent = _function(TYPED_BEST_FIT)
    child = _function(
        "def priority(item: float, bins: np.ndarray):\n    return -(bins - item) - 3 * np.sqrt(np.abs(bins - item))\n"
    )
    recorded = load_cases([{"item": 30, "bins": [30, 35, 52, 100]}, {"item": 12, "bins": [13, 20, 99, 100]}])
    names = ModuleNames(numpy="np")
    assert not compare(parent, child, names, {"item"}, 10.0, "order").neutral
    assert compare(parent, child, names, {"item"}, 10.0, "order", recorded).neutral
    other_args = load_cases([{"x": 1, "y": [2, 3]}])
    assert not compare(parent, child, names, {"item"}, 10.0, "order", other_args).neutral, "cases for other names: synthetic"


def test_mutator_reads_probe_inputs_from_the_checkout(tmp_path):
    """With recorded inputs in the checkout, fewer of the mutator's edits of best fit rank the
    recorded bins as best fit does than with the synthetic probe alone."""
    from rsi.workers._probe import Probe, compare_many, load_cases
    from rsi.workers._pyedit import ModuleNames

    recorded = json.loads((Path(__file__).resolve().parents[1] / "targets/binpack_bestfit/probe.json").read_text())
    cases = load_cases(recorded)

    def neutral_count(probe_inputs):
        children = []
        for seed in range(25):  # 7 of these 25 edits are neutral on the recorded bins with the synthetic probe
            root = checkout_with(tmp_path, {"heuristic.py": TYPED_BEST_FIT, "probe.json": json.dumps(recorded)},
                                 name=f"{probe_inputs}{seed}")
            make(seed=seed, probe="order", probe_inputs=probe_inputs).edit(root, "improve")
            children.append(_function((root / "heuristic.py").read_text()))
        parent, names = _function(TYPED_BEST_FIT), ModuleNames(numpy="np")
        return sum(c.neutral for c in compare_many([Probe(parent, child, names, {"item"}, 10.0, "order", cases)
                                                    for child in children]))

    synthetic, with_inputs = neutral_count("missing.json"), neutral_count("probe.json")
    assert synthetic >= 4 and with_inputs < synthetic / 2


def test_compare_counts_the_probe_calls_that_decide_otherwise():
    """``compare`` counts the calls whose first-ranked element moves (``order``), or whose result
    changes (``equal``): a bonus for bins above 50 changes the result of every call with such a bin
    and moves the choice only in the one whose tightest fit is below 50."""
    from rsi.workers._probe import compare, load_cases
    from rsi.workers._pyedit import ModuleNames

    parent = _function(TYPED_BEST_FIT)
    child = _function(
        "def priority(item: float, bins: np.ndarray):\n    return -(bins - item) + 100.0 * (bins > 50)\n"
    )
    cases = load_cases([{"item": 30, "bins": [31, 60]}, {"item": 30, "bins": [55, 60]}, {"item": 5, "bins": [70, 90]},
                        {"item": 5, "bins": [10, 20]}])
    names = ModuleNames(numpy="np")
    assert compare(parent, child, names, {"item"}, 10.0, "order", cases) == (False, 1, 4)
    assert compare(parent, child, names, {"item"}, 10.0, "equal", cases) == (False, 3, 4)
    assert compare(parent, parent, names, {"item"}, 10.0, "order", cases) == (True, 0, 4)


def test_local_edits_change_at_most_local_decisions_of_the_recorded_calls(tmp_path):
    """With ``local_share`` 1 every edit of best fit that reports itself local picks another bin
    than best fit on at most ``local_decisions`` of the recorded calls, counted here independently
    (the jailed probe); one that found none in its attempts says so. Without the bound some of the
    same seeds' edits move many more."""
    from rsi.workers._probe import compare, load_cases
    from rsi.workers._pyedit import ModuleNames

    recorded = json.loads((Path(__file__).resolve().parents[1] / "targets/binpack_bestfit/probe.json").read_text())
    cases = load_cases(recorded)

    def moved(local_share: float) -> list[int]:
        out = []
        for seed in range(6):
            root = checkout_with(tmp_path, {"heuristic.py": TYPED_BEST_FIT, "probe.json": json.dumps(recorded)},
                                 name=f"{local_share}-{seed}")
            worker = make(seed=seed, probe="order", probe_inputs="probe.json", local_share=local_share)
            reply = worker.edit(root, "improve")
            child = _function((root / "heuristic.py").read_text())
            seen = compare(_function(TYPED_BEST_FIT), child, ModuleNames(numpy="np"), {"item"}, 10.0, "order", cases)
            assert seen.changed is not None
            if local_share == 0:
                assert "local" not in reply, reply
                out.append(seen.changed)
            elif "(no local edit found)" not in reply:
                assert f"[local: {seen.changed} of {len(cases)} probe calls" in reply, reply
                out.append(seen.changed)
        return out

    local = moved(1.0)
    assert len(local) >= 3 and max(local) <= 2, local
    assert max(moved(0.0)) > 2


def test_edits_probed_in_batches_are_the_edits_probed_one_at_a_time(tmp_path, monkeypatch):
    """Drawing ``PROBE_BATCH`` edits and probing them in one jailed process makes exactly the
    edits (and leaves exactly the generator state) of drawing and probing one at a time, with
    fewer jail starts; the batches are counted by a spy around the probe's one jail call."""
    import rsi.workers._probe as probe
    import rsi.workers.mutator as mutator

    recorded = json.loads((Path(__file__).resolve().parents[1] / "targets/binpack_bestfit/probe.json").read_text())
    jails = [0]
    real_run = probe._run

    def counting_run(jobs):
        jails[0] += 1
        return real_run(jobs)

    monkeypatch.setattr(probe, "_run", counting_run)

    def edits(batch: int) -> tuple[list, int]:
        monkeypatch.setattr(mutator, "PROBE_BATCH", batch)
        jails[0], out = 0, []
        for seed in range(3):
            root = checkout_with(tmp_path, {"heuristic.py": TYPED_BEST_FIT, "probe.json": json.dumps(recorded)},
                                 name=f"b{batch}-{seed}")
            worker = make(seed=seed, probe="order", probe_inputs="probe.json", local_share=1.0)
            replies = [worker.edit(root, "improve") for _ in range(2)]
            out.append((replies, (root / "heuristic.py").read_text(), worker.get_state()["rng"]))
        return out, jails[0]

    one_by_one, starts_one = edits(1)
    batched, starts_batched = edits(mutator.PROBE_BATCH if mutator.PROBE_BATCH > 1 else 8)
    assert batched == one_by_one
    assert any("redrawn" in r for replies, _, _ in one_by_one for r in replies), "some draws were redrawn"
    assert starts_batched < starts_one / 2, (starts_batched, starts_one)


def test_a_batch_whose_jail_fails_as_a_whole_probes_each_edit_alone(monkeypatch):
    """A batch whose jailed process fails as a whole costs no edit its verdict: each is probed
    again alone, as one at a time. Here the batch's answer outgrows the jail's output limit
    (long recorded inputs: one probe's results fit, three probes' do not)."""
    import rsi.workers._probe as probe
    from rsi.workers._probe import Probe, compare, compare_many
    from rsi.workers._pyedit import ModuleNames

    rng = np.random.default_rng(0)
    cases = [{"item": float(rng.uniform(0, 50)), "bins": rng.uniform(50, 100, size=300)} for _ in range(64)]
    names = ModuleNames(numpy="np")
    parent = _function(TYPED_BEST_FIT)
    children = [_function(f"def priority(item: float, bins: np.ndarray):\n    return {body}\n")
                for body in ("-(bins - item) * 2", "-(bins - item) + (bins > 70) * 40.0", "bins - item")]
    probes = [Probe(parent, child, names, {"item"}, 10.0, "order", cases) for child in children]
    alone = [compare(*p) for p in probes]
    calls = []
    real_run = probe._run
    monkeypatch.setattr(probe, "_run", lambda jobs: calls.append(len(jobs)) or real_run(jobs))
    assert compare_many(probes) == alone
    assert calls == [3, 1, 1, 1], "the batch failed, then each probe ran alone"
    assert [c.neutral for c in alone] == [True, False, False] and all(c.calls == 64 for c in alone)


def test_local_edits_need_a_probe():
    with pytest.raises(ValidationError, match="local_share bounds the decisions"):
        MutatorWorker.Config(type="mutator", local_share=0.5, probe="off")
    assert MutatorWorker.Config(type="mutator", local_share=0.5, probe="order").local_decisions == 2
    with pytest.raises(ValidationError):
        MutatorWorker.Config(type="mutator", local_share=1.5, probe="order")


def _thresholds(fn: ast.FunctionDef) -> list[float]:
    """The numbers compared against in ``fn``'s conditions, apart from the band's lower 0."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and isinstance(node.comparators[0], ast.Constant):
            value = node.comparators[0].value
            if value != 0:
                out.append(float(value))
    return out


def test_data_thresholds_fall_between_neighbouring_observed_gaps():
    """With ``data_thresholds`` 1, every inserted condition on the gap ``bins - item`` compares it
    with a value halfway between two gaps the recorded calls show, so on those calls it is true
    for some bins and false for others; the log-uniform draws land there far less often."""
    from rsi.workers._mutations import Mutations
    from rsi.workers._probe import load_cases
    from rsi.workers._pyedit import module_names

    cases = load_cases([{"item": 30, "bins": [30, 35, 52, 100]}, {"item": 12, "bins": [13, 20, 99, 100]}])
    gaps = np.unique(np.concatenate([c["bins"] - c["item"] for c in cases]))  # 0 1 5 8 22 70 87 88
    midpoints = {float(f"{(a + b) / 2:.3g}") for a, b in zip(gaps[:-1], gaps[1:])}
    tree = ast.parse(TYPED_BEST_FIT)

    def share_on_midpoints(data_thresholds: float) -> float:
        on, seen = 0, 0
        for seed in range(300):
            fn = _function(TYPED_BEST_FIT)
            mutations = Mutations(np.random.default_rng(seed), module_names(tree), 10.0, cases, data_thresholds)
            mutations.apply("insert_term", fn)
            text = ast.unparse(fn)
            if "bins - item >" not in text and "bins - item <" not in text:
                continue  # a condition on another quantity, or no condition
            for value in _thresholds(fn):
                seen += 1
                on += value in midpoints
        assert seen > 20
        return on / seen

    assert share_on_midpoints(1.0) > 0.9
    assert share_on_midpoints(0.0) < 0.2


def test_data_thresholds_skip_rebound_arguments_and_reach_the_worker(tmp_path):
    """An argument the body assigns again no longer holds the recorded values, so its
    thresholds are drawn as before; and the worker's option changes the edits it makes."""
    from rsi.workers._mutations import Mutations
    from rsi.workers._probe import load_cases
    from rsi.workers._pyedit import ModuleNames

    cases = load_cases([{"item": 30, "bins": [30, 35, 52, 100]}])
    rebound = _function("def priority(item, bins):\n    bins = bins * 2\n    return -(bins - item)\n")
    mutations = Mutations(np.random.default_rng(0), ModuleNames(numpy="np"), 10.0, cases, 1.0)
    mutations.apply("drop_term", rebound)  # sets up which names the body rebinds
    assert mutations._observed(ast.parse("bins - item", mode="eval").body) is None
    assert mutations._observed(ast.parse("item", mode="eval").body).tolist() == [30.0]

    def edits(share: float) -> list[str]:
        out = []
        for seed in range(20):
            root = checkout_with(
                tmp_path, {"heuristic.py": TYPED_BEST_FIT, "probe.json": json.dumps([{"item": 30, "bins": [30, 35]}])},
                name=f"share{share}-{seed}",
            )
            make(seed=seed, probe="order", probe_inputs="probe.json", data_thresholds=share).edit(root, "improve")
            out.append((root / "heuristic.py").read_text())
        return out

    assert edits(0.0) != edits(1.0)


# ---- grafts: subtree crossover from a donor member -----------------------------------------------
BAND_DONOR = (
    f"import numpy as np\n\n\n{MARKER}\ndef priority(item: float, bins: np.ndarray) -> np.ndarray:\n"
    "    gap = bins - item\n"
    "    return np.where((bins - item > 0) & (bins - item < 29.5), -item * 0.25, -(bins - item)) + gap * 0.0\n"
)
BAND_PARENT = (
    f"import numpy as np\n\n\n{MARKER}\ndef priority(item: float, bins: np.ndarray) -> np.ndarray:\n"
    "    return np.where(bins - item < 2, 100 - bins, -(bins - item))\n"
)


def _one_replaced(parent: str, donor: str) -> tuple[set[str], set[str]]:
    """Every text of the parent's function with one expression replaced by one of the donor's
    compound expressions: (kind kept: a condition for a condition, a value for a value; kind
    mixed). Built here by brute force, independently of the mutator's own site search."""
    from rsi.workers._mutations import _is_condition

    pieces = [n for n in ast.walk(_function(donor)) if isinstance(n, ast.expr)
              and not isinstance(n, (ast.Name, ast.Constant)) and not isinstance(getattr(n, "ctx", None), ast.Store)]
    same, mixed = set(), set()
    count = sum(1 for n in ast.walk(_function(parent)) if isinstance(n, ast.expr))
    for k in range(count):
        for piece in pieces:
            fn = _function(parent)
            node = [n for n in ast.walk(fn) if isinstance(n, ast.expr)][k]
            kind_kept = _is_condition(node) == _is_condition(piece)
            for holder in ast.walk(fn):
                for field, value in ast.iter_fields(holder):
                    if value is node:
                        setattr(holder, field, piece)
                    elif isinstance(value, list) and any(v is node for v in value):
                        value[[id(v) for v in value].index(id(node))] = piece
            (same if kind_kept else mixed).add(ast.unparse(fn))
    return same, mixed - same


def test_a_graft_copies_one_donor_expression_into_a_place_of_its_kind(tmp_path):
    """Every graft is the parent with one expression replaced by one of the donor's: a condition
    only where a condition was, a value where a value was, never one that needs a name the parent
    does not have (the donor's local ``gap``); the donor's folder is left as it was."""
    same_kind, other_kind = _one_replaced(BAND_PARENT, BAND_DONOR)
    replies, children = set(), set()
    for seed in range(30):
        root = checkout_with(tmp_path, {"heuristic.py": BAND_PARENT, ".refs/donor/heuristic.py": BAND_DONOR},
                             name=f"g{seed}")
        reply = make(seed=seed).edit(root, "improve", references={"donor": ".refs/donor"})
        replies.add(reply.split(" [")[0])
        child = (root / "heuristic.py").read_text()
        assert (root / ".refs/donor/heuristic.py").read_text() == BAND_DONOR
        assert child != BAND_PARENT and "gap" not in child
        text = ast.unparse(_function(child))
        assert text in same_kind and text not in other_kind
        children.add(text)
    assert replies == {"mutate: graft in heuristic.py:priority"}
    assert len(children) >= 10, "different seeds graft different pieces into different places"


def test_a_donor_without_the_marked_function_changes_nothing_and_says_why(tmp_path):
    root = checkout_with(tmp_path, {"heuristic.py": BAND_PARENT, ".refs/donor/other.py": "x = 1\n"})
    reply = make().edit(root, "improve", references={"donor": ".refs/donor"})
    assert "donor has none of the marked functions" in reply
    assert (root / "heuristic.py").read_text() == BAND_PARENT


def test_grafts_do_not_change_the_draws_of_plain_mutations(tmp_path):
    """Without a donor the mutator makes exactly the edits it made before grafts existed, so runs
    repeat earlier ones decision for decision. The digest covers six successive edits of two
    seeds, and was taken with the mutator as it stood before grafts (commit a51f619). A deliberate
    change to the operators' draws changes it: update it then, knowing that earlier runs no
    longer repeat."""
    import hashlib

    texts = []
    for seed, source in ((5, HEURISTIC), (11, BEST_FIT)):
        root = checkout_with(tmp_path, {"heuristic.py": source}, name=f"seed{seed}")
        worker = make(seed=seed)
        for _ in range(6):
            worker.edit(root, "improve")
            texts.append((root / "heuristic.py").read_text())
    assert len(set(texts)) == 12
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()
    assert digest == "c9c7839b28881980ec39c358accb06e198f9e2d1883e3bdef757cb8a7d32259c"


def _numbers(fn: ast.FunctionDef) -> list[float]:
    """The function's numeric literals in walk order, a negated literal as one negative number."""
    out = []
    negated = {id(n.operand) for n in ast.walk(fn) if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub)}
    for node in ast.walk(fn):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            out.append(-float(node.operand.value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and id(node) not in negated:
            out.append(float(node.value))
    return out


def test_jitter_constants_moves_every_free_constant_a_little_and_keeps_signs_zeros_and_indices(tmp_path):
    """A joint step: each nonzero literal outside subscripts changes by a small factor with its
    sign, zeros stay, and an index (``a[2]``) is never touched, since it is no quantity."""
    source = (f"import numpy as np\n\n\n{MARKER}\ndef priority(item, bins):\n"
              "    r = bins - item\n"
              "    return np.where(r < 2.0, 1000.0 - r, -np.abs(r - 40.0)) + 0.0 * bins[0] - 3.5 * (r > 12)\n")
    root = checkout_with(tmp_path, {"heuristic.py": source})
    worker = make(seed=4, max_ops=1, weights={"perturb_constant": 0, "swap_operator": 0, "swap_compare": 0,
                                              "swap_function": 0, "insert_term": 0, "drop_term": 0,
                                              "jitter_constants": 1.0})
    before = _numbers(_function(source))
    moved = 0
    for _ in range(20):
        (root / "heuristic.py").write_text(source)
        assert worker.edit(root, "p").startswith("mutate: jitter_constants in heuristic.py:")
        after_source = (root / "heuristic.py").read_text()
        after = _numbers(_function(after_source))
        assert len(after) == len(before)
        assert "bins[0]" in after_source
        for old, new in zip(before, after):
            if old == 0:
                assert new == 0
            else:
                assert np.sign(new) == np.sign(old) and 0.4 < new / old < 2.5
        moved += sum(new != old for old, new in zip(before, after) if old != 0)
    assert moved > 20 * 3  # most of the five nonzero constants move in most edits


def test_jitter_constants_is_off_by_default():
    assert MutatorWorker.Config(type="mutator").weights.jitter_constants == 0


ONLY_REBUILD = {"perturb_constant": 0, "swap_operator": 0, "swap_compare": 0, "swap_function": 0,
                "insert_term": 0, "drop_term": 0, "rebuild_band": 1.0}


def _band_parts(source: str) -> tuple[str, float, float, float]:
    """(the quantity, the cut, the first band's constant, the target) of a rebuilt return
    ``np.where(x < t, k - x, -np.abs(x - c))``; fails on any other shape."""
    ret = _function(source).body[-1].value
    assert ast.unparse(ret.func) == "np.where" and len(ret.args) == 3
    cond, first, rest = ret.args
    assert isinstance(cond.ops[0], ast.Lt) and len(cond.ops) == 1
    x = ast.unparse(cond.left)
    assert isinstance(first, ast.BinOp) and isinstance(first.op, ast.Sub) and ast.unparse(first.right) == x
    assert ast.unparse(rest.operand.args[0].left) == x and ast.unparse(rest.operand.func) == "np.abs"
    return x, cond.comparators[0].value, first.left.value, rest.operand.args[0].right.value


def test_rebuild_band_puts_a_whole_two_band_rule_on_the_gap_in_place_of_the_return(tmp_path):
    """Exact fits first, else a gap near a target: the cut is small, the target wider, both drawn
    around the scale, and the first band always outranks the other (k above the cut)."""
    root = checkout_with(tmp_path, {"heuristic.py": TYPED_BEST_FIT})
    worker = make(seed=3, max_ops=1, weights=ONLY_REBUILD)
    cuts, targets = [], []
    for _ in range(40):
        (root / "heuristic.py").write_text(TYPED_BEST_FIT)
        assert worker.edit(root, "p").startswith("mutate: rebuild_band in heuristic.py:")
        x, cut, k, target = _band_parts((root / "heuristic.py").read_text())
        assert x == "bins - item", "the gap: a difference of the varying array and the scalar"
        assert k > cut
        cuts.append(cut)
        targets.append(target)
    assert 0.5 <= min(cuts) and max(cuts) <= 20 and min(cuts) < 2 < max(cuts)
    assert 5 <= min(targets) and max(targets) <= 100 and min(targets) < 40 < max(targets)


def test_rebuild_band_orients_the_gap_by_the_recorded_inputs_and_draws_targets_from_them():
    """Without types to say which name varies, the recorded inputs choose the order that is
    mostly non-negative; with data thresholds the target lies between two observed gaps above
    the cut, where a decision on real inputs changes."""
    from rsi.workers._mutations import Mutations
    from rsi.workers._probe import load_cases
    from rsi.workers._pyedit import ModuleNames

    cases = load_cases([{"item": 30, "bins": [30, 35, 52, 100]}, {"item": 12, "bins": [13, 20, 99, 100]}])
    gaps = np.unique(np.concatenate([c["bins"] - c["item"] for c in cases]))
    midpoints = {float(f"{(a + b) / 2:.3g}") for a, b in zip(gaps[:-1], gaps[1:])}
    for seed in range(30):
        fn = _function("import numpy as np\ndef priority(item, bins):\n    return item - bins\n")
        assert Mutations(np.random.default_rng(seed), ModuleNames(numpy="np"), 10.0, cases, 1.0).apply("rebuild_band", fn)
        x, cut, _, target = _band_parts(ast.unparse(fn))
        assert x == "bins - item"
        assert target in midpoints and target > cut


def test_rebuild_band_needs_numpy_and_is_off_by_default():
    from rsi.workers._mutations import Mutations
    from rsi.workers._pyedit import ModuleNames

    fn = _function("def priority(item, bins):\n    return -(bins - item)\n")
    assert not Mutations(np.random.default_rng(0), ModuleNames()).apply("rebuild_band", fn)
    assert ast.unparse(fn.body[-1]) == "return -(bins - item)"
    assert MutatorWorker.Config(type="mutator").weights.rebuild_band == 0


ONLY_STEP = {**ONLY_REBUILD, "rebuild_band": 0, "step_threshold": 1.0}


def test_step_threshold_moves_one_cut_or_target_by_a_whole_step_and_nothing_else(tmp_path):
    """Of a two-band rule with a weight and a scaled step, only the literals a varying quantity is
    compared with or measured from move (the cut 1.64, the target 48, the step's 12), each by
    1 to 3 units of a tenth of the scale; the first band's 1000, the weight 3.5 and the index
    stay, and every one of the six steps is drawn."""
    source = (f"import numpy as np\n\n\n{MARKER}\ndef priority(item: float, bins: np.ndarray) -> np.ndarray:\n"
              "    r = bins - item\n"
              "    return np.where(r < 1.64, 1000.0 - r, -np.abs(r - 48.0)) - 3.5 * (r > 12) + 0.0 * bins[0]\n")
    root = checkout_with(tmp_path, {"heuristic.py": source})
    worker = make(seed=5, max_ops=1, weights=ONLY_STEP)
    before = _numbers(_function(source))
    moved: dict[float, set[float]] = {}
    for _ in range(60):
        (root / "heuristic.py").write_text(source)
        assert worker.edit(root, "p").startswith("mutate: step_threshold in heuristic.py:")
        after = _numbers(_function((root / "heuristic.py").read_text()))
        changed = [(old, new) for old, new in zip(before, after) if old != new]
        assert len(after) == len(before) and len(changed) == 1, changed
        (old, new), = changed
        moved.setdefault(old, set()).add(round(new - old, 6))
    assert set(moved) == {1.64, 48.0, 12}, moved
    assert set().union(*moved.values()) == {-3, -2, -1, 1, 2, 3}, moved
    assert all(isinstance(step, int) or step.is_integer() for steps in moved.values() for step in steps)


def test_step_threshold_finds_no_threshold_in_best_fit_and_is_off_by_default():
    from rsi.workers._mutations import Mutations
    from rsi.workers._pyedit import ModuleNames

    fn = _function("def priority(item, bins):\n    return -(bins - item) * 2.0\n")
    assert not Mutations(np.random.default_rng(0), ModuleNames()).apply("step_threshold", fn)
    assert MutatorWorker.Config(type="mutator").weights.step_threshold == 0
