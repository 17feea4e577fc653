"""Everything a candidate prints is hostile: nothing it prints may crash the run.

Real subprocess candidates print what breaks naive parsing (nesting past Python's recursion
limit, NaN, floats past the float range) or a protocol-breaking ``usage``; and a benchmark whose
scorer raises on such output. Each ends as a rollout status with its reason, never an exception.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from rsi.benchmark import Benchmark, BenchmarkParams, Score, Task
from rsi.config import TargetConfig
from rsi.sandbox import Limits, run_program
from rsi.target import ProgramTarget

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def checkout():
    path = Path(tempfile.mkdtemp(prefix="rsi-test-untrusted-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def candidate(checkout: Path, body: str) -> Path:
    (checkout / "main.py").write_text(textwrap.dedent(body))
    return checkout


def run(checkout: Path, body: str):
    candidate(checkout, body)
    return run_program([sys.executable, "main.py"], checkout, {"x": 1}, Limits(timeout_s=30))


# ---- the sandbox's parser: bounded depth, finite numbers ----------------------------------------
@pytest.mark.parametrize("body, reason", [
    ("print('[' * 200000)", "stdout: JSON nested deeper than 64 levels"),
    ("print('{\"a\":' * 100000 + '1' + '}' * 100000)", "stdout: JSON nested deeper than 64 levels"),
    ("print('[' * 65 + ']' * 65)", "stdout: JSON nested deeper than 64 levels"),
    ("print('{\"answer\": NaN}')", "stdout: non-finite number NaN in JSON"),
    ("print('{\"answer\": [1, -Infinity]}')", "stdout: non-finite number -Infinity in JSON"),
    ("print('{\"answer\": 1e400}')", "stdout: number 1e400 in JSON is not finite as a float"),
])
def test_hostile_stdout_is_a_protocol_error(checkout, body, reason):
    out = run(checkout, body)
    assert (out.status, out.output, out.reason) == ("protocol_error", None, reason)


def test_nesting_up_to_the_bound_is_accepted(checkout):
    out = run(checkout, "print('{\"answer\": ' + '[' * 63 + ']' * 63 + '}')")
    assert out.status == "ok", out.reason
    depth, node = 1, out.output["answer"]  # the object, then 63 lists inside it
    while isinstance(node, list):
        depth, node = depth + 1, (node[0] if node else None)
    assert depth == 64
    out = run(checkout, "print('{\"answer\": ' + '[' * 64 + ']' * 64 + '}')")
    assert (out.status, out.reason) == ("protocol_error", "stdout: JSON nested deeper than 64 levels")


def test_deep_debug_line_before_a_good_result_still_counts(checkout):
    """The last-line rule holds: a hostile-looking debug line before the result is not fatal."""
    out = run(checkout, """
        print('[' * 200000)
        print('{"answer": 7}')
    """)
    assert (out.status, out.output, out.reason) == ("ok", {"answer": 7}, "")


def test_not_json_keeps_its_reason(checkout):
    out = run(checkout, "print('the answer is 42')")
    assert (out.status, out.reason) == ("protocol_error", "stdout is not a JSON object (last line: the answer is 42)")


# ---- ProgramTarget.run: usage fields and scorer failures ------------------------------------------
class Probe(Benchmark):
    """Scores ``float(output["answer"])``: raises on an answer that is not a number, as a
    careless scorer would."""

    name = "probe"

    def _split(self, split):
        return [Task("t1", 1)]

    def score(self, task, output, trial):
        return Score(float(output["answer"]))  # SCORER-LINE


class NaNScorer(Probe):
    def score(self, task, output, trial):
        return Score(float("nan"))


SCORER_LINE = next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1)
                   if line.endswith("# SCORER-LINE"))


def rollout(checkout: Path, printed: str, bench: type[Benchmark] = Probe):
    candidate(checkout, f"import sys\nsys.stdout.write({printed!r})\n")
    target = ProgramTarget(TargetConfig(path=str(checkout), entry="main.py", limits={"timeout_s": 30}),
                           bench(BenchmarkParams(name="probe")))
    return target.run(checkout, Task("t1", 1), 0, 0)


@pytest.mark.parametrize("usage, reason", [
    ('{"tokens_in": "lots"}', 'usage.tokens_in must be a non-negative integer, got "lots"'),
    ('{"tokens_in": [1]}', "usage.tokens_in must be a non-negative integer, got [1]"),
    ('{"tokens_in": 1e30}', "usage.tokens_in must be between 0 and 1000000000000, got 1e+30"),
    ('{"tokens_out": -5}', "usage.tokens_out must be between 0 and 1000000000000, got -5"),
    ('{"tokens_out": true}', "usage.tokens_out must be a non-negative integer, got true"),
    ('{"cost_usd": "free"}', 'usage.cost_usd must be a non-negative number, got "free"'),
    ('{"cost_usd": 1e300}', "usage.cost_usd must be between 0 and 1e+06, got 1e+300"),
    ('[1, 2]', "usage must be an object, got [1, 2]"),
])
def test_invalid_usage_is_a_protocol_error_not_an_exception(checkout, usage, reason):
    result = rollout(checkout, f'{{"answer": 1, "usage": {usage}}}')
    assert (result.status, result.score, result.tokens_in, result.tokens_out, result.cost_usd) == \
        ("protocol_error", 0.0, 0, 0, 0.0)
    assert result.trace["status"] == "protocol_error"
    assert result.trace["reason"] == reason


def test_non_finite_usage_never_reaches_the_target(checkout):
    result = rollout(checkout, '{"answer": 1, "usage": {"tokens_in": NaN}}')
    assert (result.status, result.score) == ("protocol_error", 0.0)
    assert result.trace["reason"] == "stdout: non-finite number NaN in JSON"


def test_valid_usage_is_kept_as_the_candidates_report_never_as_spend(checkout):
    result = rollout(checkout, '{"answer": 0.5, "usage": {"tokens_in": 12, "tokens_out": 3.0, "cost_usd": 0.25}}')
    assert (result.status, result.score, result.tokens_in, result.tokens_out, result.cost_usd) == \
        ("ok", 0.5, 0, 0, 0.0), "a jailed program has no network: only a model proxy measures spend"
    assert result.trace["reported_usage"] == {"tokens_in": 12, "tokens_out": 3, "cost_usd": 0.25}
    assert result.trace["reason"] == ""


def test_scorer_raising_on_hostile_output_is_that_rollouts_error(checkout):
    result = rollout(checkout, '{"answer": "lots"}')
    assert (result.status, result.score) == ("error", 0.0)
    assert result.trace["status"] == "error"
    assert result.trace["reason"] == ("scorer failed: ValueError: could not convert string to float: 'lots' "
                                      f"({__file__}:{SCORER_LINE})")


def test_scorer_raising_on_a_missing_key(checkout):
    result = rollout(checkout, '{"no_answer": 1}')
    assert (result.status, result.score) == ("error", 0.0)
    assert result.trace["reason"] == f"scorer failed: KeyError: 'answer' ({__file__}:{SCORER_LINE})"


def test_scorer_returning_nan_is_an_error(checkout):
    result = rollout(checkout, '{"answer": 1}', NaNScorer)
    assert (result.status, result.score) == ("error", 0.0)
    assert result.trace["reason"].startswith("scorer failed: ValueError: primary score is not a finite number (nan)")
