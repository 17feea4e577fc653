"""A rollout's writes to its checkout never reach the next rollout, whichever way the node
gives it that checkout: the jail's own tmpfs copy of the node's pristine snapshot (bwrap, no
host-side copy) or a fresh host copy per rollout (the weak ``process`` backend). Run through
``run_batch``, the function every Ray rollout task calls, on a real snapshot."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import pytest

from actors import rollout as rollout_mod
from actors.rollout import RolloutSpec, run_batch
from benchmarks.table import TableBenchmark, TableParams
from rsi.config import TargetConfig
from rsi.results import from_ipc
from rsi.snapshot import Snapshot
from rsi.target import ProgramTarget

pytestmark = pytest.mark.timeout(120)

TAMPER = textwrap.dedent(
    """
    import json, os
    seen, size = sorted(os.listdir(".")), os.path.getsize("main.py")
    wrote = True
    try:  # the process backend under root runs as a slot uid that may not write here at all
        with open("main.py", "a") as f:
            f.write("\\n# an edit the next rollout must not see\\n")
        with open("left_behind.txt", "w") as f:
            f.write("x")
    except PermissionError:
        wrote = False
    print(json.dumps({"answer": "v0", "seen": seen, "size": size, "wrote": wrote}))
    """
)


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(p.relative_to(root).as_posix().encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("backend", ["bwrap", "process"])
def test_writes_to_the_checkout_never_reach_the_next_rollout(tmp_path, monkeypatch, backend):
    monkeypatch.setattr(rollout_mod, "NODE_CACHE", tmp_path / "node-cache")
    (tmp_path / "table.yaml").write_text("splits: {train: [t1, t2, t3]}\nscores: {v0: {t1: 1, t2: 1, t3: 1}}\n")
    bench = TableBenchmark(TableParams(name="table", path="table.yaml"), base_dir=tmp_path)
    target = ProgramTarget(
        TargetConfig(path=".", kind="program", entry="main.py", limits={"timeout_s": 30, "backend": backend}), bench
    )
    assert target.needs_private_workdir is (backend == "process")  # bwrap: no host copy at all
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.py").write_text(TAMPER)
    (src / "components.yaml").write_text("- {name: program, glob: '*'}\n")
    snapshot = Snapshot.from_dir(src)
    tasks = {t.task_id: t for t in bench.split("train")}
    specs = [RolloutSpec(t, k, k) for k in range(2) for t in tasks]
    rows, traces = run_batch(snapshot, target, tasks, specs, "run", "train")
    table = from_ipc(rows)
    assert table["status"].to_pylist() == ["ok"] * len(specs), [(t.get("reason"), t.get("stderr_tail")) for t in traces]
    outputs = [t["output"] for t in traces]
    assert [o["seen"] for o in outputs] == [["components.yaml", "main.py"]] * len(specs), "a rollout saw an earlier one's file"
    assert {o["size"] for o in outputs} == {len(TAMPER.encode())}, "a rollout saw an earlier one's edit"
    if backend == "bwrap":  # the jail's checkout is writable: the writes happened, and vanished
        assert all(o["wrote"] for o in outputs)
    pristine = rollout_mod.NODE_CACHE / snapshot.snapshot_id
    assert sorted(p.name for p in pristine.iterdir()) == ["components.yaml", "main.py"]
    assert (pristine / "main.py").read_text() == TAMPER, "the node's pristine copy was written to"
    assert digest(pristine) == digest(src)
