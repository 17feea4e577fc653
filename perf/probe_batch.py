"""The mutator's probe batching: edits drawn and probed ``PROBE_BATCH`` at a time in one jailed
process, against one jailed process per drawn edit, side by side in one run.

The same edit chains run with the batch set to 1 and to the shipped size, alternating; each
prints its wall time, the jail starts it made, and whether the two made byte-identical edits and
left the same generator state (they must: the batch only changes how often the jail starts).

    python perf/probe_batch.py [--seeds 8] [--edits 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import rsi.workers._probe as probe
import rsi.workers.mutator as mutator
from rsi.workers._pyedit import MARKER
from rsi.workers.mutator import MutatorWorker

REPO = Path(__file__).resolve().parents[1]
BEST_FIT = (
    f"import numpy as np\n\n\n{MARKER}\ndef priority(item: float, bins: np.ndarray) -> np.ndarray:\n"
    "    return -(bins - item)\n"
)
CONFIGS: dict[str, dict] = {
    "probe order, synthetic inputs": {"probe": "order"},
    "recorded inputs, local_share 1": {"probe": "order", "probe_inputs": "probe.json", "local_share": 1.0},
    "recorded inputs, data_thresholds 1, local_share 0.5": {
        "probe": "order", "probe_inputs": "probe.json", "data_thresholds": 1.0, "local_share": 0.5,
    },
}  # fmt: skip


def chains(batch: int, config: dict, seeds: int, edits: int, root: Path) -> tuple[list, float, int]:
    """(every reply, file and generator state, wall seconds, jail starts) with ``PROBE_BATCH`` = batch."""
    mutator.PROBE_BATCH = batch
    recorded = (REPO / "targets" / "binpack_bestfit" / "probe.json").read_text()
    starts = [0]
    real_run = probe._run

    def counting_run(jobs):
        starts[0] += 1
        return real_run(jobs)

    probe._run = counting_run
    out = []
    t0 = time.perf_counter()
    try:
        for seed in range(seeds):
            checkout = root / f"b{batch}-{seed}"
            checkout.mkdir(parents=True)
            (checkout / "heuristic.py").write_text(BEST_FIT)
            (checkout / "probe.json").write_text(recorded)
            worker = MutatorWorker(MutatorWorker.Config(type="mutator", **config), base_dir=Path("."), seed=seed)
            replies = [worker.edit(checkout, "improve") for _ in range(edits)]
            out.append([replies, (checkout / "heuristic.py").read_text(), str(worker.get_state()["rng"])])
    finally:
        probe._run = real_run
    return out, time.perf_counter() - t0, starts[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--edits", type=int, default=3)
    args = ap.parse_args()
    shipped = mutator.PROBE_BATCH
    print(f"{args.seeds} seeds x {args.edits} chained edits of best fit per config; batch {shipped} vs 1\n")
    print(f"| config | batch 1 (s) | jail starts | batch {shipped} (s) | jail starts | speed-up | identical |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    total = [0.0, 0.0]
    for name, config in CONFIGS.items():
        with tempfile.TemporaryDirectory(prefix="rsi-probe-batch-") as tmp:
            one, t1, s1 = chains(1, config, args.seeds, args.edits, Path(tmp))
            many, tn, sn = chains(shipped, config, args.seeds, args.edits, Path(tmp))
        total[0] += t1
        total[1] += tn
        same = json.dumps(one) == json.dumps(many)
        print(f"| {name} | {t1:.1f} | {s1} | {tn:.1f} | {sn} | {t1 / tn:.2f}x | {'yes' if same else 'NO'} |")
    print(f"\nall configs: {total[0]:.1f} s vs {total[1]:.1f} s, {total[0] / total[1]:.2f}x")


if __name__ == "__main__":
    main()
