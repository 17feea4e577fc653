"""Three-way merge of directory trees: the offline mutator's recombination step.

Recombination hands the worker the main version (the checkout) with the common ancestor and
the donor materialised beside it. Per file: whatever side left the ancestor's version alone
takes the other side's; when both changed a text file, donor hunks are taken where main did not
touch those lines, and main wins every conflict — the candidate stays main plus what the donor
adds, which is what the recombination gate measures against.
"""

from __future__ import annotations

import os
import stat
from difflib import SequenceMatcher
from pathlib import Path

from rsi.snapshot import RUNTIME_DIRS, is_runtime_artifact

Version = tuple[bytes, bool] | None  # (content, executable) or absent


def _tree(root: Path, skip: set[str]) -> dict[str, Version]:
    out: dict[str, Version] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [
            d for d in dirnames if d not in RUNTIME_DIRS and os.path.normpath(os.path.join(rel_dir, d)) not in skip
        ]
        for name in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name)).replace(os.sep, "/")
            full = Path(dirpath) / name
            if rel in skip or is_runtime_artifact(rel) or not full.is_file():
                continue
            out[rel] = (full.read_bytes(), bool(full.stat().st_mode & stat.S_IXUSR))
    return out


def _inside(path: Path, root: Path) -> str | None:
    """``path`` relative to ``root`` when it lies inside it (reference folders in the checkout)."""
    path, root = path.resolve(), root.resolve()
    return os.path.relpath(path, root).replace(os.sep, "/") if path.is_relative_to(root) else None


def _hunks(base: list[bytes], other: list[bytes]) -> list[tuple[int, int, list[bytes]]]:
    matcher = SequenceMatcher(None, base, other, autojunk=False)
    return [(i1, i2, other[j1:j2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def merge_lines(base: list[bytes], main: list[bytes], donor: list[bytes]) -> list[bytes]:
    """diff3 over lines: hunks that overlap or touch form one region; a region changed only by
    the donor takes the donor's lines, any other region keeps main's."""
    hunks = sorted(
        [(*h, 0) for h in _hunks(base, main)] + [(*h, 1) for h in _hunks(base, donor)], key=lambda h: (h[0], h[1], h[3])
    )
    out, pos, i = [], 0, 0
    while i < len(hunks):
        lo, hi, j = hunks[i][0], hunks[i][1], i + 1
        while j < len(hunks) and hunks[j][0] <= hi:
            hi = max(hi, hunks[j][1])
            j += 1
        region = hunks[i:j]
        side = 1 if all(h[3] == 1 for h in region) else 0
        out += base[pos:lo]
        cursor = lo
        for h_lo, h_hi, lines, who in region:
            if who == side:
                out += base[cursor:h_lo] + lines
                cursor = h_hi
        out += base[cursor:hi]
        pos, i = hi, j
    return out + base[pos:]


def merge_file(ancestor: Version, main: Version, donor: Version) -> Version:
    if main == ancestor:
        return donor
    if donor == ancestor or donor == main or main is None or donor is None:
        return main
    executable = donor[1] if ancestor is not None and main[1] == ancestor[1] else main[1]
    base = ancestor[0] if ancestor is not None else b""
    if any(b"\0" in data for data in (base, main[0], donor[0])):
        return main  # binary: no line structure to merge
    lines = merge_lines(
        base.splitlines(keepends=True), main[0].splitlines(keepends=True), donor[0].splitlines(keepends=True)
    )
    return b"".join(lines), executable


def _write(root: Path, rel: str, version: Version) -> None:
    path = root / rel
    if version is None:
        path.unlink(missing_ok=True)
        parent = path.parent
        while parent != root and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(version[0])
    path.chmod(0o755 if version[1] else 0o644)


def merge(ancestor: Path, main: Path, donor: Path) -> list[str]:
    """Merge the donor's changes since ``ancestor`` into ``main`` in place; the paths changed
    in main, sorted. Reference folders lying inside main are not part of the merge."""
    ancestor, main, donor = Path(ancestor), Path(main), Path(donor)
    skip = {rel for rel in (_inside(ancestor, main), _inside(donor, main)) if rel}
    trees = [_tree(root, skip) for root in (ancestor, main, donor)]
    changed = []
    for rel in sorted(set().union(*trees)):
        a, m, d = (t.get(rel) for t in trees)
        merged = merge_file(a, m, d)
        if merged != m:
            _write(main, rel, merged)
            changed.append(rel)
    return changed
