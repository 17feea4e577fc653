"""Snapshot: an immutable, content-addressed version of a target directory.

File contents travel inside the snapshot (targets are small: a heuristic, a harness), so a
snapshot pickles through Ray's object store to any node and materialises there without a
shared filesystem. The run's content store (``blobs/``) keeps them for export and resume.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rsi.components import COMPONENTS_FILE, Components
from rsi.errors import ConfigError, Rejected

RUNTIME_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
RUNTIME_SUFFIXES = (".pyc", ".pyo")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_digest(value: object) -> bool:
    """A blob name as ``sha256`` writes it (so a blob path never leaves ``blobs/``)."""
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


@dataclass(frozen=True)
class FileEntry:
    digest: str
    component: str
    executable: bool


def unsafe_path(rel: object) -> str | None:
    """Why ``rel`` cannot name a file inside a snapshot, or None. A snapshot path is relative,
    ``/``-separated, without empty, ``.`` or ``..`` parts and without NUL: joined to any
    destination it stays inside it (a hand-made or corrupted manifest must not write elsewhere)."""
    if not isinstance(rel, str) or not rel:
        return "not a non-empty string"
    if "\0" in rel:
        return "contains a NUL byte"
    if rel.startswith("/"):
        return "is absolute"
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return "has an empty, '.' or '..' part"
    return None


def check_paths(paths: Iterable[str], where: str) -> None:
    """ConfigError naming the first unsafe path, or a file that is also another file's folder."""
    paths = list(paths)
    for rel in paths:
        why = unsafe_path(rel)
        if why:
            raise ConfigError(f"{where}: unsafe path {rel!r}: {why}")
    folders = {rel.rsplit("/", 1)[0] for rel in paths if "/" in rel}
    folders |= {f.rsplit("/", i)[0] for f in list(folders) for i in range(1, f.count("/") + 1)}
    clash = sorted(folders & set(paths))
    if clash:
        raise ConfigError(f"{where}: {clash[0]!r} is both a file and a folder")


def is_runtime_artifact(rel: str) -> bool:
    parts = rel.split("/")
    return any(p in RUNTIME_DIRS for p in parts) or rel.endswith(RUNTIME_SUFFIXES)


def runtime_artifacts(paths: Iterable[str]) -> list[str]:
    """What ``discard_runtime_files`` would remove from a tree with these file paths: each
    outermost cache directory once, and stray ``*.pyc`` files."""
    found = set()
    for rel in paths:
        parts = rel.split("/")
        cut = next((i for i, part in enumerate(parts[:-1]) if part in RUNTIME_DIRS), None)
        if cut is not None:
            found.add("/".join(parts[: cut + 1]))
        elif rel.endswith(RUNTIME_SUFFIXES):
            found.add(rel)
    return sorted(found)


def discard_runtime_files(root: Path) -> list[str]:
    """Delete caches a run leaves behind (``__pycache__``, ``*.pyc``) so they never get committed."""
    removed = []
    for dirpath, dirnames, filenames in os.walk(root):
        for d in list(dirnames):
            if d in RUNTIME_DIRS:
                shutil.rmtree(Path(dirpath) / d, ignore_errors=True)
                removed.append(os.path.relpath(Path(dirpath) / d, root))
                dirnames.remove(d)
        for f in filenames:
            if f.endswith(RUNTIME_SUFFIXES):
                (Path(dirpath) / f).unlink(missing_ok=True)
                removed.append(os.path.relpath(Path(dirpath) / f, root))
    return sorted(removed)


