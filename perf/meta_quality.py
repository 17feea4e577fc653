"""Quality of meta-evolve on stage 0: the evolved rule against the hand-tuned c-family, and the
seed's lesson about gate size.

For each variant (a gate size: hold-out = oracle = that many SOURCE pairs, and a ``z_gate``;
``z_gate 0`` accepts any positive mean gain, as the seed's own gate did; ``:noconfirm`` admits
on the gate alone, ``algorithm.confirm: false``, as the seed's loop did, whose second opinion
read the same numbers as its gate) and each outer seed, run
``configs/metasearch.yaml`` through the real runner (symbolic proposer) and read its
``meta_report.json``: the promoted rule's gain over the seed rule on the
validation instances of SOURCE and TARGET (paired, with SE and wins/losses), the transfer ratio,
and where the rule sits against the c-sweep's Pareto front. The validation instances are the
same in every run, so the c-sweep is too (inner searches are deterministic).

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/meta_quality.py --fresh'
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from algorithms.meta.inner import scores
from algorithms.meta.proposal_check import PRIORITY_SEED
from rsi.driver.runner import start_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_page import write_page  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "metasearch.yaml"


def one_run(tmp: Path, seed: int, gate: int, z: float, confirm: bool, rounds: int, candidates: int) -> dict:
    overrides = [
        ("seed", str(seed)),
        ("benchmark.holdout", str(gate)),
        ("benchmark.oracle", str(gate)),
        ("algorithm.z_gate", str(z)),
        ("algorithm.max_rounds", str(rounds)),
        ("algorithm.candidates_per_round", str(candidates)),
        ("algorithm.confirm", str(confirm).lower()),
    ]
    run_dir = tmp / f"gate{gate}-z{z:g}-{'confirm' if confirm else 'noconfirm'}-seed{seed}"
    t0 = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):
        r = start_run(str(CONFIG), overrides, str(run_dir))
        r.execute()
    report = json.loads((run_dir / "meta_report.json").read_text())
    decisions = r.records.decisions()
    admits = [d for d in decisions if d["kind"] == "admit"]
    report["admits"] = [
        {
            "round": d["round"],
            "gain": d["gain"],
            "se": d["se"],
            "oracle_gain": d.get("oracle_gain"),
            "oracle_se": d.get("oracle_se"),
            "rule": d["rule"],
        }
        for d in admits
    ]
    # Each admission judged where the gate could not look: the admitted rule against the one it
    # replaced, on the SOURCE validation pairs (its own family, instances the loop never saw).
    validation = [(200_000 + i, 0) for i in range(report["benchmark"]["validation_pairs_per_family"])]
    on_validation = lambda rule: scores(rule, "landscape-source", validation, report["benchmark"]["budget"])  # noqa: E731
    before = on_validation(PRIORITY_SEED)
    for a in report["admits"]:
        after = on_validation(a["rule"])
        gain = after - before
        a["validation_gain"], a["validation_wins"], a["validation_losses"] = (
            float(gain.mean()),
            int((gain > 0).sum()),
            int((gain < 0).sum()),
        )
        before = after  # the next admission replaced this rule
    report["elapsed_s"] = time.monotonic() - t0
    report["candidates"] = sum(d["kind"] == "screen" for d in decisions)
    report["invalid"] = sum(d["kind"] == "invalid" for d in decisions)
    return report


def noise(pairs: int, budget: int) -> float:
    """Largest difference between two repeats of the seed rule on the same pairs."""
    ps = [(200_000 + i, 0) for i in range(pairs)]
    a, b = (scores(PRIORITY_SEED, "landscape-source", ps, budget) for _ in range(2))
    return float(np.max(np.abs(a - b)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument(
        "--variants",
        default="9:2,9:0,9:0:noconfirm,200:2",
        help="GATE:Z[:noconfirm]: hold-out (= oracle) size in SOURCE pairs, z_gate, and whether a gate "
        "pass skips the oracle",
    )
    ap.add_argument("--rounds", type=int, default=36)
    ap.add_argument("--candidates", type=int, default=4)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--out", default=str(REPO / "perf" / "results" / "meta-stage0.md"))
    ap.add_argument("--fresh", action="store_true", help="measure every run again (ignore the stored reports)")
    args = ap.parse_args()
    import ray

    # Finished runs' reports are kept beside the page (the raw figures behind it), so an
    # interrupted study resumes where it stopped; --fresh measures everything again.
    cache_path = Path(args.out).with_suffix(".json")
    cache = json.loads(cache_path.read_text()) if cache_path.exists() and not args.fresh else {}
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = [
        (int(v[0]), float(v[1]), v[2:] != ["noconfirm"]) for v in (x.split(":") for x in args.variants.split(","))
    ]
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, configure_logging=False, namespace="rsi")
    with tempfile.TemporaryDirectory() as tmp:
        for gate, z, confirm in variants:
            for seed in seeds:
                key = run_key(gate, z, confirm, seed, args)
                if key not in cache:
                    cache[key] = one_run(Path(tmp), seed, gate, z, confirm, args.rounds, args.candidates)
                    cache_path.write_text(json.dumps(cache, indent=1))
                rep = cache[key]
                src, tgt = rep["families"]["source"], rep["families"]["target"]
                v = rep["validation"]
                print(
                    f"{key}: {len(rep['admits'])} admitted; {src} {v[src]['gain']:+.4f} ± {v[src]['se']:.4f} "
                    f"({v[src]['wins']}/{v[src]['losses']}), {tgt} {v[tgt]['gain']:+.4f} ± {v[tgt]['se']:.4f}; "
                    f"transfer {rep['transfer_ratio']}; {rep['placement']['verdict']}; {rep['elapsed_s']:.0f}s",
                    flush=True,
                )
    ray.shutdown()
    results = {v: [cache[run_key(*v, s, args)] for s in seeds] for v in variants}
    write(args, seeds, variants, results, noise(50, 60))


def run_key(gate: int, z: float, confirm: bool, seed: int, args) -> str:
    return f"gate={gate} z={z:g}{'' if confirm else ' noconfirm'} seed={seed} rounds={args.rounds}x{args.candidates}"


def _f(v, digits=4, sign=True) -> str:
    return "n/a" if v is None else f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


def write(args, seeds, variants, results, repeat_noise: float) -> None:
    first = results[variants[0]][0]
    src, tgt = first["families"]["source"], first["families"]["target"]
    bench = first["benchmark"]
    lines = [
        "# meta-evolve, stage 0: evolved node-selection rule vs the hand-tuned c-family",
        "",
        f"Measured by `perf/meta_quality.py`: `configs/metasearch.yaml` (symbolic proposer, {args.rounds} rounds x "
        f"{args.candidates} candidates, inner budget {bench['budget']}, reward {bench['reward']}) for outer "
        f"seeds {', '.join(map(str, seeds))}, with gate hold-out = oracle set of "
        f"{' / '.join(f'{g} pairs at z_gate {z:g}' + ('' if c else ' without the oracle') for g, z, c in variants)}. "
        f"Validation: {bench['validation_pairs_per_family']} unseen "
        f"pairs per family ({src} = SOURCE, {tgt} = TARGET, never seen by the outer loop), paired by instance and "
        "seed against the seed rule (flat PUCT, c = 1).",
        "",
        f"Noise: two repeats of the seed rule on 50 validation pairs differ by at most {repeat_noise:g} "
        "(inner searches are seed-deterministic), so every gain below is signal plus instance sampling, and the "
        "SEs are over instances.",
        "",
        "## Ceiling first: the seed rule's own constant, same validation instances",
        "",
        f"| rule | {src} gain | se | {tgt} gain | se |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in first["c_sweep"]:
        lines.append(
            f"| {s['rule']} | {_f(s['source_gain'])} | {_f(s['source_se'], sign=False)} | "
            f"{_f(s['target_gain'])} | {_f(s['target_se'], sign=False)} |"
        )
    for gate, z, confirm in variants:
        runs = results[(gate, z, confirm)]
        title = (
            f"Gate hold-out = oracle = {gate} pairs, z_gate {z:g}"
            if confirm
            else f"Gate hold-out = {gate} pairs, z_gate {z:g}, no oracle (algorithm.confirm: false)"
        )
        lines += [
            "",
            f"## {title}",
            "",
            f"| outer seed | admitted | {src} gain ± se (wins/losses) | {tgt} gain ± se (wins/losses) | "
            "transfer | vs c-sweep front | evolved rule (return line) | wall (s) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for seed, rep in zip(seeds, runs):
            v = rep["validation"]
            ret = next(
                (ln.strip() for ln in rep["evolved"]["rule"].splitlines() if ln.strip().startswith("return")), ""
            )
            lines.append(
                f"| {seed} | {len(rep['admits'])} | {_f(v[src]['gain'])} ± {v[src]['se']:.4f} "
                f"({v[src]['wins']}/{v[src]['losses']}) | {_f(v[tgt]['gain'])} ± {v[tgt]['se']:.4f} "
                f"({v[tgt]['wins']}/{v[tgt]['losses']}) | {_f(rep['transfer_ratio'], 2, False)} | "
                f"{rep['placement']['verdict']} | `{ret}` | {rep['elapsed_s']:.0f} |"
            )
        sg = [r["validation"][src]["gain"] for r in runs]
        tg = [r["validation"][tgt]["gain"] for r in runs]

        def sd(xs):
            return statistics.stdev(xs) if len(xs) > 1 else 0.0

        lines += [
            "",
            f"Mean over seeds: {src} {statistics.mean(sg):+.4f} ± {sd(sg):.4f} (sd), "
            f"{tgt} {statistics.mean(tg):+.4f} ± {sd(tg):.4f} (sd). "
            f"Runs whose promoted rule loses on its own family's validation: "
            f"{sum(g < 0 for g in sg)}/{len(sg)}.",
        ]
        judged = [a for r in runs for a in r["admits"] if "validation_gain" in a]
        if judged:
            lines.append(
                f"Admissions that lose to the rule they replaced on SOURCE validation: "
                f"{sum(a['validation_gain'] < 0 for a in judged)}/{len(judged)}."
            )
        for seed, rep in zip(seeds, runs):
            if rep["admits"]:
                steps = "; ".join(
                    f"round {a['round']}: gate {_f(a['gain'])} ± {_f(a['se'], sign=False)}"
                    + (f", oracle {_f(a['oracle_gain'])} ± {_f(a['oracle_se'], sign=False)}" if confirm else "")
                    + (
                        f", on SOURCE validation vs the rule it replaced {_f(a['validation_gain'])} "
                        f"({a['validation_wins']}/{a['validation_losses']})"
                        if "validation_gain" in a
                        else ""
                    )
                    for a in rep["admits"]
                )
                lines.append(f"- seed {seed} admissions: {steps}")
    lines += [
        "",
        "```",
        f"unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/meta_quality.py --fresh "
        f"--seeds {args.seeds} --variants {args.variants} --rounds {args.rounds} "
        f"--candidates {args.candidates}'",
        "```",
    ]
    write_page(args.out, lines)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
