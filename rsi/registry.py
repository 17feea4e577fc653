"""Name -> lazily imported class, one table per plugin kind.

Third parties add algorithms through the ``rsi.algorithms`` entry-point group and benchmarks
through ``rsi.benchmarks``. A benchmark entry point names either a Benchmark class or a problem
module (``pkg.module`` or ``pkg.module:Name`` defining ``tasks`` and ``score``), which then runs
as ``benchmark: {problem: ...}`` under its short name. An unknown name raises ConfigError listing
the valid ones; nothing else in the code dispatches on names.
"""

from __future__ import annotations

import difflib
import importlib
from importlib.metadata import entry_points

from rsi.errors import ConfigError

ALGORITHMS = {
    "evaluate": "algorithms.evaluate:Evaluate",
    "darwinx": "algorithms.darwinx:DarwinX",
    "hillclimb": "algorithms.hillclimb:HillClimb",
    "adas": "algorithms.adas:ADAS",
    "ahe": "algorithms.ahe:AHE",
    "meta": "algorithms.meta.outer:MetaEvolve",
}

BENCHMARKS = {
    "binpack": "benchmarks.binpack:BinPack",
    "table": "benchmarks.table:TableBenchmark",
    "qa": "benchmarks.qa:QA",
    "meta_landscape": "algorithms.meta.benchmark:LandscapeBenchmark",
    "meta_binpack": "algorithms.meta.benchmark:BinpackSearchBenchmark",
    "problem": "rsi.problem:ProblemBenchmark",  # benchmark: {problem: file.py}
}

TARGETS = {
    "program": "rsi.target:ProgramTarget",
    "miniagent": "rsi.target:MiniAgentTarget",
    "policy": "algorithms.meta.target:PolicyTarget",
}


def _load(table: dict[str, str], kind: str, name: str, group: str | None = None):
    table = dict(table)
    if group:
        for ep in entry_points(group=group):
            table.setdefault(ep.name, ep.value)
    if name not in table:
        close = difflib.get_close_matches(str(name), table, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown {kind} {name!r}{hint}; valid: {', '.join(sorted(table))}")
    module, _, attr = table[name].partition(":")
    try:
        found = importlib.import_module(module)
        return getattr(found, attr) if attr else found
    except (ModuleNotFoundError, AttributeError) as exc:
        raise ConfigError(f"{kind} {name!r} is not available in this installation: {exc}") from None


def algorithm_class(name: str):
    return _load(ALGORITHMS, "algorithm", name, group="rsi.algorithms")


def benchmark_class(name: str):
    found = _load(BENCHMARKS, "benchmark", name, group="rsi.benchmarks")
    if _is_benchmark(found):
        return found
    from rsi.problem import ProblemBenchmark  # an entry point naming a problem module

    return ProblemBenchmark


def _is_benchmark(found) -> bool:
    from rsi.benchmark import Benchmark

    return isinstance(found, type) and issubclass(found, Benchmark)


def problem_ref(name: str | None) -> str | None:
    """The module an ``rsi.benchmarks`` entry point names when it is a problem (anything but a
    Benchmark class: a module, or an object with ``tasks``/``score``); None otherwise."""
    if not isinstance(name, str) or name in BENCHMARKS:
        return None
    value = next((ep.value for ep in entry_points(group="rsi.benchmarks") if ep.name == name), None)
    if value is None:
        return None
    return None if _is_benchmark(_load({name: value}, "benchmark", name)) else value


def target_class(kind: str):
    return _load(TARGETS, "target kind", kind)
