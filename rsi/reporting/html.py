"""``rsi report``: one self-contained HTML file for a run, and each figure as a PNG beside it.

Self-contained: figures are ``data:`` URIs, the CSS is inline, there is no script, and a
Content-Security-Policy (``default-src 'none'``) makes a browser refuse any other resource;
the page opens from a mail attachment or an artifact store as it does from disk.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

from rsi.reporting import figures
from rsi.reporting.data import RunView, short
from rsi.reporting.text import snapshot_diff

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;color:#1b1b1b;
background:#fafafa}
main{max-width:1200px;margin:0 auto;padding:1.2rem 2rem 3rem}
h1{font-size:1.45rem;margin:.2rem 0 .4rem}h2{font-size:1.15rem;margin:2rem 0 .6rem;border-bottom:1px solid #ddd;
padding-bottom:.25rem}h3{font-size:.95rem;margin:1.2rem 0 .4rem}
nav{font-size:.85rem;margin:.4rem 0 1rem}nav a{margin-right:.9rem;color:#1f5fa8;text-decoration:none}
table{border-collapse:collapse;font-size:.8rem;margin:.4rem 0 1rem;background:#fff}
th,td{border:1px solid #ddd;padding:.22rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f0f0;position:sticky;top:0}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.admitted td{background:#eefaf0}tr.rejected td{background:#fff5f5}tr.declined td{color:#888}
.badge{display:inline-block;border-radius:.6rem;padding:.05rem .55rem;font-size:.78rem;font-weight:600}
.finished{background:#d9f2de}.running{background:#dbe9fb}.resumable{background:#fff1c9}.failed{background:#fbdada}
.note{color:#555;font-size:.82rem;margin:.2rem 0 .8rem}.kv td:first-child{font-weight:600;background:#f7f7f7}
img{max-width:100%;height:auto;border:1px solid #e4e4e4;background:#fff}
pre{background:#fff;border:1px solid #e4e4e4;padding:.6rem;overflow-x:auto;font-size:.78rem;line-height:1.3}
.diff .gd{color:#a40000;background:#ffecec}.diff .gi{color:#006400;background:#eaffea}
.diff .gu{color:#6f42c1}.diff .gh{color:#555;font-weight:600}
code{font-size:.85em}
"""
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

E = html.escape


def fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.4f}" if abs(v) < 10 else f"{v:.2f}"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x) for x in v)
    return str(v)


