"""Study: does a long run grow flat or linearly? Driver memory and bytes written per step over a
1,000-step offline DarwinX run.

The run is the storage study's scenario (table benchmark, a scripted worker whose every edit is
a small improvement, local Ray, program rollouts in the jail) at ``--steps`` steps. Every byte
the driver writes through the run's records is counted by file kind (``perf/storage_amplification
.count_writes``), and after each decision the driver's resident memory is read from /proc. The
table gives, per window of steps, the bytes written per step and the memory at the window's end:
constant bytes per step and a flat memory line mean no quadratic rewrite and no leak.

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/growth.py --steps 1000'
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from storage_amplification import count_writes, scenario  # noqa: E402


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--train", type=int, default=2)
    ap.add_argument("--windows", type=int, default=10)
    args = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    import ray

    from rsi.driver.runner import start_run
    from rsi.records import RunRecords

    root = Path(tempfile.mkdtemp(prefix="rsi-perf-growth-"))
    load0 = os.getloadavg()[0]
    samples: list[tuple[int, float, Counter, float]] = []  # step, rss, bytes so far by kind, time
    try:
        written = count_writes(RunRecords)
        run = start_run(str(scenario(root, args.train, args.steps)))
        t0 = time.perf_counter()

        def sample(record: dict) -> None:
            samples.append((int(record.get("step", 0)), rss_mib(), Counter(written), time.perf_counter() - t0))

        run.records.decision_listeners.append(sample)
        run.execute()
        ray.shutdown()
        on_disk = sum(p.stat().st_size for p in run.records.local_path().rglob("*") if p.is_file())
    finally:
        shutil.rmtree(root, ignore_errors=True)

    width = max(1, args.steps // args.windows)
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load0:.1f} before / {os.getloadavg()[0]:.1f} after; "
        f"DarwinX {args.steps} steps, {args.train} train tasks, scripted worker; {len(samples)} decisions; "
        f"{on_disk / 1e6:.1f} MB on storage at the end"
    )
    print()
    kinds = sorted({k for *_, c, _ in samples for k in c}, key=lambda k: -samples[-1][2][k])[:4]
    head = " | ".join(f"{k} B/step" for k in kinds)
    print(f"| steps | driver RSS at end (MiB) | all bytes/step | {head} | s/step |")
    print("| --- | --- | --- | --- | --- |" + " --- |" * (len(kinds) - 1))
    prev_step, prev_bytes, prev_t = 0, Counter[str](), 0.0
    for end in range(width, args.steps + 1, width):
        inside = [s for s in samples if s[0] <= end]
        if not inside:
            continue
        step, rss, so_far, t = inside[-1]
        n = max(1, step - prev_step)
        delta = so_far - prev_bytes
        cols = " | ".join(f"{delta[k] / n:.0f}" for k in kinds)
        print(
            f"| {prev_step + 1}-{step} | {rss:.0f} | {sum(delta.values()) / n:.0f} | {cols} | {(t - prev_t) / n:.2f} |"
        )
        prev_step, prev_bytes, prev_t = step, so_far, t
    print()
    last = samples[-1][2]
    print(
        "bytes written by the driver, by file kind, whole run: " + ", ".join(f"{k} {v}" for k, v in last.most_common())
    )


if __name__ == "__main__":
    main()
