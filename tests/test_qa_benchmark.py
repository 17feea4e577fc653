"""The QA suite, a one-file problem: splits, answers kept on the trusted side, normalised
exact-match scoring, and a user's own questions through a problem file of their own."""

from __future__ import annotations

import json
import textwrap

import pytest

from benchmarks.qa import QA, QAParams, normalize
from rsi.benchmark import Task
from rsi.errors import ConfigError
from rsi.problem import ProblemBenchmark, ProblemParams
from rsi.registry import benchmark_class


@pytest.fixture
def bench():
    return QA(QAParams(name="qa"))


def task(answers: list[str]) -> Task:
    return Task("t", {"id": "t", "question": "?"}, {"private": {"answers": answers}})


def test_splits_sizes_and_unique_ids(bench):
    sizes = {s: len(bench.split(s)) for s in ("train", "dev", "test")}
    assert sizes == {"train": 12, "dev": 8, "test": 10}
    ids = [t.task_id for s in sizes for t in bench.split(s)]
    assert len(ids) == len(set(ids)) == 30
    assert len(QA(QAParams(name="qa", limit=3)).split("test")) == 3
    assert benchmark_class("qa") is QA
    assert isinstance(bench, ProblemBenchmark) and bench.params.problem == "benchmarks.qa.problem"


def test_every_answer_is_in_its_document_and_never_in_the_input(bench):
    corpus = {d["id"]: d["text"] for d in bench.split("train")[0].input["corpus"]}
    assert len(corpus) == 40
    for split in ("train", "dev", "test"):
        for t in bench.split(split):
            assert set(t.input) == {"id", "question", "corpus"}
            private = t.meta["private"]
            assert normalize(private["answers"][0]) in normalize(corpus[private["doc"]])
            payload = json.dumps(bench.payload(t, 0, 0))
            assert "answers" not in payload and "private" not in payload


def test_normalised_exact_match(bench):
    widow = task(["the Widow's Finger", "Widow's Finger"])
    assert bench.score(widow, {"answer": "widows finger."}, 0).primary == 1.0
    assert bench.score(widow, {"answer": "The  WIDOW'S finger"}, 0).primary == 1.0
    partial = bench.score(widow, {"answer": "It is called the Widow's Finger"}, 0)
    assert partial.primary == 0.0 and partial.metrics["contains"] == 1.0 and 0 < partial.metrics["f1"] < 1
    number = task(["1,450", "1450"])
    assert bench.score(number, {"answer": 1450}, 0).primary == 1.0
    assert bench.score(number, {"answer": "14500"}, 0).metrics["contains"] == 0.0


@pytest.mark.parametrize("output", [{}, {"answer": None}, {"answer": ["x"]}, {"answer": True}, "not a dict"])
def test_hostile_output_scores_zero(bench, output):
    t = bench.split("dev")[0]
    assert bench.score(t, output, 0).primary == 0.0


def test_shipped_suite_has_no_user_files_to_ship(bench):
    assert bench.user_paths() == [] and bench.source_files() == {}
    # The fingerprint still covers the suite's code and data (the whole package folder).
    assert bench.fingerprint().startswith("qa:")


def test_own_questions_through_a_problem_file(tmp_path):
    data = tmp_path / "my_qa"
    data.mkdir()
    (data / "corpus.json").write_text(json.dumps([{"id": "d", "title": "T", "text": "Sky is blue."}]))
    (data / "questions.json").write_text(
        json.dumps([{"id": "q1", "split": "test", "question": "Sky colour?", "answers": ["blue"]}])
    )
    (tmp_path / "problem.py").write_text(
        textwrap.dedent(
            """
            from pathlib import Path
            from benchmarks.qa.problem import load_tasks, score
            def tasks(split):
                return load_tasks(Path(__file__).parent / "my_qa", split)
            """
        )
    )
    own = ProblemBenchmark(ProblemParams(problem="problem.py"), base_dir=tmp_path)
    assert [t.task_id for t in own.split("test")] == ["q1"] and own.split("train") == []
    assert own.score(own.split("test")[0], {"answer": "Blue"}, 0).primary == 1.0
    (data / "corpus.json").unlink()
    with pytest.raises(ConfigError, match=r"problem\.py:\d+: tasks\('dev'\) raised FileNotFoundError"):
        own.split("dev")
