"""The validation report of a meta-evolve run, written after the runner's test measurement.

On the validation instances (disjoint from everything the outer loop saw; TARGET never seen):

- ``meta_validate``: seed rule before, promoted rule after, paired by instance and seed, per
  family: before / after / gain / sd / wins-losses;
- ``transfer_ratio``: TARGET gain over SOURCE gain;
- the ceiling: the seed rule's own constant swept (flat PUCT, ``c`` in ``c_sweep``), each
  rule's gain over the seed on both families, and where the evolved rule sits against that
  hand-tuned family: behind its Pareto front (some ``c`` is at least as good on both families),
  on it, or beyond it (it dominates a front point).

Everything runs through the evaluator (one concurrent request per rule); the figures go to
``meta_report.json`` and a plot to ``meta_report.png`` in the run directory.
"""

from __future__ import annotations

import math
from typing import Any

from algorithms.meta.proposal_check import PRIORITY_SEED
from algorithms.meta.stats import FamilyReport, meta_validate, transfer_ratio
from rsi.results import Request


def c_rule(c: float) -> str:
    """The seed rule with its exploration constant set to ``c`` (``c_rule(1.0)`` is the seed)."""
    return PRIORITY_SEED.replace("1.0 * (1.0 / n_nodes)", f"{float(c)!r} * (1.0 / n_nodes)").replace(
        "c = 1 and", f"c = {c:g} and"
    )


def by_family(table, tasks: dict) -> dict[str, dict[tuple, float]]:
    """``{family: {(instance, seed): score}}`` of one rule's validation rows."""
    out: dict[str, dict[tuple, float]] = {}
    for tid, score in zip(table["task_id"].to_pylist(), table["score"].to_pylist()):
        spec = tasks[tid].input
        out.setdefault(tasks[tid].meta["dataset"], {})[(spec["instance"], spec["seed"])] = float(score)
    return out


def _se(r: FamilyReport) -> float | None:
    return r.sd / math.sqrt(r.n) if r.n > 1 else None


def placement(point: tuple[float, float], sweep: dict[str, tuple[float, float]]) -> dict:
    """Where ``point`` (source gain, target gain) sits against the swept rules' Pareto front.

    ``behind``: some swept rule is at least as good on both families. ``beyond``: outside the
    front drawn as straight segments between its points, i.e. better than any blend of
    neighbouring constants. ``on``: neither (point estimates; the SEs are in the table).
    ``tied``: every rule scores alike, so the domain does not separate rules at this budget.
    """

    def dominates(a, b):
        return a[0] >= b[0] and a[1] >= b[1] and (a[0] > b[0] or a[1] > b[1])

    front = sorted((v, k) for k, v in sweep.items() if not any(dominates(w, v) for w in sweep.values()))
    behind = [k for k, v in sweep.items() if dominates(v, point)]
    x, y = point
    xs = [v[0] for v, _ in front]
    if all(v == point for v in sweep.values()):
        verdict = "tied"
    elif behind:
        verdict = "behind"
    elif x > xs[-1] or y > max(v[1] for v, _ in front):
        verdict = "beyond"
    else:
        i = next(i for i in range(len(front)) if xs[i] >= x)
        (x1, y1), (x0, y0) = front[i][0], front[max(i - 1, 0)][0]
        level = y1 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        verdict = "beyond" if y > level + 1e-12 else "on"
    return {"verdict": verdict, "front": [k for _, k in front], "dominated_by": behind}


def validation_report(algo, promoted, test_table) -> dict:
    ctx, params = algo.ctx, algo.p
    bench = ctx.benchmark
    tasks = {t.task_id: t for t in bench.split("test")}
    seed = ctx.seed_snapshot
    rules = {"seed": seed, **{f"c={c:g}": algo.rule_snapshot(c_rule(c)) for c in params.c_sweep}}
    unique = {s.snapshot_id: s for s in rules.values() if s.snapshot_id != promoted.snapshot_id}
    tables = ctx.evaluator.evaluate_many(
        [Request(s, "test", salt="validation") for s in unique.values()], label="validation"
    )
    scores = {sid: by_family(t, tasks) for sid, t in zip(unique, tables)}
    scores[promoted.snapshot_id] = by_family(test_table, tasks)
    before = scores[seed.snapshot_id]
    src, tgt = bench.source, bench.target

    report = meta_validate(before, scores[promoted.snapshot_id])
    ratio = transfer_ratio(report, src, tgt)
    sweep = {name: meta_validate(before, scores[s.snapshot_id]) for name, s in rules.items() if name != "seed"}
    points = {name: (r[src].gain, r[tgt].gain) for name, r in sweep.items()}
    place = placement((report[src].gain, report[tgt].gain), points)

    body: dict[str, Any] = {
        "families": {"source": src, "target": tgt},
        "validation": {f: {**vars(r), "se": _se(r)} for f, r in report.items()},
        "transfer_ratio": ratio,
        "c_sweep": _sweep_rows(sweep, src, tgt),
        "evolved": {
            "snapshot_id": promoted.snapshot_id,
            "source_gain": report[src].gain,
            "target_gain": report[tgt].gain,
            "rule": algo.rule(promoted),
        },
        "placement": place,
        "benchmark": bench.describe(),
    }
    body["plot"] = plot(ctx.records, body) if params.plot else None
    ctx.records.write_json("meta_report.json", body)
    algo.decide(
        "validate",
        promoted.snapshot_id,
        seed.snapshot_id,
        step=algo.step + 2,  # after the test decision
        reason_code="validated",
        reason=f"{src} gain {report[src].gain:+.4f}, {tgt} gain {report[tgt].gain:+.4f}, "
        f"transfer {_ratio_text(ratio)}; {place['verdict']} the c-sweep's Pareto front",
        transfer_ratio=ratio,
        placement=place,
        validation={f: vars(r) for f, r in report.items()},
    )
    return {"tables": tables_of(body, report)}


