"""Study: bytes a run writes to its storage per rollout row, against the row's own size.

Part 1 runs a real DarwinX search (table benchmark, scripted worker, local Ray) and counts
every byte the driver writes through the run's records, by file kind, rewrites included (the
state file is rewritten each step; on an object store, so is ``decisions.jsonl`` per line);
the yardstick is the row's size in Arrow memory. Part 2 writes the same rows as Parquet files of
1 to 1024 rows, since each measurement call (``evaluate_many``) becomes one file: the per-file cost (footer,
schema) is what makes small screens expensive per row.

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/storage_amplification.py'
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def scenario(root: Path, train: int, steps: int) -> Path:
    shutil.copytree(REPO / "targets" / "table_demo", root / "target")
    ids = [f"t{i}" for i in range(train)]
    versions = [f"v{i}" for i in range(steps + 1)]
    (root / "table.yaml").write_text(
        yaml.safe_dump(
            {
                "splits": {"train": ids, "test": ["x0", "x1"]},
                "scores": {v: {t: min(1.0, 0.3 + 0.1 * i) for t in ids + ["x0", "x1"]} for i, v in enumerate(versions)},
            }
        )
    )
    (root / "script.yaml").write_text(
        yaml.safe_dump(
            {"edits": [{"files": {"VERSION": f"{v}\n"}, "reply": v} for v in versions[1:]], "ask_reply": "noted"}
        )
    )
    cfg = {
        "name": "storage",
        "seed": 1,
        "storage": str(root / "runs"),
        "ray": {"num_cpus": 2},
        "target": {"path": "target", "kind": "program", "entry": "solve.py"},
        "benchmark": {"name": "table", "path": "table.yaml"},
        "algorithm": {
            "name": "darwinx",
            "worker": {"type": "scripted", "script": "script.yaml"},
            "screen_size": max(1, train // 2),
            "screen_samples": 1,
            "confirm_samples": 2,
            "max_steps": steps,
            "merge_every": 0,
        },
    }
    path = root / "darwinx.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def distinct_rows(table, n: int):
    """``n`` rows shaped like the run's own, with the values a real measurement varies (seeds,
    scores, durations, trace references) drawn fresh, so repetition does not flatter compression."""
    import random

    import pyarrow as pa

    rng = random.Random(n)
    template = table.slice(0, 1).to_pylist()[0]
    rows = [
        {
            **template,
            "task_id": f"t{i % 200}",
            "trial": i // 200,
            "sample_seed": rng.getrandbits(56),
            "score": rng.choice([0.0, 0.5, 1.0]),
            "duration_s": rng.uniform(0.05, 2.0),
            "trace_ref": f"traces/{1796000000000000000 + rng.getrandbits(40)}-train-{i // 16}.jsonl.gz#{i % 16}",
        }
        for i in range(n)
    ]
    return pa.Table.from_pylist(rows, schema=table.schema)


def kind_of(rel: str) -> str:
    top = rel.split("/", 1)[0]
    return {
        "rollouts": "rollouts/*.parquet",
        "traces": "traces/*.jsonl.gz",
        "blobs": "blobs + snapshots",
        "snapshots": "blobs + snapshots",
        "state": "state/latest.json.gz (rewritten per step)",
    }.get(top, rel)


def count_writes(records_cls) -> Counter:
    """Wrap the records' two write primitives; every byte the driver writes is counted."""
    written: Counter = Counter()
    write_bytes, append_line = records_cls.write_bytes, records_cls.append_line

    def counting_write(self, rel, data):
        written[kind_of(rel)] += len(data)
        return write_bytes(self, rel, data)

    def counting_append(self, rel, obj):
        from rsi.records import dumps

        written[kind_of(rel)] += len(dumps(obj)) + 1
        return append_line(self, rel, obj)

    records_cls.write_bytes, records_cls.append_line = counting_write, counting_append
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    # A token made for this run: nothing is read from or written to ~/.ray.
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    import ray

    from rsi.driver.runner import start_run
    from rsi.records import RunRecords

    root = Path(tempfile.mkdtemp(prefix="rsi-perf-storage-"))
    try:
        written = count_writes(RunRecords)
        run = start_run(str(scenario(root, args.train, args.steps)))
        run.execute()
        ray.shutdown()
        table = run.records.rollouts()
        rows = table.num_rows
        arrow_per_row = table.nbytes / rows
        on_disk = sum(p.stat().st_size for p in run.records.local_path().rglob("*") if p.is_file())

        print(
            f"machine: {os.cpu_count()} CPUs; DarwinX, {args.train} train tasks, {args.steps} steps: "
            f"{rows} rollout rows, {table.nbytes} bytes in Arrow memory ({arrow_per_row:.0f} per row)"
        )
        print()
        final: Counter = Counter()
        for f in run.records.local_path().rglob("*"):
            if f.is_file():
                final[kind_of(str(f.relative_to(run.records.local_path())))] += f.stat().st_size
        print("| file kind | bytes written by the driver | per rollout row | x Arrow row | final size on storage |")
        print("| --- | --- | --- | --- | --- |")
        for kind in sorted(set(written) | set(final), key=lambda k: -max(written[k], final[k])):
            n = written[kind]
            print(f"| {kind} | {n} | {n / rows:.0f} | x{n / rows / arrow_per_row:.2f} | {final[kind]} |")
        total = sum(written.values())
        print(f"| **all** | {total} | {total / rows:.0f} | x{total / rows / arrow_per_row:.2f} | {on_disk} |")
        print(
            f"\n{len(list((run.records.local_path() / 'rollouts').glob('*.parquet')))} Parquet files "
            f"({rows / len(list((run.records.local_path() / 'rollouts').glob('*.parquet'))):.1f} rows each); "
            "a file written by an actor rather than the driver shows only its final size"
        )
        print()
        print("| rows per Parquet file | bytes per row | x Arrow row |")
        print("| --- | --- | --- |")
        sink = RunRecords.create(str(root / "sweep"), "sweep")
        for n in (1, 4, 16, 64, 256, 1024):
            chunk = distinct_rows(table, n)
            rel = sink.write_rollouts(chunk, f"n{n}")
            size = (sink.local_path() / rel).stat().st_size
            print(f"| {n} | {size / n:.0f} | x{size / n / (chunk.nbytes / n):.2f} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
