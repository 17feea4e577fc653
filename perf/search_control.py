"""DarwinX against two controls at equal rollouts, on the quickstart's bin-packing setup.

For each seed: DarwinX as the quickstart runs it (``configs/quickstart.yaml --seed S
--algorithm.seed S``), then, with the same worker block (offline mutator, 4 replicas, probe),
the same benchmark and target, two ``hillclimb`` runs capped at the train rollouts DarwinX
executed (counted from its ``rollouts/*.parquet``; cache hits are free for both): a plain (1+1)
climb and one that restarts from the seed after ``--restart-after`` measured children without a
rise. A run directory that already holds ``summary.json`` is reused, not run again. The table:
seed, method, train rollouts, steps, Weibull 5k excess % as the runner printed it (the
published test set, measured once on the promoted version), wall time and load average.

Every run starts its own local Ray; on a machine where Ray must see only loopback run the whole
script in a network namespace::

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/search_control.py --seeds 1 2 3'
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_quality import run_figures  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
RSI = str(Path(sys.executable).parent / "rsi")


def run(config: Path, run_dir: Path, *overrides: str) -> None:
    """``rsi run`` to its end, with ``wall.txt`` (seconds, load average) beside the run."""
    if (run_dir / "summary.json").exists():
        return
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(run_dir.parent / f"{run_dir.name}.log", "w") as log:
        subprocess.run(
            [RSI, "run", str(config), *overrides, "--run-dir", str(run_dir)],
            check=True,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    (run_dir / "wall.txt").write_text(f"{time.monotonic() - t0:.1f} {load}\n")


def control_config(path: Path, rollouts: int, restart_after: int, max_steps: int) -> Path:
    """The quickstart with its algorithm block replaced by ``hillclimb`` (same worker)."""
    cfg = yaml.safe_load(QUICKSTART.read_text())
    worker = cfg["algorithm"]["worker"]
    cfg["name"] = path.stem
    cfg["algorithm"] = {
        "name": "hillclimb",
        "worker": worker,
        "max_steps": max_steps,
        "max_rollouts": rollouts,
        "restart_after": restart_after,
        "samples": 1,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def steps(decisions: list[dict]) -> str:
    kept = [d for d in decisions if d["kind"] in ("keep", "confirm")]
    last = max((d["step"] for d in decisions if d["kind"] not in ("test", "promote")), default=0)
    restarts = sum(1 for d in decisions if d["kind"] == "restart")
    admitted = sum(1 for d in kept if d["accepted"] and d.get("reason_code") in ("admitted", "improved"))
    what = (
        f"{last} steps, {len(kept)} {'confirms' if kept and kept[0]['kind'] == 'confirm' else 'measured'}, "
        f"{admitted} {'admitted' if kept and kept[0]['kind'] == 'confirm' else 'improved'}"
    )
    return what + (f", {restarts} restarts" if restarts else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--runs", type=Path, default=ROOT / "runs")
    parser.add_argument(
        "--restart-after",
        type=int,
        default=25,
        help="the restart control's K (chosen before any run: about the measured children "
        "one improving edit of best fit takes at the mutator's 2-4 %% better share)",
    )
    parser.add_argument("--max-steps", type=int, default=1000, help="the controls' step cap (the rollouts bind first)")
    args = parser.parse_args()
    rows = []
    for s in args.seeds:
        dx = args.runs / f"ctl-{s}-darwinx"
        run(QUICKSTART, dx, "--seed", str(s), "--algorithm.seed", str(s))
        budget = run_figures(dx)["train_rollouts"]
        for method, k in (("hillclimb", 0), ("restarts", args.restart_after)):
            cfg = control_config(args.runs / "ctl-configs" / f"ctl-{s}-{method}.yaml", budget, k, args.max_steps)
            run(cfg, args.runs / f"ctl-{s}-{method}", "--seed", str(s))
        for method, label in (
            ("darwinx", "DarwinX"),
            ("hillclimb", "(1+1) hill climber"),
            ("restarts", f"restarts, K = {args.restart_after}"),
        ):
            r = run_figures(args.runs / f"ctl-{s}-{method}")
            rows.append((s, label, r))
    print("| seed | method | train rollouts | steps | Weibull 5k excess % | wall | load average |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for s, label, r in rows:
        weibull = r["test"].get("Weibull 5k")
        wall = f"{r['wall_s']:.0f} s" if "wall_s" in r else ""
        print(
            f"| {s} | {label} | {r['train_rollouts']} | {steps(r['decisions'])} | "
            f"{'failed' if weibull is None else f'{weibull:.2f}'} | {wall} | {r.get('load', '')} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
