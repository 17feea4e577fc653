"""Human-facing tables: the end of ``rsi run``, ``rsi eval`` and ``rsi show``."""

from __future__ import annotations

from rich.table import Table

from rsi.progress import console


def _fmt(v, column: str = "") -> str:
    if isinstance(v, float) and column.endswith("_pct"):
        return f"{v:.2f}"
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 10 else f"{v:.2f}"
    return "-" if v is None else str(v)


def rows_table(rows: list[dict], title: str = "") -> Table:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    t = Table(title=title or None)
    for c in cols:
        t.add_column(c, no_wrap=True)
    for r in rows:
        t.add_row(*[_fmt(r.get(c), c) for c in cols])
    return t


def print_summary(summary: dict) -> None:
    console.print(f"run directory: {summary['run_dir']}", markup=False)
    console.print(f"promoted snapshot: {summary['snapshot_id']}", markup=False)
    means = [{"split": s, "mean_score": m} for s, m in summary["means"].items()]
    for row in means:
        row.update(summary.get("metrics", {}).get(row["split"], {}))
    if means:
        console.print(rows_table(means, "mean scores of the promoted snapshot (primary, then named metrics)"))
    if summary.get("test_report"):
        console.print(rows_table(summary["test_report"], "test"))
    for table in (summary.get("algorithm_report") or {}).get("tables", []):
        if table.get("rows"):
            console.print(rows_table(table["rows"], table.get("title", "")))
        if table.get("note"):
            console.print(table["note"], markup=False)


def show_run(run_dir: str) -> None:
    from rsi.records import RunRecords

    records = RunRecords.open(run_dir)
    if records.exists("summary.json"):
        print_summary(records.read_json("summary.json"))
    else:
        console.print("no summary.json yet: the run has not finished (`rsi resume` continues it)", markup=False)
    keep = ("step", "kind", "snapshot_id", "parent_id", "accepted", "reason")
    rows = [{k: d.get(k) for k in keep} for d in records.decisions()]
    console.print(rows_table(rows, f"decisions ({len(rows)})"))
