"""The QA fixture: splits, answers kept out of the input, normalised exact-match scoring."""

from __future__ import annotations

import json

import pytest

from benchmarks.qa import QA, QAParams, normalize
from rsi.benchmark import Task
from rsi.errors import ConfigError
from rsi.registry import benchmark_class


@pytest.fixture
def bench():
    return QA(QAParams(name="qa"))


def test_splits_sizes_and_unique_ids(bench):
    sizes = {s: len(bench.split(s)) for s in ("train", "dev", "test")}
    assert sizes == {"train": 12, "dev": 8, "test": 10}
    ids = [t.task_id for s in sizes for t in bench.split(s)]
    assert len(ids) == len(set(ids)) == 30
    assert len(QA(QAParams(name="qa", limit=3)).split("test")) == 3
    assert benchmark_class("qa") is QA


def test_every_answer_is_in_its_document_and_never_in_the_input(bench):
    corpus = {d["id"]: d["text"] for d in bench.split("train")[0].input["corpus"]}
    assert len(corpus) == 40
    for split in ("train", "dev", "test"):
        for task in bench.split(split):
            assert set(task.input) == {"question", "corpus"}
            assert normalize(task.meta["answers"][0]) in normalize(corpus[task.meta["doc"]])
            payload = json.dumps(bench.payload(task, 0, 0))
            assert "answers" not in payload and "meta" not in payload


def test_normalised_exact_match(bench):
    task = Task("t", {"question": "?"}, {"answers": ["the Widow's Finger", "Widow's Finger"]})
    assert bench.score(task, {"answer": "widows finger."}, 0).primary == 1.0
    assert bench.score(task, {"answer": "The  WIDOW'S finger"}, 0).primary == 1.0
    partial = bench.score(task, {"answer": "It is called the Widow's Finger"}, 0)
    assert partial.primary == 0.0 and partial.metrics["contains"] == 1.0 and 0 < partial.metrics["f1"] < 1
    number = Task("n", {"question": "?"}, {"answers": ["1,450", "1450"]})
    assert bench.score(number, {"answer": 1450}, 0).primary == 1.0
    assert bench.score(number, {"answer": "14500"}, 0).metrics["contains"] == 0.0


@pytest.mark.parametrize("output", [{}, {"answer": None}, {"answer": ["x"]}, {"answer": True}, "not a dict"])
def test_hostile_output_scores_zero(bench, output):
    task = bench.split("dev")[0]
    assert bench.score(task, output, 0).primary == 0.0


def test_own_fixture_folder_and_its_errors(tmp_path):
    (tmp_path / "corpus.json").write_text(json.dumps([{"id": "d", "title": "T", "text": "Sky is blue."}]))
    (tmp_path / "questions.json").write_text(json.dumps(
        [{"id": "q1", "split": "test", "question": "Sky colour?", "answers": ["blue"]}]))
    own = QA(QAParams(name="qa", data=str(tmp_path)), base_dir=tmp_path)
    assert [t.task_id for t in own.split("test")] == ["q1"] and own.split("train") == []
    with pytest.raises(ConfigError, match="corpus.json"):
        QA(QAParams(name="qa", data="missing"), base_dir=tmp_path).split("test")