def scan_tree(root: Path, skip: Iterable[str] = ()) -> dict[str, tuple[bytes, bool]]:
    """Read a tree: rel path -> (bytes, executable). Symlinks must stay inside the tree."""
    root = root.resolve()
    skip = set(skip)
    out: dict[str, tuple[bytes, bool]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames if os.path.normpath(os.path.join(rel_dir, d)) not in skip)
        for name in list(dirnames) + sorted(filenames):
            full = Path(dirpath) / name
            rel = os.path.normpath(os.path.join(rel_dir, name)).replace(os.sep, "/")
            if rel in skip:
                continue
            if full.is_symlink():
                target = full.resolve()
                if not target.is_relative_to(root):
                    raise Rejected("symlink_escape", f"{rel} points outside the tree ({os.readlink(full)})")
                if target.is_dir():
                    raise Rejected("symlink_escape", f"{rel} is a symlink to a directory; commit real files")
                out[rel] = (target.read_bytes(), os.access(target, os.X_OK))
            elif name in filenames and full.is_file():
                mode = full.stat().st_mode
                out[rel] = (full.read_bytes(), bool(mode & stat.S_IXUSR))
    return out


@dataclass(frozen=True)
class Snapshot:
    files: Mapping[str, FileEntry]
    blobs: Mapping[str, bytes] = field(repr=False)
    components: Components = field(repr=False)
    parent_id: str | None = None
    snapshot_id: str = ""

    def __post_init__(self):
        if not self.snapshot_id:
            object.__setattr__(self, "snapshot_id", self.compute_id(self.files))

    @staticmethod
    def compute_id(files: Mapping[str, FileEntry]) -> str:
        body = json.dumps(
            [[p, e.digest, e.component, e.executable] for p, e in sorted(files.items())],
            separators=(",", ":"),
        )
        return sha256(body.encode())[:16]

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_dir(cls, root: str | Path, secrets: Iterable[str] = ()) -> Snapshot:
        """The seed version of a target directory. Problems here are the user's: ConfigError."""
        root = Path(root)
        if not root.is_dir():
            raise ConfigError(f"target directory {root} does not exist")
        components = Components.load(root)
        try:
            tree = scan_tree(root, skip=RUNTIME_DIRS)
            tree = {p: v for p, v in tree.items() if not is_runtime_artifact(p)}
            files, blobs = cls._classify(tree, components, secrets)
        except Rejected as exc:
            raise ConfigError(f"target {root}: {exc}") from None
        return cls(files=files, blobs=blobs, components=components)

    @staticmethod
    def _classify(tree, components: Components, secrets: Iterable[str]):
        files, blobs = {}, {}
        needles = [s.encode() for s in secrets if s and len(s) >= 4]
        for rel, (data, executable) in sorted(tree.items()):
            for needle in needles:
                if needle in data:
                    raise Rejected("secret_leak", f"{rel} contains the value of a configured secret")
            digest = sha256(data)
            files[rel] = FileEntry(digest, components.label(rel), executable)
            blobs[digest] = data
        return files, blobs

    # ---- reading --------------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        return self.blobs[self.files[path].digest]

    def text(self, path: str) -> str:
        return self.read(path).decode("utf-8", errors="replace")

    def materialize(self, dest: str | Path) -> Path:
        dest = Path(dest)
        check_paths(self.files, f"snapshot {self.snapshot_id}")  # nothing lands outside dest
        for rel, entry in self.files.items():
            path = dest / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.blobs[entry.digest])
            path.chmod(0o755 if entry.executable else 0o644)
        return dest

    @contextlib.contextmanager
    def check_out(self) -> Iterator[Path]:
        """A writable temporary copy, removed on exit."""
        tmp = Path(tempfile.mkdtemp(prefix=f"rsi-{self.snapshot_id}-"))
        try:
            yield self.materialize(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def changed_paths(self, other: Snapshot) -> list[str]:
        """Paths whose bytes, label or executable bit differ (added and removed included)."""
        paths = set(self.files) | set(other.files)
        return sorted(p for p in paths if self.files.get(p) != other.files.get(p))

    # ---- commit ---------------------------------------------------------------------------
    def commit(
        self,
        checkout: str | Path,
        evolve_scope: Iterable[str] | str | None = "*",
        secrets: Iterable[str] = (),
        ignore: Iterable[str] = (),
    ) -> Snapshot:
        """The child version of an edited checkout, or ``Rejected(reason)``.

        ``ignore`` names top-level paths (e.g. read-only reference folders) that never enter
        the candidate.
        """
        checkout = Path(checkout)
        discard_runtime_files(checkout)
        return self.commit_tree(scan_tree(checkout, skip=ignore), evolve_scope, secrets)

    def commit_tree(
        self,
        tree: Mapping[str, tuple[bytes, bool]],
        evolve_scope: Iterable[str] | str | None = "*",
        secrets: Iterable[str] = (),
        ignore: Iterable[str] = (),
    ) -> Snapshot:
        """``commit`` of an edited tree held in memory (``{path: (bytes, executable)}``, as a
        worker returns it): no round trip through a directory. Runtime artifacts and the
        top-level ``ignore`` folders are dropped first."""
        ignore = tuple(ignore)
        tree = {p: v for p, v in tree.items() if not is_runtime_artifact(p) and p.split("/", 1)[0] not in ignore}
        if COMPONENTS_FILE in self.files and tree.get(COMPONENTS_FILE, (None,))[0] != self.read(COMPONENTS_FILE):
            raise Rejected("out_of_scope", f"{COMPONENTS_FILE} is not editable")
        files, blobs = self._classify(tree, self.components, secrets)
        child = Snapshot(files=files, blobs=blobs, components=self.components, parent_id=self.snapshot_id)
        changed = self.changed_paths(child)
        if not changed:
            raise Rejected("no_change", "the edit changed no file")
        scope = self.components.resolve_scope(evolve_scope)
        for rel in changed:
            entry = child.files.get(rel) or self.files[rel]
            if entry.component not in scope:
                raise Rejected("out_of_scope", f"{rel} ({entry.component}) is outside the evolve scope {sorted(scope)}")
        return child

    # ---- persistence ----------------------------------------------------------------------
    def manifest(self) -> dict:
        return {
            "snapshot_id": self.snapshot_id,
            "parent_id": self.parent_id,
            "files": {p: [e.digest, e.component, e.executable] for p, e in sorted(self.files.items())},
        }

    @classmethod
    def from_manifest(cls, manifest: dict, blobs: Mapping[str, bytes]) -> Snapshot:
        """A stored snapshot, checked: safe paths, well-formed entries, blobs matching their
        digests, and an id matching the content (ConfigError otherwise)."""
        sid = manifest.get("snapshot_id") if isinstance(manifest, dict) else None
        where = f"snapshot {sid}" if isinstance(sid, str) and sid.isalnum() else f"snapshot {sid!r}"
        if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
            raise ConfigError(f"{where}: manifest has no files mapping")
        check_paths(manifest["files"], where)
        files = {}
        for p, entry in manifest["files"].items():
            if not (isinstance(entry, list) and len(entry) == 3 and is_digest(entry[0]) and isinstance(entry[1], str)):
                raise ConfigError(f"{where}: malformed manifest entry for {p!r}")
            files[p] = FileEntry(entry[0], entry[1], bool(entry[2]))
        for e in files.values():
            if e.digest not in blobs or sha256(blobs[e.digest]) != e.digest:
                raise ConfigError(f"{where}: blob {e.digest} is missing or does not match its digest")
        if COMPONENTS_FILE not in files:
            raise ConfigError(f"{where}: no {COMPONENTS_FILE} in the manifest")
        try:
            rules = yaml.safe_load(blobs[files[COMPONENTS_FILE].digest])
        except yaml.YAMLError:
            raise ConfigError(f"{where}: its {COMPONENTS_FILE} is not YAML") from None
        components = Components.parse(rules)
        snap = cls(
            files=files,
            blobs={e.digest: blobs[e.digest] for e in files.values()},
            components=components,
            parent_id=manifest.get("parent_id"),
        )
        if snap.snapshot_id != sid:
            raise ConfigError(f"{where} does not match its stored content")
        return snap
