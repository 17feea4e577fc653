"""QA as a one-file problem: ``tasks(split)`` and ``score(task, output)``, nothing else.

A small SearchQA-style suite: questions answered from a shipped corpus of short documents about
a fictional archipelago, so a model cannot answer from memory. A harness scores only by finding
the right document (the MiniAgent ``search`` tool reads the corpus from the task) and answering
briefly. Splits: 12 train, 8 dev, 10 test questions.

The task the candidate reads is ``{"id", "question", "corpus": [{"id", "title", "text"}, ...]}``.
The accepted answers sit under ``private``, so they stay on the trusted side with ``score``.

Your own questions and corpus need no new code, only a problem file of your own::

    from benchmarks.qa.problem import load_tasks, score
    def tasks(split):
        return load_tasks("my_qa_data", split)   # a folder with corpus.json and questions.json
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from pathlib import Path

DATA = Path(__file__).parent / "data"
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation + "\u2018\u2019\u201c\u201d")


def normalize(text: str) -> str:
    """Lower case, punctuation and articles removed, whitespace collapsed (SQuAD's rule)."""
    text = str(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def f1(prediction: str, gold: str) -> float:
    p, g = normalize(prediction).split(), normalize(gold).split()
    common = sum((Counter(p) & Counter(g)).values())
    if not p or not g or not common:
        return float(p == g)
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def load_tasks(folder: str | Path, split: str) -> list[dict]:
    """The questions of one split from ``folder/{corpus,questions}.json``."""
    folder = Path(folder)
    corpus = json.loads((folder / "corpus.json").read_text())
    questions = json.loads((folder / "questions.json").read_text())
    return [
        {
            "id": q["id"],
            "question": q["question"],
            "corpus": corpus,
            "private": {"answers": list(q["answers"]), "doc": q.get("doc")},
        }
        for q in questions
        if q["split"] == split
    ]


def tasks(split: str) -> list[dict]:
    return load_tasks(DATA, split)


def score(task: dict, output: dict) -> dict:
    """Exact match against any accepted answer; ``contains`` and token ``f1`` as metrics.
    Hostile or malformed output scores 0; it never raises."""
    answers = task["private"]["answers"]
    answer = output.get("answer") if isinstance(output, dict) else None
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        return {"score": 0.0, "em": 0.0, "contains": 0.0, "f1": 0.0}
    pred = normalize(str(answer))
    golds = [normalize(a) for a in answers]
    em = float(any(pred == g for g in golds))
    contains = float(any(g and re.search(rf"(^| ){re.escape(g)}( |$)", pred) for g in golds))
    return {"score": em, "em": em, "contains": contains, "f1": max(f1(str(answer), a) for a in answers)}
