"""Bring your own problem: one file with tasks() and score(), one config, and rsi evolves it.

Everything runs through the real CLI and a real local Ray: the docs walkthrough as written, the
scaffold of ``rsi new``, and each way a problem file can be wrong (exit 2, one line, no run
directory)."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from rsi.driver.cli import main

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "custom-problem.md"


def doc_files() -> dict[str, str]:
    """Every fenced block of the walkthrough that starts with ``# file: PATH``."""
    files = {}
    for block in re.findall(r"```(?:python|yaml)\n(.*?)```", DOC.read_text(), re.S):
        first, _, rest = block.partition("\n")
        if first.startswith("# file: "):
            files[first.removeprefix("# file: ").strip()] = rest
    return files


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def run_dir_of(out: str) -> Path:
    return Path(re.search(r"run directory: (\S+)", out).group(1))


def test_docs_walkthrough_runs_as_written(tmp_path, ray_session, capsys, monkeypatch):
    files = doc_files()
    assert set(files) == {"knapsack/problem.py", "knapsack/seed/main.py", "knapsack/seed/components.yaml",
                          "knapsack/config.yaml"}
    write(tmp_path, files)
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "knapsack/config.yaml"]) == 0
    assert main(["run", "knapsack/config.yaml", "--algorithm.max_steps", "6"]) == 0
    out = capsys.readouterr().out
    run_dir = run_dir_of(out)
    assert run_dir.parent == tmp_path / "knapsack" / "runs", "storage resolves against the config's directory"

    rows = pq.read_table(run_dir / "rollouts").to_pylist()
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok and all(dict(r["metrics"])["value"] > 0 for r in ok), "the problem's metric lands on every ok row"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["metrics"]["train"]) == {"value"} and 0 < summary["means"]["train"] <= 1
    assert "value" in out, "rsi show / the run's summary prints the named metric"
    meta = json.loads((run_dir / "run.json").read_text())
    assert (run_dir / "problem" / "problem.py").read_text() == files["knapsack/problem.py"]
    assert len(meta["problem_files"]["problem.py"]) == 64


def test_rsi_new_scaffold_runs(tmp_path, ray_session, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["new", "demo"]) == 0
    assert sorted(p.relative_to(tmp_path / "demo").as_posix() for p in (tmp_path / "demo").rglob("*") if p.is_file()) \
        == ["config.yaml", "problem.py", "seed/components.yaml", "seed/main.py"]
    assert main(["run", "demo/config.yaml", "--algorithm.max_steps", "4"]) == 0
    out = capsys.readouterr().out
    # Not a terminal: the live view's facts come as plain lines, start-up included.
    for line in ("  starting a local Ray", "  measuring the seed version", "  step 1: proposing and measuring",
                 "  promoting"):
        assert line in out.splitlines(), line
    assert re.search(r"^step   \d  confirm .*\[gain [+-]\d\.\d{4}, regression \d\.\d{4}, train mean", out, re.M)
    summary = json.loads((run_dir_of(out) / "summary.json").read_text())
    assert summary["algorithm"] == "darwinx" and summary["means"]["train"] > 0
    assert main(["new", "demo"]) == 2, "an existing non-empty directory is never overwritten"


# ---- wrong problem files: exit 2, one line, before any run directory --------------------------
GOOD_TASKS = 'def tasks(split):\n    return [{"id": f"{split}-1", "x": 1}]\n'
GOOD_SCORE = 'def score(task, output):\n    return 1.0\n'


