"""The table benchmark: scores fixed in a YAML file, a target that answers with its version."""

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from benchmarks.table import TableBenchmark, TableParams
from rsi.components import Components
from rsi.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "targets" / "table_demo"

TABLE = """
splits: {train: [t1, t2], dev: [d1], test: [x1, 7]}
scores:
  v0: {t1: 1.0, t2: [1.0, 0.0], d1: 0.5, x1: 0}
  v1: {t1: 0.25, 7: [0, 0.5, 1]}
"""


def table(tmp_path: Path, text: str = TABLE, name: str = "table.yaml", **kw) -> TableBenchmark:
    (tmp_path / name).write_text(text)
    return TableBenchmark(TableParams(name="table", path=name, **kw), base_dir=tmp_path)


def solve(cwd: Path, task) -> dict:
    proc = subprocess.run(
        [sys.executable, "solve.py"], cwd=cwd, input=json.dumps(task.input), capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_splits_and_scores_per_trial(tmp_path):
    b = table(tmp_path)
    assert [t.task_id for t in b.split("train")] == ["t1", "t2"]
    (x1, seven) = b.split("test")
    assert x1.input == {"task_id": "x1"} and seven.task_id == "7"  # bare YAML ints become ids
    t1, t2 = b.split("train")
    assert b.score(t1, {"answer": "v0"}, 0).primary == 1.0
    assert [b.score(t2, {"answer": "v0"}, k).primary for k in range(4)] == [1.0, 0.0, 1.0, 0.0]
    assert [b.score(seven, {"answer": "v1"}, k).primary for k in range(4)] == [0.0, 0.5, 1.0, 0.0]
    assert b.score(x1, {"answer": "v0"}, 0).primary == 0.0
    assert b.score(t2, {"answer": "v1"}, 0).primary == 0.0  # task missing for this version
    for hostile in ({"answer": "v9"}, {"answer": ["v0"]}, {}, ["v0"], {"answer": None}):
        assert b.score(t1, hostile, 0).primary == 0.0, hostile


def test_limit_and_missing_splits(tmp_path):
    b = table(tmp_path, "splits: {train: [a, b, c]}\nscores: {}\n", limit=2)
    assert [t.task_id for t in b.split("train")] == ["a", "b"]
    assert b.split("dev") == [] and b.split("test") == []


def test_relative_path_resolves_against_base_dir_and_benchmark_pickles(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(ROOT)  # not tmp_path: the base dir must decide, not the cwd
    b = table(tmp_path, name="sub/t.yaml")
    assert b.path == (tmp_path / "sub" / "t.yaml").resolve()
    (tmp_path / "sub" / "t.yaml").unlink()  # scores live in the object, not the file
    clone = pickle.loads(pickle.dumps(b))
    assert clone.score(clone.split("dev")[0], {"answer": "v0"}, 0).primary == 0.5


def test_fingerprint_follows_the_file_content(tmp_path):
    a = table(tmp_path).fingerprint()
    assert table(tmp_path).fingerprint() == a
    assert table(tmp_path, TABLE.replace("d1: 0.5", "d1: 0.75")).fingerprint() != a


@pytest.mark.parametrize(
    "text, problem",
    [
        (None, "not found"),
        ("splits: [", "YAML error"),
        ("- a\n- b\n", "exactly the keys"),
        ("splits: {train: [a]}\n", "exactly the keys"),
        ("splits: {train: [a]}\nscores: {}\nextra: 1\n", "exactly the keys"),
        ("splits: {train: [a], holdout: [b]}\nscores: {}\n", "'splits' must map"),
        ("splits: {train: a}\nscores: {}\n", "splits.train must be a list"),
        ("splits: {train: [a, b, a]}\nscores: {}\n", "more than once: ['a']"),
        ("splits: {train: [1.5]}\nscores: {}\n", "quote it"),
        ("splits: {train: [a]}\nscores: [1]\n", "'scores' must map"),
        ("splits: {train: [a]}\nscores: {v0: 1}\n", "scores.v0 must map"),
        ("splits: {train: [a]}\nscores: {v0: {a: 1.5}}\n", "scores.v0.a: score 1.5 must be a number in [0, 1]"),
        ("splits: {train: [a]}\nscores: {v0: {a: -0.1}}\n", "in [0, 1]"),
        ("splits: {train: [a]}\nscores: {v0: {a: [1, 2]}}\n", "in [0, 1]"),
        ("splits: {train: [a]}\nscores: {v0: {a: []}}\n", "must not be empty"),
        ("splits: {train: [a]}\nscores: {v0: {a: 'high'}}\n", "in [0, 1]"),
        ("splits: {train: [a]}\nscores: {v0: {a: true}}\n", "in [0, 1]"),
        ("splits: {train: [a]}\nscores: {v0: {b: 1}}\n", "task 'b', which is in no split"),
        ("splits: {train: [a]}\nscores: {1.10: {a: 1}}\n", "quote it"),
    ],
)
def test_bad_files_are_config_errors_naming_the_file(tmp_path, text, problem):
    if text is not None:
        (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        TableBenchmark(TableParams(name="table", path="bad.yaml"), base_dir=tmp_path)
    assert str(tmp_path / "bad.yaml") in str(err.value) and problem in str(err.value)


def test_path_is_required():
    with pytest.raises(ValidationError, match="path"):
        TableParams(name="table")


def test_demo_target_answers_its_version_and_scores_from_the_demo_table(tmp_path):
    comps = Components.load(DEMO)
    files = sorted(p.name for p in DEMO.iterdir() if p.is_file() and p.name != "components.yaml")
    assert [comps.label(f) for f in files] == ["docs", "version", "solver"]  # README.md, VERSION, solve.py
    b = TableBenchmark(TableParams(name="table", path="benchmarks/table/demo.yaml"), base_dir=ROOT)
    t1 = b.split("train")[0]
    out = solve(DEMO, t1)
    assert out == {"answer": "v0"}
    assert b.score(t1, out, 0).primary == 0.5

    # A new version is a one-line edit of VERSION in a copy of the target.
    for f in files:
        (tmp_path / f).write_bytes((DEMO / f).read_bytes())
    (tmp_path / "VERSION").write_text("v1\n")
    out = solve(tmp_path, t1)
    assert out == {"answer": "v1"} and b.score(t1, out, 0).primary == 1.0