def table(rows: list[dict], cols: list[str] | None = None, row_class=None) -> str:
    if not rows:
        return '<p class="note">(none)</p>'
    cols = cols or list(dict.fromkeys(k for r in rows for k in r))
    out = ["<table><thead><tr>", *(f"<th>{E(c)}</th>" for c in cols), "</tr></thead><tbody>"]
    for r in rows:
        cls = f' class="{E(row_class(r))}"' if row_class else ""
        out.append(f"<tr{cls}>")
        for c in cols:
            v = r.get(c)
            num = isinstance(v, (int, float)) and not isinstance(v, bool)
            out.append(f'<td class="n">{E(fmt(v))}</td>' if num else f"<td>{E(fmt(v))}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def kv(pairs: list[tuple[str, object]]) -> str:
    return (
        '<table class="kv"><tbody>'
        + "".join(f"<tr><td>{E(k)}</td><td>{E(fmt(v))}</td></tr>" for k, v in pairs)
        + "</tbody></table>"
    )


def image(png: bytes, alt: str) -> str:
    return f'<img alt="{E(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def highlight_diff(text: str) -> str:
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import DiffLexer
    except ImportError:
        return f'<pre class="diff">{E(text)}</pre>'
    return highlight(text, DiffLexer(), HtmlFormatter(cssclass="diff", nobackground=True))


def diff_css() -> str:
    try:
        from pygments.formatters import HtmlFormatter
    except ImportError:
        return ""
    return HtmlFormatter(style="default", nobackground=True).get_style_defs(".diff")


def gate_rows(view: RunView) -> list[dict]:
    """The decision log as a table: the gate's figures (gain, SE or sign-test p, z, regression
    mass) beside each verdict and its reason."""
    rows = []
    for d in view.decisions:
        unc = d.get("uncertainty")
        unc = unc if isinstance(unc, dict) else {}
        rows.append(
            {
                "step": d.get("step"),
                "kind": d.get("kind"),
                **{
                    col: short(d.get(f"{col}_id")) if d.get(f"{col}_id") else None
                    for col in ("snapshot", "parent", "donor")
                },
                "accepted": d.get("accepted"),
                "gain": d.get("gain"),
                "se": d.get("se"),
                "z": d.get("z"),
                "sign p": unc.get("sign_test_p", d.get("sign_test_p")),
                "regression": d.get("regression_mass"),
                "reason": d.get("reason"),
            }
        )
    used = [c for c in rows[0] if any(r.get(c) is not None for r in rows)] if rows else []
    return [{c: r.get(c) for c in used} for r in rows]


def _row_class(r: dict) -> str:
    if r.get("kind") in ("decline", "invalid"):
        return "declined"
    classes: dict[object, str] = {True: "admitted", False: "rejected"}
    return classes.get(r.get("accepted"), "")


MAX_DIFF_CHARS = 200_000


def build_report(run_dir: str, out: str | Path = "report.html") -> dict:
    """Write the report and its PNGs; returns ``{"html": path, "figures": {name: path}, "notes": [...]}``."""
    view = RunView(run_dir)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    status = view.status()
    notes: list[str] = []
    pngs: dict[str, bytes] = {}
    sections: list[tuple[str, str, str]] = []  # (anchor, title, body)

    def figure(name: str, fn, *args) -> str:
        try:
            png = fn(*args)
        except Exception as exc:  # noqa: BLE001 - one bad figure never loses the rest of the report
            notes.append(f"figure {name} could not be drawn: {type(exc).__name__}: {exc}")
            return f'<p class="note">figure not drawn: {E(type(exc).__name__)}: {E(str(exc))}</p>'
        if png is None:
            return '<p class="note">nothing to draw yet.</p>'
        pngs[name] = png
        return image(png, name) + f'<p class="note">also written as <code>{E(out.stem)}-{E(name)}.png</code></p>'

    sections.append(("overview", "Overview", _overview(view, status)))
    sections += _figure_sections(view, figure)
    sections.append(_decisions_section(view))
    sections.append(
        (
            "diffs",
            "Admitted candidates: diff against the parent",
            _diffs(view) or '<p class="note">no candidate admitted besides the seed.</p>',
        )
    )
    _add_result_sections(view, figure, sections)
    sections.append(_cost_section(view, figure))
    if notes:
        sections.append(("notes", "Notes", "<ul>" + "".join(f"<li>{E(n)}</li>" for n in notes) + "</ul>"))
    written = _write(view, status, sections, pngs, out)
    return {"html": str(out), "figures": written, "notes": notes, "status": status}


def _overview(view: RunView, status: str) -> str:
    """The run at a glance: what ran, how far, the best and promoted versions, provenance."""
    s = view.summary or {}
    cfg = view.config
    best = view.best
    target = cfg.get("target") or {}
    prov = view.meta.get("provenance") or {}
    overview = kv(
        [
            ("run directory", view.uri),
            ("status", status),
            ("algorithm", view.algorithm),
            ("benchmark", view.benchmark),
            ("target", target.get("path")),
            ("seed (config)", cfg.get("seed")),
            ("steps", view.steps),
            ("decisions", len(view.decisions)),
            ("measured candidates", len(view.candidates)),
            ("declined edits", len(view.declined)),
            ("promoted snapshot", view.promoted_id),
            (
                f"best {view.split} mean",
                None if best is None else f"{best.score:.4f} ({best.snapshot_id}, step {best.step})",
            ),
            ("rollouts stored", view.rollouts.num_rows),
            ("git commit", prov.get("git_commit")),
            ("versions", ", ".join(f"{k} {v}" for k, v in (prov.get("versions") or {}).items())),
        ]
    )
    if not view.summary:
        overview += (
            '<p class="note">No summary.json: the run has not finished (running, killed or stopped); '
            "this report shows what its records hold so far.</p>"
        )
    if s.get("means"):
        rows = [{"split": k, "mean score": v, **(s.get("metrics", {}).get(k) or {})} for k, v in s["means"].items()]
        overview += "<h3>Promoted snapshot: mean scores</h3>" + table(rows)
    return overview


def _figure_sections(view: RunView, figure) -> list[tuple[str, str, str]]:
    """Score over steps, lineage and the tasks x candidates heatmap."""
    sections: list[tuple[str, str, str]] = []
    sections.append(
        (
            "score",
            "Score over steps",
            figure("score", figures.score_over_steps, view)
            + f'<p class="note">Each point: a measured candidate at the step it was first decided; its '
            f"{E(view.split)} mean is the mean over tasks of per-task avg@k over every stored repetition. "
            "Filled: admitted; open: rejected; star: promoted.</p>",
        )
    )
    sections.append(
        (
            "lineage",
            "Lineage",
            figure("lineage", figures.lineage, view)
            + '<p class="note">Solid: parent → child; dashed: the donor of a merge; grey ×: an edit that '
            "was declined before any measurement (reason beside it).</p>",
        )
    )
    sections.append(("heatmap", "Tasks × candidates", figure("heatmap", figures.heatmap, view)))

    return sections


def _decisions_section(view: RunView) -> tuple[str, str, str]:
    return (
        "decisions",
        f"Decisions ({len(view.decisions)})",
        table(gate_rows(view), row_class=_row_class)
        + "<p class=\"note\">gain / regression: the gate's figures on the candidate's measurement; "
        "se and z: a paired z-test's standard error; sign p: the paired sign test.</p>",
    )


def _diffs(view: RunView) -> str:
    """Each admitted candidate's diff against its parent (empty: none admitted besides the seed)."""
    diffs = []
    for c in view.candidates:
        if c.kind == "seed" or not c.admitted or not c.parent_id:
            continue
        head = (
            f"<h3>{E(c.snapshot_id)} ← {E(c.parent_id)}"
            + (f" (merge, donor {E(c.donor_id)})" if c.donor_id else "")
            + f" · step {c.step}{' · promoted' if c.promoted else ''}</h3>"
            + f'<p class="note">{E(c.reason)}</p>'
        )
        try:
            text = snapshot_diff(view, c.snapshot_id, c.parent_id)
        except Exception as exc:  # noqa: BLE001 - a snapshot not yet written (a running run)
            diffs.append(head + f'<p class="note">diff unavailable: {E(str(exc))}</p>')
            continue
        if len(text) > MAX_DIFF_CHARS:
            text = text[:MAX_DIFF_CHARS] + f"\n[... diff cut at {MAX_DIFF_CHARS} characters ...]\n"
        diffs.append(head + (highlight_diff(text) if text else '<p class="note">(no file changed)</p>'))
    return "".join(diffs)


def _add_result_sections(view: RunView, figure, sections: list[tuple[str, str, str]]) -> None:
    """The test measurement, the algorithm's own tables and meta-evolve's transfer figure, when
    the run has them (an algorithm table's anchor numbers it by its place among ``sections``)."""
    s = view.summary or {}
    report_rows = s.get("test_report") or []
    if report_rows:
        body = table(report_rows)
        if any("first_fit_pct" in r for r in report_rows):
            body = (
                figure("binpack", figures.binpack, report_rows)
                + body
                + (
                    '<p class="note">Excess bins % per test set (lower is better): the promoted heuristic, first fit '
                    "and best fit packed on the same instances, FunSearch's published figure.</p>"
                )
            )
        sections.append(("test", "Test", body))
    for t in (s.get("algorithm_report") or {}).get("tables", []):
        sections.append(
            (
                f"algo{len(sections)}",
                t.get("title") or "algorithm report",
                table(t.get("rows") or []) + (f'<p class="note">{E(t["note"])}</p>' if t.get("note") else ""),
            )
        )
    if view.meta_report:
        mr = view.meta_report
        place = mr.get("placement") or {}
        ratio = mr.get("transfer_ratio")
        sweep = [dict(s) for s in mr.get("c_sweep") or []]
        sections.append(
            (
                "meta",
                "meta-evolve: SOURCE vs TARGET",
                figure("meta", figures.meta_scatter, mr)
                + kv(
                    [
                        ("transfer ratio", ratio),
                        ("placement", place.get("verdict")),
                        ("Pareto front", place.get("front")),
                        ("dominated by", place.get("dominated_by")),
                        ("evolved snapshot", (mr.get("evolved") or {}).get("snapshot_id")),
                    ]
                )
                + "<h3>c-family sweep</h3>"
                + table(sweep),
            )
        )


def _cost_section(view: RunView, figure) -> tuple[str, str, str]:
    cost = view.cost()
    return (
        "cost",
        "Cost and time",
        figure("cost", figures.cost, cost)
        + kv(
            [
                ("elapsed (s)", cost["elapsed_s"]),
                ("elapsed read from", cost["elapsed_from"]),
                ("rollouts: summed duration (s)", cost["rollout_s"]),
                ("rollouts stored", cost["rollouts_stored"]),
                ("rollouts executed / cache hits", f"{fmt(cost['rollouts_executed'])} / {fmt(cost['cache_hits'])}"),
                ("rollouts: cost (USD)", cost["rollout_cost_usd"]),
                ("rollouts: tokens in / out", f"{cost['rollout_tokens_in']} / {cost['rollout_tokens_out']}"),
                ("model calls", cost["model_calls"]),
                ("model tokens in / out", f"{fmt(cost['model_tokens_in'])} / {fmt(cost['model_tokens_out'])}"),
                ("model cost (USD)", cost["model_cost_usd"]),
                ("model call time (s)", cost["model_s"] if cost["model_s"] is not None else "not recorded"),
                ("driver (s)", cost["driver_s"]),
            ]
        )
        + '<p class="note">Rollouts run in parallel: their summed duration adds up the time of many Ray worker '
        "processes and can exceed the elapsed wall clock, in which case the driver share shows 0. Model-call "
        "time is not recorded by the workers, so it is counted in the driver's share.</p>",
    )


def _write(view: RunView, status: str, sections: list[tuple[str, str, str]], pngs: dict[str, bytes], out: Path) -> dict:
    """Write the PNGs beside the page and the page itself; returns ``{figure name: png path}``."""
    written = {}
    for name, png in pngs.items():
        path = out.with_name(f"{out.stem}-{name}.png")
        path.write_bytes(png)
        written[name] = str(path)
    nav = "".join(f'<a href="#{a}">{E(t)}</a>' for a, t, _ in sections)
    body = "".join(f'<section id="{a}"><h2>{E(t)}</h2>{b}</section>' for a, t, b in sections)
    page = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>rsi report: {E(view.name)}</title><style>{CSS}{diff_css()}</style></head>"
        f'<body><main><h1>{E(view.name)} <span class="badge {E(status)}">{E(status)}</span></h1>'
        f"<nav>{nav}</nav>{body}</main></body></html>\n"
    )
    out.write_text(page, encoding="utf-8")
    return written
