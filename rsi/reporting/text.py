"""Plain-text views of a run: the lineage tree and a candidate's diff (``rsi show``)."""

from __future__ import annotations

import difflib

from rsi.errors import ConfigError
from rsi.reporting.data import Declined, RunView


def snapshot_diff(view: RunView, snapshot_id: str, parent_id: str | None = None) -> str:
    """The unified diff of a snapshot's files against its parent's (``parent_id``, else the
    manifest's), file by file in path order; a binary file is named, not shown."""
    snap = view.records.get_snapshot(snapshot_id)
    parent_id = parent_id or snap.parent_id
    if not parent_id:
        raise ConfigError(f"{view.uri}: snapshot {snapshot_id} has no parent (it is the seed)")
    parent = view.records.get_snapshot(parent_id)
    out: list[str] = []
    for path in sorted(set(snap.files) | set(parent.files)):
        old = parent.read(path) if path in parent.files else None
        new = snap.read(path) if path in snap.files else None
        if old == new:
            continue
        a = f"{parent_id}/{path}" if old is not None else "/dev/null"
        b = f"{snapshot_id}/{path}" if new is not None else "/dev/null"
        try:
            old_lines = (old or b"").decode().splitlines(keepends=True)
            new_lines = (new or b"").decode().splitlines(keepends=True)
        except UnicodeDecodeError:
            out += [f"--- {a}\n", f"+++ {b}\n", f"Binary file {path} differs\n"]
            continue
        for line in difflib.unified_diff(old_lines, new_lines, a, b):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def lineage_text(view: RunView) -> str:
    """The lineage as a text tree: each candidate under its parent, children and declined
    edits in step order; ``(donor X)`` marks a merge, ``x`` an edit that was declined."""
    cands = view.candidates
    known = {c.snapshot_id for c in cands}
    children: dict[str | None, list] = {}
    for c in cands:
        parent = c.parent_id if c.parent_id in known else None
        children.setdefault(parent, []).append(c)
    for d in view.declined:
        children.setdefault(d.parent_id if d.parent_id in known else None, []).append(d)
    for items in children.values():
        items.sort(key=lambda n: n.step)  # stable: decision order within a step

    def line(n) -> str:
        if isinstance(n, Declined):
            what = f" {n.snapshot_id}" if n.snapshot_id else ""
            return f"x {n.kind}{what}  step {n.step}  {n.reason}"
        score = "-" if n.score is None else f"{n.score:.4f}"
        verdict = n.status if n.status in ("seed", "admitted") or not n.reason else f"{n.status}: {n.reason}"
        merge = f"  merge (donor {n.donor_id})" if n.donor_id else ""
        mark = "  [promoted]" if n.promoted else ""
        return f"{n.snapshot_id}  step {n.step}  {view.split} {score}  {verdict}{merge}{mark}"

    out: list[str] = []

    def walk(n, prefix: str, last: bool, root: bool) -> None:
        out.append((prefix + ("└── " if last else "├── ") if not root else "") + line(n))
        if isinstance(n, Declined):
            return
        kids = children.get(n.snapshot_id, [])
        inner = prefix + ("    " if last else "│   ") if not root else ""
        for i, k in enumerate(kids):
            walk(k, inner, i == len(kids) - 1, False)

    for n in children.get(None, []):
        walk(n, "", True, True)
    if not out:
        out.append("(no decisions yet)")
    return "\n".join(out) + "\n"
