"""``rsi ls`` and ``rsi compare``: many runs at a glance, from their directories alone.

Both print plain aligned text (the same bytes whatever the terminal) so a listing can be
grepped, diffed and tested; ``--json`` gives the rows as data.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pyarrow.fs as pafs

from rsi.errors import ConfigError
from rsi.records import open_fs
from rsi.reporting.data import RunView, short

LS_COLUMNS = ("name", "algorithm", "status", "steps", "best", "test", "started")


def cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if not math.isfinite(v) else f"{v:.4f}"
    return str(v)


def aligned(rows: list[list[str]]) -> str:
    """Columns left-aligned to their widest cell, two spaces apart, no trailing blanks."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in rows)


def started_text(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def run_dirs(storage: str) -> list[str]:
    """The run directories directly under ``storage`` (local path or pyarrow.fs URI): folders
    holding a ``config.yaml``."""
    fs, root = open_fs(storage)
    info = fs.get_file_info(root)
    if info.type != pafs.FileType.Directory:
        raise ConfigError(f"{storage}: no such directory (give the runs' storage, e.g. `rsi ls runs`)")
    out = []
    for entry in fs.get_file_info(pafs.FileSelector(root)):
        if (
            entry.type == pafs.FileType.Directory
            and fs.get_file_info(f"{entry.path}/config.yaml").type == pafs.FileType.File
        ):
            base = storage.rstrip("/") if "://" in storage else str(Path(root))
            out.append(f"{base}/{entry.base_name}")
    return out


def ls_row(view: RunView, now: float | None = None, active_s: float = 600.0) -> dict:
    best = view.best
    return {
        "name": view.name,
        "algorithm": view.algorithm,
        "status": view.status(now, active_s),
        "steps": view.steps,
        "best": None if best is None else best.score,
        "test": ((view.summary or {}).get("means") or {}).get("test"),
        "started": started_text(view.started),
        "split": view.split,
        "run_dir": view.uri,
    }


def list_runs(storage: str = "runs", now: float | None = None, active_s: float = 600.0) -> list[dict]:
    """One row per run, oldest first."""
    views = [RunView(d) for d in run_dirs(storage)]
    views.sort(key=lambda v: (v.started or 0.0, v.name))
    return [ls_row(v, now, active_s) for v in views]


def format_ls(rows: list[dict]) -> str:
    if not rows:
        return "(no runs)\n"
    header = ["name", "algorithm", "status", "steps", "best", "test", "started"]
    return aligned([header] + [[cell(r[c]) for c in LS_COLUMNS] for r in rows])


# ---- compare ----------------------------------------------------------------------------------
def compare_rows(views: list[RunView]) -> list[tuple[str, list]]:
    """(label, one value per run): the summary's means, then every numeric column of each
    ``test_report`` row (keyed by its dataset), in first-seen order."""
    lines: dict[str, list] = {}

    def put(label: str, i: int, value) -> None:
        lines.setdefault(label, [None] * len(views))[i] = value

    for i, v in enumerate(views):
        put("algorithm", i, v.algorithm)
        put("status", i, v.status())
        put("steps", i, v.steps)
        put("promoted", i, short(v.promoted_id, 16) if v.promoted_id else None)
        put(f"best {v.split} mean (measured)", i, v.best.score if v.best else None)
    for i, v in enumerate(views):
        for split, mean in ((v.summary or {}).get("means") or {}).items():
            put(f"{split} mean (promoted)", i, mean)
    for i, v in enumerate(views):
        for row in (v.summary or {}).get("test_report") or []:
            key = next((str(x) for x in row.values() if isinstance(x, str)), "test")  # dataset, family, ...
            for col, val in row.items():
                if col != "dataset" and (val is None or isinstance(val, (int, float))) and not isinstance(val, bool):
                    put(f"test: {col}" if key == "test" else f"test {key}: {col}", i, val)
    return list(lines.items())


def run_labels(views: list[RunView]) -> list[str]:
    names = [v.name for v in views]
    return names if len(set(names)) == len(names) else [v.uri for v in views]


def format_compare(views: list[RunView]) -> str:
    header = [""] + run_labels(views)
    return aligned([header] + [[label] + [cell(x) for x in vals] for label, vals in compare_rows(views)])


def curve(view: RunView) -> tuple[list[int], list[float]]:
    """The best admitted search-split mean so far, at each step where it was measured."""
    xs, ys, best = [], [], -math.inf
    scored = ((c.step, c.score) for c in view.candidates if c.admitted and c.score is not None)
    for step, score in sorted(scored, key=lambda p: p[0]):
        best = max(best, score)
        xs.append(step)
        ys.append(best)
    if xs and view.steps > xs[-1]:
        xs.append(view.steps)
        ys.append(ys[-1])
    return xs, ys


def compare_plot(views: list[RunView], path: str | Path) -> str:
    from rsi.reporting.figures import _plt, _png

    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for label, v in zip(run_labels(views), views):
        color = ax._get_lines.get_next_color()
        pts = [c for c in v.candidates if c.score is not None]
        ax.scatter([c.step for c in pts], [c.score for c in pts], s=14, color=color, alpha=0.35)
        xs, ys = curve(v)
        if xs:
            ax.step(xs, ys, where="post", color=color, lw=2, label=f"{label} ({v.split})")
    from rsi.reporting.figures import _int_ticks

    ax.xaxis.set_major_locator(_int_ticks())
    ax.set_xlabel("step")
    ax.set_ylabel("mean score (avg@k per task, then mean)")
    ax.set_title("best admitted candidate so far (line) and every measured candidate (dots)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_png(fig))
    return str(path)


def compare(run_dirs_: list[str], plot: str | Path | None = "compare.png") -> tuple[str, str | None]:
    views = [RunView(d) for d in run_dirs_]
    return format_compare(views), (compare_plot(views, plot) if plot else None)


def ls_json(rows: list[dict]) -> str:
    return json.dumps(rows, indent=2)
