"""The layer contract, read from the source: every ``import`` (module level or inside a function)
of every module, against what its layer may import.

- the core (``rsi/`` minus ``rsi/driver/``) imports none of ``ray``, ``actors``, ``algorithms``,
  ``cluster``, ``benchmarks`` (the registry names plugins by import string, never by import);
- ``algorithms/`` and ``benchmarks/`` import the core only (no Ray, no actors, no cluster);
- ``actors/`` and ``cluster/`` import the core (and Ray), never an algorithm or a benchmark;
- ``rsi/driver/`` (the runner and the CLI) wires everything together;
- ``rsi/testing/`` holds test doubles (the scripted model server): tests and demos use them,
  no other layer imports them, the driver included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

RULES = {
    "rsi": {"ray", "actors", "algorithms", "cluster", "benchmarks"},
    "algorithms": {"ray", "actors", "cluster", "benchmarks"},
    "benchmarks": {"ray", "actors", "cluster", "algorithms"},
    "actors": {"algorithms", "benchmarks", "cluster"},
    "cluster": {"algorithms", "benchmarks", "actors"},
}

#: Known crossings, each with its reason. Adding one needs a reason a reviewer accepts.
ALLOWED = {
    # meta-evolve's bin-packing inner-search domain packs a node's program in the benchmark's
    # own jailed skeleton and lockstep dialogue, counts with its lower bound and draws instances
    # from its generator, so each stays one piece of code.
    ("algorithms/meta/binpack.py", "benchmarks.binpack.instances"),
    ("algorithms/meta/binpack.py", "benchmarks.binpack.lockstep"),
    ("algorithms/meta/binpack.py", "benchmarks.binpack.online"),
}


def is_module(name: str) -> bool:
    """``name`` is a module or package of this repository."""
    path = REPO.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it; ``from rsi import jail`` counts as the
    module ``rsi.jail`` too, not only as its package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if is_module(f"{node.module}.{a.name}")}
    return found


def layer_of(path: Path) -> str | None:
    rel = path.relative_to(REPO)
    if rel.parts[:2] == ("rsi", "driver"):
        return None  # the driver may import anything
    return rel.parts[0] if rel.parts[0] in RULES else None


def violations() -> list[str]:
    out = []
    for layer in RULES:
        for path in sorted((REPO / layer).rglob("*.py")):
            own = layer_of(path)
            if own is None:
                continue
            rel = path.relative_to(REPO).as_posix()
            for module in sorted(imports(path)):
                if module.split(".")[0] in RULES[own] and (rel, module) not in ALLOWED:
                    out.append(f"{rel} imports {module} ({own}/ may not import {module.split('.')[0]})")
    return out


def test_every_layer_imports_only_what_it_may():
    assert violations() == []


def test_test_doubles_are_imported_by_no_layer():
    found = [
        f"{path.relative_to(REPO).as_posix()} imports {module}"
        for layer in RULES
        for path in sorted((REPO / layer).rglob("*.py"))
        if path.relative_to(REPO).parts[:2] != ("rsi", "testing")
        for module in sorted(imports(path))
        if module == "rsi.testing" or module.startswith("rsi.testing.")
    ]
    assert found == []


def test_the_allowed_crossings_still_exist():
    """An allowance nothing needs any more is removed, not kept as a silent hole."""
    for rel, module in ALLOWED:
        assert module in imports(REPO / rel), (rel, module)


@pytest.mark.parametrize("module", ["rsi.config", "rsi.snapshot", "rsi.records", "rsi.algorithm", "rsi.problem",
                                    "rsi.sandbox", "algorithms.darwinx", "algorithms.adas", "algorithms.ahe"])
def test_core_and_algorithms_load_without_ray(module):
    """``rsi validate`` on an algorithm's config must not import Ray: checked in a fresh process."""
    import subprocess
    import sys

    code = f"import sys, {module}; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", f"importing {module} imported ray"


def test_rsi_validate_starts_no_ray():
    import subprocess
    import sys

    code = ("import sys\nfrom rsi.driver.cli import main\n"
            "assert main(['validate', 'configs/quickstart.yaml']) == 0\nprint('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
