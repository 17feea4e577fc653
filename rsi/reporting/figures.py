"""The report's figures, drawn with matplotlib (Agg) from a ``RunView``; each returns PNG bytes
or None when the run holds nothing to draw."""

from __future__ import annotations

import io
import math

from rsi.reporting.data import Candidate, RunView, short

COLORS = {
    "seed": "#1f77b4",
    "admitted": "#2ca02c",
    "rejected": "#d62728",
    "measured": "#7f7f7f",
    "declined": "#b0b0b0",
    "promoted": "#ff9f1c",
    "donor": "#6a3d9a",
}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _int_ticks():
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    _plt().close(fig)
    return buf.getvalue()


def score_over_steps(view: RunView) -> bytes | None:
    """Every measured candidate's search-split mean at the step it was first decided; admitted
    ones filled, the promoted one starred, the best admitted so far as a step line."""
    cands = [c for c in view.candidates if c.score is not None]
    if not cands:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.2))
    rej = [c for c in cands if not c.admitted]
    adm = [c for c in cands if c.admitted]
    if rej:
        ax.scatter(
            [c.step for c in rej],
            [c.score for c in rej],
            s=36,
            facecolors="none",
            edgecolors=COLORS["rejected"],
            label="rejected / not admitted",
            zorder=3,
        )
    if adm:
        ax.scatter(
            [c.step for c in adm],
            [c.score for c in adm],
            s=48,
            color=COLORS["admitted"],
            label="admitted (seed included)",
            zorder=4,
        )
        xs, ys = _best_so_far(adm, view.steps)
        ax.step(xs, ys, where="post", color=COLORS["admitted"], alpha=0.5, lw=1.5, label="best admitted so far")
    prom = [c for c in cands if c.promoted]
    if prom:
        ax.scatter(
            [c.step for c in prom],
            [c.score for c in prom],
            marker="*",
            s=320,
            color=COLORS["promoted"],
            edgecolors="black",
            linewidths=0.6,
            label="promoted",
            zorder=5,
        )
    if len(cands) <= 40:
        _label_points(ax, cands)
    ax.xaxis.set_major_locator(_int_ticks())
    ax.set_xlabel("step")
    ax.set_ylabel(f"{view.split} mean (avg@k per task, then mean)")
    ax.set_title(f"{view.name}: score of every measured candidate", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return _png(fig)


def _label_points(ax, cands: list) -> None:
    """Each candidate's short snapshot id beside its point."""
    for c in cands:
        ax.annotate(
            short(c.snapshot_id, 6),
            (c.step, c.score),
            textcoords="offset points",
            xytext=(5, 4),
            fontsize=7,
            color="0.35",
        )


def _best_so_far(admitted: list, steps: int) -> tuple[list, list]:
    """The best admitted score so far as a step line, from the first admission to the run's last step."""
    xs, ys, best = [], [], -math.inf
    for step, score in sorted(((c.step, c.score) for c in admitted if c.score is not None), key=lambda p: p[0]):
        best = max(best, score)
        xs.append(step)
        ys.append(best)
    xs.append(max(steps, xs[-1]))
    ys.append(ys[-1])
    return xs, ys


def lineage(view: RunView) -> bytes | None:
    """The lineage tree: x = step, one row per candidate in depth-first order under its parent;
    parent edges solid, donor edges of merges dashed, declined edits greyed."""
    cands = view.candidates
    if not cands:
        return None
    known, order = _lineage_rows(view)
    pos = {id(n): (n.step, -row) for row, n in enumerate(order)}
    plt = _plt()
    height = min(40.0, max(2.5, 0.32 * len(order) + 1.2))
    fig, ax = plt.subplots(figsize=(10, height))
    _lineage_edges(ax, order, pos, known)
    _lineage_nodes(ax, order, pos)
    _lineage_legend(plt, ax)
    ax.set_yticks([])
    ax.xaxis.set_major_locator(_int_ticks())
    ax.set_xlabel("step")
    ax.set_title(f"{view.name}: lineage", fontsize=10)
    xmax = max(n.step for n in order)
    ax.set_xlim(-0.5, xmax + max(1.5, 0.25 * (xmax + 1)))
    ax.set_ylim(-len(order) + 0.4, 0.8)
    for spine in ("left", "right", "top"):
        ax.spines[spine].set_visible(False)
    fig.tight_layout()
    return _png(fig)


def _lineage_rows(view: RunView) -> tuple[dict[str, Candidate], list]:
    """The measured candidates by id, and every candidate and declined edit in row order: depth
    first under its parent, siblings by step (an unknown parent makes a root)."""
    cands = view.candidates
    known = {c.snapshot_id: c for c in cands}
    kids: dict[str | None, list] = {}
    for c in cands:
        kids.setdefault(c.parent_id if c.parent_id in known else None, []).append(c)
    for d in view.declined:
        kids.setdefault(d.parent_id if d.parent_id in known else None, []).append(d)
    order: list = []

    def walk(n) -> None:
        order.append(n)
        for k in sorted(kids.get(n.snapshot_id, []) if isinstance(n, Candidate) else [], key=lambda k: k.step):
            walk(k)

    for n in sorted(kids.get(None, []), key=lambda k: k.step):
        walk(n)
    return known, order


def _lineage_edges(ax, order: list, pos: dict, known: dict[str, Candidate]) -> None:
    """Parent edges (dotted grey to a declined edit) and a merge's donor arrow."""
    for n in order:
        x, y = pos[id(n)]
        parent = known.get(n.parent_id) if n.parent_id else None
        declined = not isinstance(n, Candidate)
        if parent is not None:
            px, py = pos[id(parent)]
            ax.plot(
                [px, px, x],
                [py, y, y],
                color=COLORS["declined"] if declined else "0.3",
                ls=":" if declined else "-",
                lw=1.0,
                zorder=1,
            )
        if not declined and n.donor_id in known:
            dx, dy = pos[id(known[n.donor_id])]
            ax.annotate(
                "",
                (x, y),
                (dx, dy),
                arrowprops={
                    "arrowstyle": "->",
                    "ls": "--",
                    "color": COLORS["donor"],
                    "connectionstyle": "arc3,rad=0.25",
                    "lw": 1.0,
                },
                zorder=2,
            )


def _lineage_nodes(ax, order: list, pos: dict) -> None:
    """Candidates coloured by status (a star on the promoted one), declined edits as crosses;
    labels only while there are at most 120 rows."""
    labels = len(order) <= 120
    for n in order:
        x, y = pos[id(n)]
        if not isinstance(n, Candidate):
            ax.scatter([x], [y], marker="x", s=30, color=COLORS["declined"], zorder=3)
            if labels:
                ax.annotate(
                    f"declined: {n.reason}"[:60],
                    (x, y),
                    textcoords="offset points",
                    xytext=(6, -3),
                    fontsize=7,
                    color="0.6",
                )
            continue
        ax.scatter(
            [x],
            [y],
            s=60,
            color=COLORS[n.status],
            edgecolors="black" if n.promoted else "none",
            linewidths=1.5,
            zorder=4,
        )
        if n.promoted:
            ax.scatter(
                [x], [y], marker="*", s=260, color=COLORS["promoted"], edgecolors="black", linewidths=0.5, zorder=5
            )
        if labels:
            score = "-" if n.score is None else f"{n.score:.3f}"
            ax.annotate(
                f"{short(n.snapshot_id)}  {score}", (x, y), textcoords="offset points", xytext=(7, -3), fontsize=7.5
            )


def _lineage_legend(plt, ax) -> None:
    handles = [
        plt.Line2D([], [], marker="o", ls="", color=COLORS[k], label=k) for k in ("seed", "admitted", "rejected")
    ]
    handles += [
        plt.Line2D([], [], marker="x", ls=":", color=COLORS["declined"], label="declined edit"),
        plt.Line2D([], [], ls="--", color=COLORS["donor"], label="merge donor"),
        plt.Line2D([], [], marker="*", ls="", ms=12, color=COLORS["promoted"], label="promoted"),
    ]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def heatmap(view: RunView) -> bytes | None:
    """Task x candidate: per-task avg@k on the search split from the stored rollouts."""
    cands = [c for c in view.candidates if c.snapshot_id in view.task_matrix]
    if not cands:
        return None
    tasks = sorted({t for c in cands for t in view.task_matrix[c.snapshot_id]})
    import numpy as np

    m = np.full((len(tasks), len(cands)), np.nan)
    for j, c in enumerate(cands):
        for i, t in enumerate(tasks):
            m[i, j] = view.task_matrix[c.snapshot_id].get(t, np.nan)
    plt = _plt()
    w = min(24.0, max(5.0, 0.42 * len(cands) + 3))
    h = min(30.0, max(2.5, 0.28 * len(tasks) + 1.8))
    fig, ax = plt.subplots(figsize=(w, h))
    lo, hi = float(np.nanmin(m)), float(np.nanmax(m))
    vmin, vmax = (0.0, 1.0) if 0.0 <= lo and hi <= 1.0 else (lo, hi)
    im = ax.imshow(m, aspect="auto", cmap="viridis", vmin=vmin, vmax=vmax, interpolation="nearest")
    fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02, label="avg@k")
    if len(cands) <= 60:
        ax.set_xticks(range(len(cands)))
        ax.set_xticklabels([f"{short(c.snapshot_id, 6)}\nstep {c.step}" for c in cands], fontsize=7, rotation=90)
        for tick, c in zip(ax.get_xticklabels(), cands):
            tick.set_color(COLORS["promoted"] if c.promoted else COLORS[c.status])
    if len(tasks) <= 60:
        ax.set_yticks(range(len(tasks)))
        ax.set_yticklabels(tasks, fontsize=7)
        if len(cands) * len(tasks) <= 200:
            for i in range(len(tasks)):
                for j in range(len(cands)):
                    if not np.isnan(m[i, j]):
                        ax.text(
                            j,
                            i,
                            f"{m[i, j]:.2f}",
                            ha="center",
                            va="center",
                            fontsize=7,
                            color="white" if m[i, j] < (vmin + vmax) / 2 else "black",
                        )
    ax.set_xlabel("candidate (first step; label colour = status)")
    ax.set_ylabel(f"{view.split} task")
    ax.set_title(f"{view.name}: per-task avg@k on {view.split}", fontsize=10)
    fig.tight_layout()
    return _png(fig)


