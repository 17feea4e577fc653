"""The file tools the built-in coding agent gives a model, confined to one checkout.

Every path is relative to the checkout. Absolute paths, ``..`` and symlinks that lead out are
refused; so is writing through any symlink, under a read-only reference folder, or to
``components.yaml`` (the run's rules are fixed). A refusal is a tool result the model reads,
never an exception that ends the edit.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

from rsi.components import COMPONENTS_FILE
from rsi.snapshot import RUNTIME_DIRS

MAX_READ_CHARS = 60_000
MAX_LIST = 500
MAX_MATCHES = 200
MAX_SEARCH_BYTES = 1_000_000

_PATH = {"type": "string", "description": "path relative to the checkout root"}
TOOL_SPECS = [
    {
        "name": "list_files",
        "description": "List files under a folder of the checkout (recursive).",
        "parameters": {"type": "object", "properties": {"path": dict(_PATH, description="folder; default: the root")}},
    },
    {
        "name": "read_file",
        "description": "Read a text file. Optional 1-based start_line/end_line for a slice.",
        "parameters": {
            "type": "object",
            "properties": {"path": _PATH, "start_line": {"type": "integer"}, "end_line": {"type": "integer"}},
            "required": ["path"],
        },
    },
    {
        "name": "write_file",
        "description": "Create or overwrite a text file with the full new content.",
        "parameters": {
            "type": "object",
            "properties": {"path": _PATH, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
    {
        "name": "delete_file",
        "description": "Delete one file.",
        "parameters": {"type": "object", "properties": {"path": _PATH}, "required": ["path"]},
    },
    {
        "name": "search",
        "description": "Regex search over file contents; returns path:line: text for each match.",
        "parameters": {
            "type": "object",
            "properties": {"pattern": {"type": "string"}, "path": dict(_PATH, description="folder; default: the root")},
            "required": ["pattern"],
        },
    },
    {
        "name": "finish",
        "description": "End the edit. Give a short summary of what you changed and why.",
        "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]},
    },
]


class ToolError(Exception):
    """A refused or failed tool call; its message goes back to the model as the tool result."""


class Workspace:
    def __init__(self, root: Path, read_only: Iterable[str] = ()):
        self.root = Path(root).resolve()
        self.read_only = [PurePosixPath(p.strip("/")) for p in read_only if p and p.strip("/")]

    # ---- confinement ---------------------------------------------------------------------------
    def resolve(self, path, write: bool = False) -> tuple[Path, str]:
        if not isinstance(path, str) or not path.strip():
            raise ToolError("path must be a non-empty string relative to the checkout")
        raw = path.strip()
        if raw.startswith(("/", "\\", "~")) or os.path.isabs(raw) or re.match(r"^[A-Za-z]:", raw):
            raise ToolError(f"{raw}: absolute paths are refused; use a path relative to the checkout")
        pure = PurePosixPath(raw.replace("\\", "/"))
        if ".." in pure.parts:
            raise ToolError(f"{raw}: '..' is refused; paths stay inside the checkout")
        full = self.root.joinpath(*pure.parts)
        real = full.resolve()
        if not real.is_relative_to(self.root):
            raise ToolError(f"{raw}: leads outside the checkout (through a symlink)")
        rel = real.relative_to(self.root).as_posix() or "."
        if write:
            probe = self.root
            for part in pure.parts:
                probe = probe / part
                if probe.is_symlink():
                    raise ToolError(f"{raw}: refusing to write through a symlink")
            rel_pure = PurePosixPath(rel)
            for ro in self.read_only:
                if rel_pure == ro or ro in rel_pure.parents:
                    raise ToolError(f"{raw}: {ro}/ is a read-only reference copy; edit the checkout's own files")
            if rel == COMPONENTS_FILE:
                raise ToolError(f"{COMPONENTS_FILE} is not editable: the component rules are fixed for the run")
        return real, rel

    # ---- tools ---------------------------------------------------------------------------------
    def list_files(self, path: str = ".") -> str:
        base, rel = self.resolve(path)
        if not base.is_dir():
            raise ToolError(f"{path}: not a folder")
        lines = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in RUNTIME_DIRS)
            for name in sorted(filenames):
                full = Path(dirpath) / name
                shown = full.relative_to(self.root).as_posix()
                ro = " (read-only)" if any(PurePosixPath(shown).is_relative_to(r) for r in self.read_only) else ""
                size = full.stat().st_size if full.exists() else 0
                lines.append(f"{shown} ({size} bytes){ro}")
        if not lines:
            return f"{rel}: no files"
        more = f"\n[... {len(lines) - MAX_LIST} more files not shown ...]" if len(lines) > MAX_LIST else ""
        return "\n".join(lines[:MAX_LIST]) + more

    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        full, rel = self.resolve(path)
        if not full.is_file():
            raise ToolError(f"{path}: no such file")
        text = full.read_bytes().decode("utf-8", errors="replace")
        if start_line or end_line:
            if not all(isinstance(v, (int, type(None))) for v in (start_line, end_line)):
                raise ToolError("start_line and end_line must be integers")
            lines = text.splitlines(keepends=True)
            text = "".join(lines[max(0, int(start_line or 1) - 1) : int(end_line) if end_line else None])
        if len(text) > MAX_READ_CHARS:
            return text[:MAX_READ_CHARS] + f"\n[... truncated: {len(text)} characters; read a line range ...]"
        return text

    def write_file(self, path: str, content) -> str:
        if not isinstance(content, str):
            raise ToolError("content must be a string (the whole new file)")
        full, rel = self.resolve(path, write=True)
        if full.is_dir():
            raise ToolError(f"{path}: is a folder")
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(content)
        return f"wrote {rel} ({len(content.encode())} bytes)"

    def delete_file(self, path: str) -> str:
        full, rel = self.resolve(path, write=True)
        if not full.is_file():
            raise ToolError(f"{path}: no such file")
        full.unlink()
        return f"deleted {rel}"

    def search(self, pattern: str, path: str = ".") -> str:
        try:
            regex = re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise ToolError(f"invalid regex {pattern!r}: {exc}") from None
        base, _ = self.resolve(path)
        files = (
            [base]
            if base.is_file()
            else sorted(p for p in base.rglob("*") if p.is_file() and not RUNTIME_DIRS.intersection(p.parts))
        )
        hits = []
        for f in files:
            if f.stat().st_size > MAX_SEARCH_BYTES or not f.resolve().is_relative_to(self.root):
                continue
            try:
                text = f.read_text()
            except UnicodeDecodeError:
                continue
            for n, line in enumerate(text.splitlines(), 1):
                if regex.search(line):
                    hits.append(f"{f.relative_to(self.root).as_posix()}:{n}: {line[:200]}")
        if not hits:
            return f"no match for {pattern!r}"
        more = f"\n[... {len(hits) - MAX_MATCHES} more matches ...]" if len(hits) > MAX_MATCHES else ""
        return "\n".join(hits[:MAX_MATCHES]) + more

    def run(self, name: str, args: dict) -> str:
        """Run one tool call; refusals and bad arguments come back as ``error: ...`` text."""
        tools: dict[str, Callable[..., str]] = {
            "list_files": self.list_files,
            "read_file": self.read_file,
            "write_file": self.write_file,
            "delete_file": self.delete_file,
            "search": self.search,
        }
        if name not in tools:
            return f"error: unknown tool {name!r}; tools: {', '.join(sorted(tools))}, finish"
        try:
            inspect.signature(tools[name]).bind(**args)
        except TypeError as exc:  # wrong or missing argument names from the model
            return f"error: bad arguments for {name}: {exc}"
        try:
            return tools[name](**args)
        except ToolError as exc:
            return f"error: {exc}"
        except OSError as exc:
            return f"error: {name} failed: {exc.strerror or exc}"