@pytest.mark.parametrize("problem, needle", [
    (None, "does not exist"),
    (GOOD_SCORE, "defines no tasks() function"),
    (GOOD_TASKS, "defines no score() function"),
    (GOOD_TASKS + "def score(output):\n    return 1.0\n", "score() must take 2 arguments"),
    ('def tasks(split):\n    return [{"id": "a"}, {"id": "a"}]\n' + GOOD_SCORE, "duplicate id 'a'"),
    ('def tasks(split):\n    return [{"id": "a", "x": {1, 2}}]\n' + GOOD_SCORE, "is not JSON-serialisable"),
    ('def tasks(split):\n    return [{"x": 1}]\n' + GOOD_SCORE, 'non-empty string "id"'),
    ('def tasks(split):\n    x = {}\n    return x["missing"]\n' + GOOD_SCORE, "problem.py:3: tasks('train') raised KeyError"),
    ("def tasks(split)\n", "problem.py:1: "),
])
def test_wrong_problem_files_exit_2_before_anything(tmp_path, capsys, problem, needle):
    if problem is not None:
        (tmp_path / "problem.py").write_text(problem)
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "main.py").write_text("print('{}')\n")
    (seed / "components.yaml").write_text("- {name: program, glob: main.py}\n")
    cfg = {"name": "bad", "storage": str(tmp_path / "runs"), "target": {"path": "seed", "entry": "main.py"},
           "benchmark": {"problem": "problem.py"}, "algorithm": {"name": "evaluate"}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    for command in ("validate", "run"):
        assert main([command, str(tmp_path / "c.yaml")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err
    assert not (tmp_path / "runs").exists()


def problem_run(tmp_path: Path, problem: str, program: str, algorithm: dict | None = None) -> Path:
    (tmp_path / "problem.py").write_text(textwrap.dedent(problem))
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "main.py").write_text(textwrap.dedent(program))
    (tmp_path / "seed" / "components.yaml").write_text("- {name: program, glob: main.py}\n")
    cfg = {"name": "p", "storage": str(tmp_path / "runs"),
           "target": {"path": "seed", "entry": "main.py", "deterministic": True},
           "benchmark": {"problem": "problem.py"},
           "algorithm": algorithm or {"name": "darwinx", "worker": {"type": "mutator"}, "max_steps": 2,
                                      "screen_size": 1, "confirm_samples": 1}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_seed_failing_every_task_stops_before_any_edit(tmp_path, ray_session, capsys):
    config = problem_run(tmp_path, GOOD_TASKS + GOOD_SCORE, "raise SystemExit('seed is broken')\n")
    assert main(["run", str(config)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "the seed version failed on all 1 train rollouts" in err and "seed is broken" in err
    (run_dir,) = (tmp_path / "runs").iterdir()
    decisions = run_dir / "decisions.jsonl"
    assert not decisions.exists() or decisions.read_text() == "", "no edit, no decision"
    assert not list(run_dir.glob("snapshots/*.json"))[1:], "only the seed's snapshot is stored"


def test_a_score_out_of_range_or_raising_is_that_rollouts_error(tmp_path, ray_session, capsys):
    problem = GOOD_TASKS.replace('[{"id": f"{split}-1", "x": 1}]', '[{"id": f"{split}-{i}", "x": i} for i in range(3)]') + \
        "def score(task, output):\n    if task['x'] == 0:\n        return {'score': 1.5}\n" \
        "    if task['x'] == 1:\n        raise ValueError('scorer bug')\n    return {'score': 0.5, 'size': 2}\n"
    config = problem_run(tmp_path, problem, "import json, sys\njson.load(sys.stdin)\nprint('{}')\n",
                         {"name": "evaluate"})
    assert main(["run", str(config)]) == 0
    run_dir = run_dir_of(capsys.readouterr().out)
    rows = {r["task_id"]: r for r in pq.read_table(run_dir / "rollouts").to_pylist() if r["split"] == "train"}
    assert {t: (r["status"], r["score"]) for t, r in rows.items()} == {
        "train-0": ("error", 0.0), "train-1": ("error", 0.0), "train-2": ("ok", 0.5)}
    assert dict(rows["train-2"]["metrics"]) == {"size": 2.0}
    traces = {}
    import gzip
    for f in (run_dir / "traces").glob("*.jsonl.gz"):
        for line in gzip.decompress(f.read_bytes()).decode().splitlines():
            t = json.loads(line)
            traces[(t["split"], t["task_id"])] = t
    assert "outside [0, 1]" in traces[("train", "train-0")]["reason"]
    assert re.search(r"ValueError: scorer bug \(.*problem\.py:7\)", traces[("train", "train-1")]["reason"])


def test_private_task_data_never_reaches_the_candidate(tmp_path, ray_session, capsys):
    problem = ('def tasks(split):\n    return [{"id": "a", "x": 2, "private": {"answer": 42}}]\n'
               "def score(task, output):\n    return float(output.get('answer') == task['private']['answer'])\n")
    program = "import json, sys\ntask = json.load(sys.stdin)\nprint(json.dumps({'answer': task.get('private', {}).get('answer'), 'keys': sorted(task)}))\n"
    config = problem_run(tmp_path, problem, program, {"name": "evaluate"})
    assert main(["run", str(config)]) == 0
    rows = pq.read_table(run_dir_of(capsys.readouterr().out) / "rollouts").to_pylist()
    assert {r["score"] for r in rows} == {0.0}


def test_resume_refuses_a_changed_problem_file(tmp_path, ray_session, capsys):
    config = problem_run(tmp_path, GOOD_TASKS + GOOD_SCORE, "print('{}')\n", {"name": "evaluate"})
    assert main(["run", str(config)]) == 0
    run_dir = run_dir_of(capsys.readouterr().out)
    (run_dir / "summary.json").unlink()
    (tmp_path / "problem.py").write_text(GOOD_TASKS + GOOD_SCORE.replace("1.0", "0.5"))
    assert main(["resume", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "problem or benchmark" in err and "--allow-changed" in err


def test_evolve_scope_naming_no_component_fails_validate(tmp_path, capsys):
    config = problem_run(tmp_path, GOOD_TASKS + GOOD_SCORE, "print('{}')\n")
    assert main(["validate", str(config), "--target.evolve_scope", "[heuristics]"]) == 2
    err = capsys.readouterr().err
    assert "evolve_scope" in err and "heuristics" in err


def installed_problem(site: Path, value: str) -> None:
    """A real installed distribution (package + dist-info) registering ``knapsack`` under the
    ``rsi.benchmarks`` entry-point group, the way ``pip install`` of a user's package does."""
    pkg = site / "knap_problems"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "knapsack.py").write_text(textwrap.dedent('''
        ITEMS = [(4, 5), (3, 4), (2, 3)]   # (weight, value)
        def tasks(split):
            return [{"id": f"{split}-{c}", "capacity": c, "items": ITEMS} for c in (5, 7)]
        class Knapsack:
            tasks = staticmethod(tasks)
            @staticmethod
            def score(task, output):
                return 1.0
        def score(task, output):
            picked = output.get("picked", [])
            weight = sum(ITEMS[i][0] for i in picked)
            value = sum(ITEMS[i][1] for i in picked)
            return {"score": value / 12 if weight <= task["capacity"] else 0.0, "weight": weight}
    '''))
    info = site / "knap_problems-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: knap-problems\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[rsi.benchmarks]\nknapsack = {value}\n")


@pytest.mark.parametrize("value", ["knap_problems.knapsack", "knap_problems.knapsack:Knapsack"])
def test_a_problem_module_registered_as_an_entry_point_runs_by_short_name(tmp_path, monkeypatch, value):
    import importlib

    from rsi.config import load_config
    from rsi.problem import ProblemBenchmark
    from rsi.registry import benchmark_class

    installed_problem(tmp_path / "site", value)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    assert benchmark_class("knapsack") is ProblemBenchmark
    config = problem_run(tmp_path, GOOD_TASKS + GOOD_SCORE, "print('{}')\n")
    raw = yaml.safe_load(config.read_text())
    raw["benchmark"] = {"name": "knapsack", "limit": 1}
    config.write_text(yaml.safe_dump(raw))
    resolved = load_config(config)
    assert resolved.bench_params.problem == value
    bench = ProblemBenchmark(resolved.bench_params, base_dir=resolved.base_dir)
    assert [t.task_id for t in bench.split("dev")] == ["dev-5"]
    expected = 1.0 if value.endswith(":Knapsack") else 7 / 12  # items 1 and 2: weight 5, value 7
    assert bench.score(bench.split("dev")[0], {"picked": [1, 2]}, 0).primary == pytest.approx(expected)
    with pytest.raises(Exception, match="unknown benchmark 'knapsak'.*did you mean 'knapsack'"):
        benchmark_class("knapsak")