def binpack(rows: list[dict]) -> bytes | None:
    """Excess bins % per test set: the evolved heuristic against first fit, best fit, FunSearch."""
    rows = [r for r in rows if "first_fit_pct" in r]
    if not rows:
        return None
    import numpy as np

    plt = _plt()
    series = [
        ("evolved", "excess_pct", "#2ca02c"),
        ("first fit", "first_fit_pct", "#9e9e9e"),
        ("best fit", "best_fit_pct", "#1f77b4"),
        ("FunSearch", "funsearch_pct", "#ff7f0e"),
    ]
    fig, ax = plt.subplots(figsize=(9, 4))
    x = np.arange(len(rows))
    w = 0.2
    for k, (label, key, color) in enumerate(series):
        vals = [r.get(key) for r in rows]
        bars = ax.bar(
            x + (k - 1.5) * w, [v if isinstance(v, (int, float)) else 0 for v in vals], w, label=label, color=color
        )
        ax.bar_label(bars, labels=[f"{v:.2f}" if isinstance(v, (int, float)) else "" for v in vals], fontsize=7)
        for xi, v in zip(x, vals):
            if not isinstance(v, (int, float)):
                ax.text(xi + (k - 1.5) * w, 0, "n/a", ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(x)
    ax.set_xticklabels([str(r.get("dataset")) for r in rows])
    ax.set_ylabel("excess bins % (lower is better)")
    ax.set_title("test sets: evolved heuristic vs first fit, best fit and FunSearch", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def meta_scatter(report: dict) -> bytes | None:
    """meta-evolve: gain over the seed rule on SOURCE vs TARGET, the c-family as a line and the
    evolved rule with its SEs (``meta_report.json``)."""
    try:
        src, tgt = report["families"]["source"], report["families"]["target"]
        sweep, ev = report.get("c_sweep") or [], report["validation"]
        ex, ey = ev[src]["gain"], ev[tgt]["gain"]
    except (KeyError, TypeError):
        return None
    fin = lambda v: 0.0 if not isinstance(v, (int, float)) or not math.isfinite(v) else v  # noqa: E731
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    ax.axhline(0, color="0.8", lw=0.8)
    ax.axvline(0, color="0.8", lw=0.8)
    if sweep:
        ax.plot(
            [s["source_gain"] for s in sweep],
            [s["target_gain"] for s in sweep],
            "o-",
            color="#1f77b4",
            label="flat PUCT, c swept",
        )
        for s in sweep:
            ax.annotate(
                s["rule"], (s["source_gain"], s["target_gain"]), textcoords="offset points", xytext=(4, 4), fontsize=8
            )
    ax.errorbar(
        [ex],
        [ey],
        xerr=[fin(ev[src].get("se"))],
        yerr=[fin(ev[tgt].get("se"))],
        fmt="*",
        ms=13,
        color="#d62728",
        label="evolved rule (± SE)",
    )
    ax.plot([0], [0], "s", color="0.3", label="seed rule")
    verdict = (report.get("placement") or {}).get("verdict")
    ax.set_xlabel(f"gain over the seed rule on {src} (SOURCE)")
    ax.set_ylabel(f"gain over the seed rule on {tgt} (TARGET)")
    ax.set_title(
        "SOURCE vs TARGET gain on validation instances" + (f" — {verdict} the front" if verdict else ""), fontsize=10
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def cost(c: dict) -> bytes | None:
    """Where the time went: rollouts (summed) vs model calls vs the driver (the rest)."""
    parts = [("rollouts (summed)", c["rollout_s"], "#1f77b4")]
    if c["model_s"] is not None:
        parts.append(("model calls", c["model_s"], "#ff7f0e"))
        driver = "driver (elapsed − rest)"
    else:
        driver = "driver + model calls (elapsed − rollouts)"
    if c["driver_s"] is not None:
        parts.append((driver, c["driver_s"], "#7f7f7f"))
    if not any(v for _, v, _ in parts):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 2.6))
    ax.barh([p[0] for p in parts], [p[1] for p in parts], color=[p[2] for p in parts])
    for i, (_, v, _) in enumerate(parts):
        ax.text(v, i, f" {v:.1f} s", va="center", fontsize=8)
    if c["elapsed_s"] is not None:
        ax.axvline(c["elapsed_s"], color="black", ls="--", lw=1)
        ax.text(c["elapsed_s"], len(parts) - 0.5, f" elapsed {c['elapsed_s']:.1f} s", fontsize=8, va="bottom")
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title("time breakdown", fontsize=10)
    ax.margins(x=0.2)
    fig.tight_layout()
    return _png(fig)
