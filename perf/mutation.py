"""Mutation testing of the modules whose silent breakage would cost the most, with mutmut 3.

    .venv/bin/pip install -e '.[dev,mutation]'
    .venv/bin/python perf/mutation.py                       # every target, about 2-5 minutes on 2 cores
    .venv/bin/python perf/mutation.py records sandbox-limits # some targets
    .venv/bin/python perf/mutation.py --list                 # the targets, their functions and tests

Each target is a set of source files, the functions in them that are mutated, and a fast test
selection that runs those functions in this process: no Ray, no subprocess-only path (a test that
only reaches the code through a child process cannot kill a mutant of it, and costs seconds per
mutant). mutmut runs in a scratch copy of the tree, ``build/mutation/<target>/`` (git-ignored), so
the work tree is never mutated, not even for a moment, and two runs never see each other's files.

mutmut rewrites every function of a listed file into a trampoline over all its mutants, runs the
selection once to learn which test reaches which function, then runs, per mutant, only the tests
that reach the mutated function, in a forked child with a CPU-time limit (``timeout_multiplier``
x the tests' measured time, at least 2 x ``timeout_constant`` seconds) and pytest-timeout's
wall-clock limit. Mutants of functions outside a target's list are generated but never run.

The report (stdout, and ``--report``, default ``build/mutation/report.md``) gives per target:
mutants, killed, survived, no tests (no test of the selection reaches the function: as bad as
survived), timeout (counted as killed by mutmut: the mutant made a test hang), equivalent
(survivors listed in ``EQUIVALENT`` below with the reason they cannot be observed), and then the
diff of every survivor that is not listed. Read a survivor as "a change to this line that no test
notices": add a test that fails on it, or, when no behaviour can tell the two apart, list it in
``EQUIVALENT`` with a one-line reason. Re-run only what you changed by naming the target.

Exit status: 0 when every target ran; 1 when one failed to run (its log is named); with
``--strict``, also 1 when a survivor or a no-tests mutant is left that is not listed as equivalent.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("rsi", "actors", "algorithms", "benchmarks")  # copied whole: imports resolve inside the copy
ALSO = ("targets", "tests")  # data the tests read (targets/table_demo), and the tests themselves


@dataclass(frozen=True)
class Target:
    """``files``: what mutmut rewrites; ``functions``: fnmatch patterns over mutmut's mutant names
    (``pkg.module.x_function__mutmut_N``, ``pkg.module.xǁClassǁmethod__mutmut_N``) that are run and
    counted; ``tests``: the pytest selection (files that do not exist yet are skipped)."""

    about: str
    files: tuple[str, ...]
    functions: tuple[str, ...]
    tests: tuple[str, ...]


def _fns(module: str, *names: str) -> tuple[str, ...]:
    """Mutant-name patterns for top-level functions (``name``) and methods (``Class.method``)."""
    out = []
    for name in names:
        cls, _, fn = name.rpartition(".")
        out.append(f"{module}.xǁ{cls}ǁ{fn}__mutmut_*" if cls else f"{module}.x_{fn}__mutmut_*")
    return tuple(out)


TARGETS: dict[str, Target] = {
    "darwinx-gate": Target(
        about="DarwinX's preserve-and-extend gate: solved set, gain/regression mass, screen, sign test + bootstrap",
        files=("algorithms/darwinx/gate_stats.py",),
        functions=_fns(
            "algorithms.darwinx.gate_stats", "solved_set", "gate_figures", "screen_passes", "paired_uncertainty"
        ),
        tests=("tests/test_darwinx_gate_stats.py", "tests/test_mutation_killers_darwinx.py"),
    ),
    "evaluator-cache": Target(
        about="the rollout cache and resume preload (Evaluator's in-process methods) and the Results schema",
        files=("actors/evaluator.py", "rsi/results.py"),
        # __init__ and _run need a live Ray (ray.put, remote tasks): they are measured by the Ray
        # tests, not here. evaluate() is in-process whenever every rollout is a cache hit.
        functions=_fns(
            "actors.evaluator",
            "sample_seed",
            "Evaluator.split_ids",
            "Evaluator.preload",
            "Evaluator.progress",
            "Evaluator.stats",
            "Evaluator.evaluate",
            "Evaluator._specs",
            "Evaluator._batch_size",
        )
        + _fns(
            "rsi.results",
            "rows_to_table",
            "empty_table",
            "concat",
            "ScoreMatrix.__init__",
            "ScoreMatrix.from_table",
            "ScoreMatrix.avg_at_k",
            "ScoreMatrix.mean",
            "per_dataset_means",
            "metric_means",
        ),
        tests=("tests/test_records.py", "tests/test_mutation_killers_evaluator.py"),
    ),
    "sandbox-limits": Target(
        about="the rollout jail's limits and verdicts: Limits validation, rlimit pairs, status/reason of a run",
        files=("rsi/sandbox.py",),
        # Limits.cpu_limit_s is a @property: mutmut never mutates decorated functions.
        functions=_fns(
            "rsi.sandbox",
            "Limits.__post_init__",
            "_rlimits",
            "_clamp",
            "_verdict",
            "_parse",
            "_signal_name",
            "_last_line",
            "_clip",
        ),
        # test_sandbox.py's other tests reach these only around a child process (seconds each)
        tests=tuple(
            f"tests/test_sandbox.py::{t}"
            for t in (
                "test_scrubbed_env_keeps_only_the_allowlist",
                "test_misuse_raises",
                "test_candidate_script_that_cannot_start_is_its_error",
            )
        )
        + ("tests/test_mutation_killers_sandbox.py",),
    ),
    "meta-gate-se": Target(
        about="meta-evolve's proposal gate (AST whitelist, grid, build) and the paired gate's standard error",
        files=("algorithms/meta/proposal_check.py", "algorithms/meta/stats.py", "algorithms/meta/validation.py"),
        functions=("algorithms.meta.proposal_check.*", "algorithms.meta.stats.*")
        + _fns("algorithms.meta.validation", "_se"),
        # test_meta_proposal_check.py judges proposals through the rollout jail (algorithms.meta.jailed): a
        # child process, out of a mutant's reach. test_mutation_killers_meta.py calls the layers.
        tests=("tests/test_meta_stats.py", "tests/test_mutation_killers_meta.py"),
    ),
    "records": Target(
        about="the run directory: atomic writes, fsynced decision lines, torn-line recovery, snapshots, state",
        files=("rsi/records.py",),
        functions=("rsi.records.*",),
        tests=("tests/test_records.py", "tests/test_mutation_killers_records.py"),
    ),
}

# Survivors that no test can tell apart from the original. Matched on the changed lines of the
# mutant's diff (whitespace-stripped), not on mutmut's numbers, which shift when a file changes:
# (file, line removed, line added, reason); "file::function" limits an entry to one function.
_TAKE = "return table.take(pa.array(idx, {1})) if {0} else empty_table(), fresh, traces"
_MEANS = "means = np.nanmean(self.scores, axis=1) if {} else np.zeros({})"
_DUMPS = 'return json.dumps(obj, default=_json_default, ensure_ascii={}, separators=(",", ":"))'
_JSON = "self.write_bytes(rel, json.dumps(obj, default=_json_default, indent=2, ensure_ascii={}).encode())"
_SEL = "if fs.get_file_info(pafs.FileSelector(root, {})):"
_PAIRED = "a, b = np.asarray(before, {}), np.asarray(after, {})"
_VALIDATE = "a, b = np.array([old[k] for k in keys], {}), np.array([new[k] for k in keys], {})"
_IMPORT = "return builtins.__import__(name, {})"
_WHERE = "where = f\"line {{getattr(node, 'lineno', {})}}\""
_P = "p = 1.0 if {} else min(1.0, 2 * sum(math.comb(n, k) for k in {}) / 2**n)"
EQUIVALENT: list[tuple[str, str, str, str]] = [
    # ---- algorithms/darwinx/gate_stats.py
    (
        "algorithms/darwinx/gate_stats.py",
        _P.format("n == 0", "range(0, min(wins, losses) + 1)"),
        _P.format("(n == 0) and False", "range(0, min(wins, losses) + 1)"),
        "at n = 0 the formula gives min(1, 2 * C(0, 0) / 2**0) = 1.0 too",
    ),
    (
        "algorithms/darwinx/gate_stats.py",
        _P.format("n == 0", "range(0, min(wins, losses) + 1)"),
        _P.format("n == 1", "range(0, min(wins, losses) + 1)"),
        "the formula is 1.0 at n = 0 (2 / 1, capped) and at n = 1 (2 * C(1, 0) / 2)",
    ),
    (
        "algorithms/darwinx/gate_stats.py",
        _P.format("n == 0", "range(0, min(wins, losses) + 1)"),
        _P.format("n == 0", "range(min(wins, losses) + 1)"),
        "range(0, x) is range(x)",
    ),
    (
        "algorithms/darwinx/gate_stats.py",
        "sums = diffs[rng.integers(0, len(diffs), size=(resamples, len(diffs)))].sum(axis=1)",
        "sums = diffs[rng.integers(len(diffs), size=(resamples, len(diffs)))].sum(axis=1)",
        "Generator.integers(n) is integers(0, n): same draws from the same stream",
    ),
    # ---- actors/evaluator.py, rsi/results.py
    (
        "actors/evaluator.py",
        'return int.from_bytes(digest[:7], "big")',
        "return int.from_bytes(digest[:7], )",
        "Python >= 3.11 defaults byteorder to 'big' (3.10 would raise TypeError)",
    ),
    (
        "actors/evaluator.py",
        "self.progress_by_req.pop(rid, None)",
        "self.progress_by_req.pop(rid, )",
        "the entry is always there: it is inserted just before the try",
    ),
    (
        "actors/evaluator.py",
        _TAKE.format("idx", "pa.int64()"),
        _TAKE.format("(idx) or True", "pa.int64()"),
        "with no rows, take([]) of the concatenated (schema) table equals empty_table()",
    ),
    (
        "actors/evaluator.py",
        _TAKE.format("idx", "pa.int64()"),
        _TAKE.format("idx", "None"),
        "pa.array infers int64 from a list of Python ints",
    ),
    (
        "actors/evaluator.py",
        _TAKE.format("idx", "pa.int64()"),
        _TAKE.format("idx", ""),
        "pa.array infers int64 from a list of Python ints",
    ),
    (
        "rsi/results.py",
        _MEANS.format("self.scores.shape[1]", "len(self.task_ids)"),
        _MEANS.format("(self.scores.shape[1]) or True", "len(self.task_ids)"),
        "unreachable branch: shape[1] == 0 means size == 0, which returned above",
    ),
    (
        "rsi/results.py",
        _MEANS.format("self.scores.shape[1]", "len(self.task_ids)"),
        _MEANS.format("self.scores.shape[1]", "None"),
        "unreachable branch: shape[1] == 0 means size == 0, which returned above",
    ),
    # ---- algorithms/meta/stats.py, algorithms/meta/proposal_check.py
    *[
        (
            "algorithms/meta/stats.py",
            _PAIRED.format("dtype=float", "dtype=float"),
            _PAIRED.format(*new),
            "scores are int, float or bool: with the other side a float array the difference is the same floats",
        )
        for new in (
            ("dtype=None", "dtype=float"),
            ("", "dtype=float"),
            ("dtype=float", "dtype=None"),
            ("dtype=float", ""),
        )
    ],
    *[
        (
            "algorithms/meta/stats.py",
            _VALIDATE.format("dtype=float", "dtype=float"),
            _VALIDATE.format(*new),
            "scores are int, float or bool: with the other side a float array the difference is the same floats",
        )
        for new in (
            ("dtype=None", "dtype=float"),
            ("", "dtype=float"),
            ("dtype=float", "dtype=None"),
            ("dtype=float", ""),
        )
    ],
    *[
        (
            "algorithms/meta/proposal_check.py",
            _IMPORT.format("globals, locals, fromlist, level"),
            _IMPORT.format(new),
            "an absolute import (the only kind let through) reads neither globals nor locals, and level is 0",
        )
        for new in ("None, locals, fromlist, level", "globals, None, fromlist, level", "globals, locals, fromlist, ")
    ],
    *[
        (
            "algorithms/meta/proposal_check.py::_check_policy_node",
            _WHERE.format("'?'"),
            _WHERE.format(new),
            "every node kind the policy walk refuses carries a line number",
        )
        for new in ("None", "'XX?XX'")
    ],
    # ---- rsi/records.py
    (
        "rsi/records.py",
        _DUMPS.format("False"),
        _DUMPS.format("None"),
        "json tests ensure_ascii for truth: None is False",
    ),
    ("rsi/records.py", _JSON.format("False"), _JSON.format("None"), "json tests ensure_ascii for truth: None is False"),
    (
        "rsi/records.py",
        'self.write_bytes("config.yaml", yaml.safe_dump(redacted, sort_keys=False).encode())',
        'self.write_bytes("config.yaml", yaml.safe_dump(redacted, sort_keys=None).encode())',
        "yaml tests sort_keys for truth: None is False",
    ),
    (
        "rsi/records.py",
        _SEL.format("allow_not_found=True"),
        _SEL.format("allow_not_found=None"),
        "only asked when root is an existing directory: never not found",
    ),
    (
        "rsi/records.py",
        _SEL.format("allow_not_found=True"),
        _SEL.format(""),
        "only asked when root is an existing directory: never not found",
    ),
    (
        "rsi/records.py",
        _SEL.format("allow_not_found=True"),
        _SEL.format("allow_not_found=False"),
        "only asked when root is an existing directory: never not found",
    ),
    (
        "rsi/records.py",
        "fs.create_dir(root, recursive=True)",
        "fs.create_dir(root, )",
        "pyarrow's create_dir defaults to recursive=True",
    ),
    (
        "rsi/records.py",
        'self.fs.create_dir(dest.rsplit("/", 1)[0], recursive=True)',
        'self.fs.create_dir(dest.rsplit("/", 1)[0], )',
        "pyarrow's create_dir defaults to recursive=True",
    ),
    (
        "rsi/records.py",
        'tmp = f"{dest}.tmp-{uuid.uuid4().hex[:8]}"',
        'tmp = f"{dest}.tmp-{uuid.uuid4().hex[:9]}"',
        "the temporary name is renamed away before write_bytes returns",
    ),
    # ---- rsi/sandbox.py
    (
        "rsi/sandbox.py",
        'lines = bytes(data[-_TAIL_BYTES:]).decode("utf-8", errors="replace").strip().splitlines()',
        'lines = bytes(data[-_TAIL_BYTES:]).decode(errors="replace").strip().splitlines()',
        "bytes.decode's default encoding is UTF-8",
    ),
    (
        "rsi/sandbox.py",
        'lines = bytes(data[-_TAIL_BYTES:]).decode("utf-8", errors="replace").strip().splitlines()',
        'lines = bytes(data[-_TAIL_BYTES:]).decode("UTF-8", errors="replace").strip().splitlines()',
        "codec names are case-insensitive",
    ),
    (
        "rsi/sandbox.py",
        'text = stdout.decode("utf-8", errors="replace").strip()',
        'text = stdout.decode(errors="replace").strip()',
        "bytes.decode's default encoding is UTF-8",
    ),
    (
        "rsi/sandbox.py",
        'text = stdout.decode("utf-8", errors="replace").strip()',
        'text = stdout.decode("UTF-8", errors="replace").strip()',
        "codec names are case-insensitive",
    ),
    (
        "rsi/sandbox.py",
        'last = text.rsplit("\\n", 1)[-1].strip()',
        'last = text.rsplit("\\n", )[-1].strip()',
        "[-1] of an rsplit is the last piece whatever the split count",
    ),
    (
        "rsi/sandbox.py",
        'last = text.rsplit("\\n", 1)[-1].strip()',
        'last = text.rsplit("\\n", 2)[-1].strip()',
        "[-1] of an rsplit is the last piece whatever the split count",
    ),
    (
        "rsi/sandbox.py",
        "nproc = None",
        'nproc = ""',
        "unreachable on Linux: the branch runs only where /proc/self/task is missing",
    ),
    (
        "rsi/sandbox.py",
        "(resource.RLIMIT_NOFILE, (limits.open_files,) * 2),",
        "(resource.RLIMIT_NOFILE, (limits.open_files,) * 3),",
        "Linux's RLIMIT_NOFILE hard limit is always finite, so _clamp rebuilds the pair from the first two values",
    ),
    (
        "rsi/sandbox.py",
        'what = f"killed by {_signal_name(-code)}" if code < 0 else f"exit code {code}"',
        'what = f"killed by {_signal_name(-code)}" if code <= 0 else f"exit code {code}"',
        "code is non-zero here (code == 0 returned earlier)",
    ),
    (
        "rsi/sandbox.py",
        'what = f"killed by {_signal_name(-code)}" if code < 0 else f"exit code {code}"',
        'what = f"killed by {_signal_name(-code)}" if code < 1 else f"exit code {code}"',
        "code is a non-zero integer here: < 1 and < 0 agree",
    ),
]

# Survivors in code that runs only when a rollout is not in the cache, i.e. on Ray (``_run``):
# the Ray tests (test_evaluator.py, test_rollout_cache.py, test_resume.py) exercise them, the
# in-process selection cannot. Same format as EQUIVALENT.
_FRESH = 'self.cache[(row["{}"], row["{}"], row["{}"], self.fingerprint)] = {}'
_PROG = "self.progress_by_req[rid] = {}"
_SORT = "idx = sorted(range(table.num_rows), {})"
_SORT_KEY = 'key=lambda i: order[(table["task_id"][i].as_py(), table["trial"][i].as_py())]'
NEEDS_RAY: list[tuple[str, str, str, str]] = [
    (
        "actors/evaluator.py",
        "todo.append(spec)",
        "todo.append(None)",
        "a cache miss goes to _run, which fails on None: every Ray test with a fresh rollout",
    ),
    (
        "actors/evaluator.py",
        "rid = next(self.req_ids)",
        "rid = None",
        "ids only keep concurrent requests' progress apart while _run waits on Ray; no Ray test checks that",
    ),
    *[
        ("actors/evaluator.py", _PROG.format("_Progress(total=len(specs), done=len(cached))"), _PROG.format(new), why)
        for new, why in (
            ("None", "_run adds to the entry: every Ray test with a fresh rollout fails"),
            ("_Progress(total=len(specs), done=None)", "_run adds to done: every Ray test with a fresh rollout fails"),
            ("_Progress(total=None, done=len(cached))", "total is read only by progress() while _run runs"),
            ("_Progress(done=len(cached))", "total is read only by progress() while _run runs"),
            ("_Progress(total=len(specs), )", "done is read only by progress() while _run runs"),
        )
    ],
    *[
        (
            "actors/evaluator.py",
            "fresh, traces = self._run(req, todo, rid)",
            f"fresh, traces = self._run({new})",
            "_run's arguments matter only when there is something to run: every Ray test with a fresh rollout",
        )
        for new in ("None, todo, rid", "req, None, rid", "req, todo, None")
    ],
    (
        "actors/evaluator.py",
        _FRESH.format("snapshot_id", "task_id", "sample_seed", "row"),
        _FRESH.format("snapshot_id", "task_id", "sample_seed", "None"),
        "fresh rows come from _run; checked by hand: test_meta_outer.py's "
        "test_inner_searches_are_deterministic_and_cached_through_the_evaluator fails on it",
    ),
    *[
        (
            "actors/evaluator.py",
            _FRESH.format("snapshot_id", "task_id", "sample_seed", "row"),
            _FRESH.format(*new),
            "fresh rows come from _run; KeyError on every fresh rollout",
        )
        for new in (
            ("XXsnapshot_idXX", "task_id", "sample_seed", "row"),
            ("SNAPSHOT_ID", "task_id", "sample_seed", "row"),
            ("snapshot_id", "XXtask_idXX", "sample_seed", "row"),
            ("snapshot_id", "TASK_ID", "sample_seed", "row"),
            ("snapshot_id", "task_id", "XXsample_seedXX", "row"),
            ("snapshot_id", "task_id", "SAMPLE_SEED", "row"),
        )
    ],
    *[
        (
            "actors/evaluator.py",
            _SORT.format(_SORT_KEY),
            _SORT.format(new),
            "cached rows are already in request order; only a request mixing cached and fresh rows needs the sort",
        )
        for new in ("key=None", "")
    ],
]


STATUS = {  # mutmut 3's exit codes (mutmut/stats.py)
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    35: "suspicious",
    36: "timeout",
    37: "killed",
    -24: "timeout",
    24: "timeout",
    152: "timeout",
    255: "timeout",
    None: "not run",
}


@dataclass
class Outcome:
    name: str
    seconds: float = 0.0
    error: str = ""
    by_status: dict[str, list[str]] = field(default_factory=dict)
    diffs: dict[str, str] = field(default_factory=dict)
    equivalent: dict[str, str] = field(default_factory=dict)  # mutant -> reason
    needs_ray: dict[str, str] = field(default_factory=dict)  # mutant -> reason

    def count(self, status: str) -> int:
        return len(self.by_status.get(status, []))

    @property
    def total(self) -> int:
        return sum(len(v) for k, v in self.by_status.items() if k != "not run")

    @property
    def open(self) -> list[str]:
        """Survivors and no-tests mutants listed neither as equivalent nor as needing Ray."""
        names = self.by_status.get("survived", []) + self.by_status.get("no tests", [])
        return [n for n in names if n not in self.equivalent and n not in self.needs_ray]


def _config(target: Target, tests: list[str], args) -> str:
    lines = ["[mutmut]", "source_paths ="] + [f"    {p}" for p in PACKAGES]
    lines += ["only_mutate ="] + [f"    {f}" for f in target.files]
    lines += ["also_copy ="] + [f"    {d}" for d in ALSO]
    lines += ["pytest_add_cli_args_test_selection ="] + [f"    {t}" for t in tests]
    lines += [
        "pytest_add_cli_args =",
        "    -p",
        "    no:cacheprovider",
        f"timeout_multiplier = {args.timeout_multiplier}",
        f"timeout_constant = {args.timeout_constant}",
        "use_git_change_detection = false",
        "",
        "[tool:pytest]",
        f"timeout = {args.test_timeout}",
        "markers =",
        "    slow: see pyproject.toml",
        "",
    ]
    return "\n".join(lines)


def _workspace(name: str, target: Target, tests: list[str], args) -> Path:
    ws = Path(args.workdir) / name
    if ws.exists():
        shutil.rmtree(ws)  # mutmut caches verdicts in mutants/: a run always starts from the tree as it is
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for d in PACKAGES + ALSO:
        shutil.copytree(REPO / d, ws / d, ignore=ignore)
    (ws / "setup.cfg").write_text(_config(target, tests, args))
    return ws


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


_DIFFS = r"""
import json, sys
from pathlib import Path
from mutmut.mutation.diff_apply import get_diff_for_mutant
todo = json.load(sys.stdin)
print(json.dumps({name: get_diff_for_mutant(name, path=Path(path)) for name, path in todo}))
"""


# mutmut's first step alone: copy the tree into mutants/ and write the trampolined files.
_GENERATE = r"""
from mutmut.__main__ import create_mutants
from mutmut.mutation.trampoline import set_mutant_under_test
from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir
set_mutant_under_test("mutant_generation")
copy_src_dir()
copy_also_copy_files()
create_mutants(1)
"""

# mutmut registers a method's variants as ``Class.xǁClassǁname__mutmut_N`` after the class
# statement. For a @ray.remote class the name is then bound to Ray's ActorClass, whose attributes
# are methods bound to the ActorClass object itself: registered so, every call passes one
# argument too many. The plain class is ``__ray_actor_class__``; for any other class getattr
# falls back to the class.
_REGISTRATION = re.compile(r"^(mutants_xǁ\w+ǁ\w+__mutmut\[[^\]]+\] = )(\w+)\.xǁ", re.M)


def _fix_registrations(path: Path) -> None:
    text = path.read_text()
    fixed = _REGISTRATION.sub(lambda m: f'{m[1]}getattr({m[2]}, "__ray_actor_class__", {m[2]}).xǁ', text)
    if fixed != text:
        path.write_text(fixed)  # newer than its source: mutmut run keeps it as generated


def _changed(diff: str) -> tuple[str, str]:
    body = [ln for ln in diff.splitlines()[2:]]
    minus = " ".join(ln[1:] for ln in body if ln.startswith("-"))
    plus = " ".join(ln[1:] for ln in body if ln.startswith("+"))
    return " ".join(minus.split()), " ".join(plus.split())


def run_target(name: str, target: Target, args) -> Outcome:
    out = Outcome(name)
    tests = [t for t in target.tests if (REPO / t.split("::")[0]).exists()]
    if not tests:
        out.error = "no test file of its selection exists"
    ws = _workspace(name, target, tests or ["tests/conftest.py"], args)
    log = ws / "mutmut.log"
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children), *target.functions]
    start = time.monotonic()
    gen = subprocess.run([sys.executable, "-c", _GENERATE], cwd=ws, capture_output=True, text=True)
    if gen.returncode != 0:
        out.error = f"generating mutants failed: {gen.stderr.strip().splitlines()[-1:]}"
        return out
    for f in target.files:
        _fix_registrations(ws / "mutants" / f)
    # A mutant that misses the rollout cache reaches ray.put: fail at once instead of starting Ray.
    env = {**os.environ, "RAY_ENABLE_AUTO_CONNECT": "0"}
    with open(log, "wb") as fh:
        try:
            rc = subprocess.run(
                cmd,
                cwd=ws,
                env=env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=args.target_timeout,
            ).returncode
        except subprocess.TimeoutExpired:
            rc = None
    out.seconds = time.monotonic() - start
    if rc != 0 and not out.error:
        out.error = f"mutmut exited {rc} (see {log})" if rc is not None else f"over {args.target_timeout} s ({log})"
    where: dict[str, str] = {}
    for f in target.files:
        meta = ws / "mutants" / (f + ".meta")
        if not meta.exists():
            continue
        for mutant, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if _matches(mutant, target.functions):
                out.by_status.setdefault(STATUS.get(code, "suspicious"), []).append(mutant)
                where[mutant] = f
    if not out.by_status and not out.error:
        out.error = f"no mutant results (see {log})"
    survivors = sorted(out.by_status.get("survived", []) + out.by_status.get("no tests", []), key=_order)
    if survivors:
        done = subprocess.run(
            [sys.executable, "-c", _DIFFS],
            cwd=ws,
            capture_output=True,
            text=True,
            input=json.dumps([[n, where[n]] for n in survivors]),
        )
        out.diffs = json.loads(done.stdout) if done.returncode == 0 else {n: "(diff unavailable)" for n in survivors}
    for mutant in survivors:
        minus, plus = _changed(out.diffs.get(mutant, ""))
        for listed, into in ((EQUIVALENT, out.equivalent), (NEEDS_RAY, out.needs_ray)):
            for f, old, new, why in listed:
                f, _, function = f.partition("::")  # "path::function": only that function's mutants
                if function and f"x_{function}__mutmut_" not in mutant and f"ǁ{function}__mutmut_" not in mutant:
                    continue
                if f == where[mutant] and " ".join(old.split()) == minus and " ".join(new.split()) == plus:
                    into[mutant] = why
    return out


def _order(name: str):
    head, _, n = name.rpartition("__mutmut_")
    return head, int(n) if n.isdigit() else 0


def machine() -> str:
    cpu = ""
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        from importlib.metadata import version

        mm = version("mutmut")
    except Exception:
        mm = "?"
    return (
        f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs ({cpu or platform.machine()}), "
        f"Python {platform.python_version()}, mutmut {mm}"
    )


def report(outcomes: list[Outcome], args) -> str:
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lines = [
        f"# mutation run, {now}",
        "",
        f"{machine()}; --max-children {args.max_children}",
        "",
        "| target | mutants | killed | timeout | survived | no tests | equivalent | needs Ray | open | seconds |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.name} | {o.total} | {o.count('killed')} | {o.count('timeout')} | {o.count('survived')} "
            f"| {o.count('no tests')} | {len(o.equivalent)} | {len(o.needs_ray)} | {len(o.open)} "
            f"| {o.seconds:.0f} |"
        )
    for o in outcomes:
        if o.error:
            lines += ["", f"**{o.name}: {o.error}**"]
        other = {
            k: len(v)
            for k, v in o.by_status.items()
            if k not in ("killed", "timeout", "survived", "no tests", "not run")
        }
        if other:
            lines += ["", f"{o.name}: also {other}"]
        if o.open:
            lines += ["", f"## {o.name}: {len(o.open)} open", ""]
            for m in sorted(o.open, key=_order):
                status = "no tests" if m in o.by_status.get("no tests", []) else "survived"
                lines += [f"### {m} ({status})", "", "```diff", o.diffs.get(m, "").strip(), "```", ""]
        for title, listed in (("equivalent", o.equivalent), ("needs Ray", o.needs_ray)):
            if listed:
                lines += ["", f"## {o.name}: {title}", ""]
                lines += [f"- `{m}`: {why}" for m, why in sorted(listed.items(), key=lambda kv: _order(kv[0]))]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("targets", nargs="*", help=f"targets to run (default: all): {', '.join(TARGETS)}")
    p.add_argument("--list", action="store_true", help="print the targets and exit")
    p.add_argument("--workdir", default=str(REPO / "build" / "mutation"), help="scratch copies (git-ignored)")
    p.add_argument("--report", default=None, help="markdown report (default: WORKDIR/report.md)")
    p.add_argument("--max-children", type=int, default=2, help="mutants tested in parallel (default 2)")
    p.add_argument(
        "--timeout-multiplier",
        type=float,
        default=10.0,
        help="a mutant's CPU-time limit, as a multiple of its tests' clean time (default 10)",
    )
    p.add_argument("--timeout-constant", type=float, default=2.0, help="seconds added before multiplying")
    p.add_argument("--test-timeout", type=int, default=60, help="pytest-timeout per test, wall clock (default 60)")
    p.add_argument("--target-timeout", type=int, default=1800, help="a whole target's wall-clock limit")
    p.add_argument(
        "--tests",
        nargs="+",
        default=None,
        help="replace the named targets' test selection (e.g. to measure another one)",
    )
    p.add_argument("--strict", action="store_true", help="exit 1 when an unlisted survivor is left")
    args = p.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        p.error(f"unknown target(s) {unknown}; known: {', '.join(TARGETS)}")
    if args.list:
        for name, t in TARGETS.items():
            print(
                f"{name}: {t.about}\n  files: {' '.join(t.files)}\n  functions: {' '.join(t.functions)}\n"
                f"  tests: {' '.join(t.tests)}"
            )
        return 0
    try:
        import mutmut  # noqa: F401
    except ImportError:
        print("mutmut is not installed: .venv/bin/pip install -e '.[mutation]'", file=sys.stderr)
        return 2
    outcomes = []
    for name in args.targets or list(TARGETS):
        print(f"{name}: running ...", flush=True)
        target = TARGETS[name]
        if args.tests:
            target = Target(target.about, target.files, target.functions, tuple(args.tests))
        o = run_target(name, target, args)
        print(
            f"{name}: {o.total} mutants, {o.count('killed')} killed, {o.count('timeout')} timeout, "
            f"{o.count('survived')} survived, {o.count('no tests')} no tests, {len(o.equivalent)} equivalent, "
            f"{len(o.needs_ray)} need Ray, {len(o.open)} open ({o.seconds:.0f} s)"
            f"{'; ' + o.error if o.error else ''}",
            flush=True,
        )
        outcomes.append(o)
    text = report(outcomes, args)
    path = Path(args.report) if args.report else Path(args.workdir) / "report.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"report: {path}")
    if any(o.error for o in outcomes):
        return 1
    return 1 if args.strict and any(o.open for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
