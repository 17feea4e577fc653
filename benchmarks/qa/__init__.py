"""QA: the shipped question-answering suite, defined as a one-file problem (``problem.py``).

``benchmark: {name: qa}`` is a short name for ``benchmark: {problem: benchmarks.qa.problem}``:
the suite uses the same ``tasks(split)`` / ``score(task, output)`` interface a user's own
problem does, so the interface is proven by code that ships. See ``problem.py`` for the tasks,
the scoring and how to point it at your own questions.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from benchmarks.qa.problem import f1, normalize
from rsi.problem import ProblemBenchmark, ProblemParams


class QAParams(ProblemParams):
    name: str = "qa"
    problem: str = Field("benchmarks.qa.problem", description="the module defining tasks() and score()")


class QA(ProblemBenchmark):
    name = "qa"
    Params = QAParams

    def user_paths(self) -> list[Path]:
        return []  # shipped with the package on every node: nothing of the user's to ship

    def source_files(self) -> dict[str, bytes]:
        return {}


__all__ = ["QA", "QAParams", "f1", "normalize"]