def _ratio_text(ratio: float | None) -> str:
    return "undefined" if ratio is None else f"{ratio:.2f}"


def reading(ratio: float | None, source_gain: float) -> str:
    if ratio is None:
        return "undefined: no gain on the source family (zero over zero is not a transfer result)"
    if source_gain < 0:
        return "the rule lost on its own family: nothing to transfer"
    if ratio < 0:
        return "negative: generalisation traded for training fit"
    if ratio < 0.25:
        return "about 0: the gain stays on the training landscape (over-fitting)"
    return "positive: the gain carries over to the unseen family"


def _sweep_rows(sweep: dict, src: str, tgt: str) -> list[dict]:
    """One ``c_sweep`` row per swept rule: its gains over the seed rule on both families."""
    return [
        {
            "rule": name,
            "source_gain": r[src].gain,
            "source_se": _se(r[src]),
            "target_gain": r[tgt].gain,
            "target_se": _se(r[tgt]),
            "source_mean": r[src].after,
            "target_mean": r[tgt].after,
        }
        for name, r in sweep.items()
    ]


def _placement_text(place: dict) -> str:
    """Where the evolved rule lies against the c-sweep's Pareto front, in words."""
    return {
        "behind": f"behind the front (dominated by {', '.join(place['dominated_by'])})",
        "beyond": f"beyond the front ({', '.join(place['front'])}): no blend of swept constants reaches it",
        "on": "on the front: no swept rule is at least as good on both families, none is beaten by "
        "more than a blend of neighbours",
        "tied": "tied with every swept rule: on these instances the inner search does not separate "
        "selection rules (raise the inner budget or the instance size)",
    }[place["verdict"]]


def tables_of(body: dict, report: dict) -> list[dict]:
    src, tgt = body["families"]["source"], body["families"]["target"]
    rows = [
        {
            "family": f,
            "role": "source" if f == src else "target",
            "pairs": r.n,
            "before": r.before,
            "after": r.after,
            "gain": r.gain,
            "sd": r.sd,
            "se": _se(r),
            "wins": r.wins,
            "losses": r.losses,
        }
        for f, r in sorted(report.items(), key=lambda kv: kv[0] != src)
    ]
    ratio = body["transfer_ratio"]
    sweep_rows = [
        {
            "rule": s["rule"],
            f"{src} gain": s["source_gain"],
            f"{src} se": s["source_se"],
            f"{tgt} gain": s["target_gain"],
            f"{tgt} se": s["target_se"],
        }
        for s in body["c_sweep"]
    ]
    ev = body["validation"]
    sweep_rows.append(
        {
            "rule": "evolved",
            f"{src} gain": ev[src]["gain"],
            f"{src} se": ev[src]["se"],
            f"{tgt} gain": ev[tgt]["gain"],
            f"{tgt} se": ev[tgt]["se"],
        }
    )
    where = _placement_text(body["placement"])
    plot_note = f"; plot: {body['plot']}" if body["plot"] else ""
    return [
        {
            "title": "validation: seed rule -> promoted rule on unseen instances (paired by instance and seed)",
            "rows": rows,
            "note": f"transfer ratio ({tgt} gain / {src} gain): {_ratio_text(ratio)} — "
            f"{reading(ratio, ev[src]['gain'])}",
        },
        {
            "title": "ceiling: flat PUCT constant c on the same instances (gain over the seed rule)",
            "rows": sweep_rows,
            "note": f"evolved rule: {where}; figures in meta_report.json{plot_note}",
        },
    ]


def plot(records, body: dict) -> str | None:
    """Gain on SOURCE vs TARGET: the c-family as a line, the evolved rule with its SEs; the same
    figure ``rsi report`` draws (``rsi.reporting.figures.meta_scatter``)."""
    from rsi.reporting.figures import meta_scatter

    png = meta_scatter(body)
    if png is None:
        return None
    records.write_bytes("meta_report.png", png)
    return "meta_report.png"
