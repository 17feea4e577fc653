"""QA: a small SearchQA-style suite: questions answered from a shipped corpus of short documents.

The corpus describes a fictional archipelago, so a model cannot answer from memory: a harness
scores only by finding the right document (the MiniAgent ``search`` tool reads the corpus
from the task input) and answering briefly. Splits: 12 train, 8 dev, 10 test questions.

Task input: ``{"question": str, "corpus": [{"id", "title", "text"}, ...]}``; the accepted
answers stay in ``meta`` and never reach the rollout. Output: ``{"answer": str, ...}``.
Primary metric: normalised exact match against any accepted answer (lower case, punctuation
and articles removed, whitespace collapsed); secondary: ``contains`` (an accepted answer
appears inside the reply) and token ``f1``.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from functools import cached_property
from pathlib import Path

from pydantic import Field

from rsi.benchmark import Benchmark, BenchmarkParams, Score, Task
from rsi.errors import ConfigError

DATA = Path(__file__).parent / "data"
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation + "\u2018\u2019\u201c\u201d")


def normalize(text: str) -> str:
    text = str(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def f1(prediction: str, gold: str) -> float:
    p, g = normalize(prediction).split(), normalize(gold).split()
    common = sum((Counter(p) & Counter(g)).values())
    if not p or not g or not common:
        return float(p == g)
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


class QAParams(BenchmarkParams):
    data: str | None = Field(
        None, description="folder with corpus.json and questions.json (default: the shipped fixture)"
    )


class QA(Benchmark):
    name = "qa"
    Params = QAParams
    params: QAParams

    @cached_property
    def _data(self) -> tuple[list[dict], list[dict]]:
        folder = DATA if self.params.data is None else (self.base_dir / self.params.data)
        try:
            corpus = json.loads((folder / "corpus.json").read_text())
            questions = json.loads((folder / "questions.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"benchmark qa: cannot read {folder}/corpus.json and questions.json: {exc}") from None
        return corpus, questions

    def _split(self, split: str) -> list[Task]:
        corpus, questions = self._data
        return [
            Task(
                q["id"],
                {"question": q["question"], "corpus": corpus},
                {"dataset": "qa", "answers": list(q["answers"]), "doc": q.get("doc")},
            )
            for q in questions
            if q["split"] == split
        ]

    def score(self, task: Task, output: dict, trial: int) -> Score:
        answer = output.get("answer") if isinstance(output, dict) else None
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            return Score(0.0, {"em": 0.0, "contains": 0.0, "f1": 0.0})
        pred = normalize(str(answer))
        golds = [normalize(a) for a in task.meta["answers"]]
        em = float(any(pred == g for g in golds))
        contains = float(any(g and re.search(rf"(^| ){re.escape(g)}( |$)", pred) for g in golds))
        best_f1 = max(f1(str(answer), a) for a in task.meta["answers"])
        return Score(em, {"em": em, "contains": contains, "f1": best_f1})
