"""The run directory: what a run decided, measured and produced, on any ``pyarrow.fs``.

Layout: ``config.yaml`` (redacted), ``decisions.jsonl``, ``rollouts/*.parquet``, ``traces/*.jsonl.gz``,
``blobs/`` (content store) + ``snapshots/*.json`` (manifests), ``archive.jsonl``,
``prompts/`` (every prompt a worker was shown, for audit),
``state/latest.json.gz`` (algorithm state after the last step, for resume), ``summary.json``.

Every decision line is flushed and fsynced (local storage) before the decision is acted on,
so a killed run loses nothing it had decided. Object stores have no append: there a JSONL file
is rewritten whole, which is atomic per object.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import yaml

from rsi.decisions import Decision
from rsi.errors import ClusterError, ConfigError
from rsi.results import SCHEMA, concat
from rsi.snapshot import Snapshot, is_digest


def open_fs(uri: str) -> tuple[pafs.FileSystem, str]:
    """A local path or any pyarrow.fs URI -> (filesystem, path within it)."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), str(Path(uri).expanduser().resolve())
    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ConfigError(f"storage {uri!r}: {exc}") from None


def new_run_uri(storage: str, name: str) -> str:
    """Where a new run goes when no run directory is given (also named ahead by ``rsi submit``,
    so the user learns it at submission)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{storage.rstrip('/')}/{name}-{stamp}-{uuid.uuid4().hex[:4]}"


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def dumps(obj: Any) -> str:
    return json.dumps(obj, default=_json_default, ensure_ascii=False, separators=(",", ":"))


STATE = "state/latest.json.gz"
STATE_LISTS = "__list_lengths__"  # in STATE: the lists kept in state/<key>.jsonl, and how many items


class RunRecords:
    def __init__(self, fs: pafs.FileSystem, root: str, uri: str):
        self.fs, self.root, self.uri = fs, root.rstrip("/"), uri
        self._lock = threading.Lock()
        self._local = isinstance(fs, pafs.LocalFileSystem)
        self._trace_cache: dict[str, list[str]] = {}
        self._decision_count: int | None = None  # counted once, then kept here
        self._state_lists: dict[str, list[str]] = {}  # each state list as this process last wrote it
        self._state_filed: set[str] = set()  # lists the current small state file reads from state/<key>.jsonl
        #: Called with each decision's record once it is on storage (a live experiment tracker).
        self.decision_listeners: list = []

    # ---- opening -------------------------------------------------------------------------
    @classmethod
    def create(cls, storage: str, name: str, run_dir: str | None = None) -> RunRecords:
        uri = run_dir or new_run_uri(storage, name)
        fs, root = open_fs(uri)
        kind = fs.get_file_info(root).type
        if kind == pafs.FileType.Directory:
            if any(
                fs.get_file_info(f"{root}/{rel}").type != pafs.FileType.NotFound
                for rel in ("decisions.jsonl", "run.json")
            ):
                raise ConfigError(f"run directory {uri} already holds a run; use `rsi resume {uri}`")
            if fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
                # A run writes config.yaml, blobs/, … into its directory: never over a user's files.
                raise ConfigError(
                    f"run directory {uri} exists and is not empty (and holds no run); give a new or empty directory"
                )
        elif kind != pafs.FileType.NotFound:
            raise ConfigError(f"run directory {uri} is an existing file, not a directory")
        try:
            fs.create_dir(root, recursive=True)
        except OSError as exc:  # a parent that is a file, no permission
            raise ConfigError(f"run directory {uri} cannot be created: {' '.join(str(exc).split())}") from None
        return cls(fs, root, uri if "://" in uri else root)

    @classmethod
    def open(cls, uri: str) -> RunRecords:
        fs, root = open_fs(uri)
        if fs.get_file_info(f"{root}/config.yaml").type == pafs.FileType.NotFound:
            raise ConfigError(f"{uri} is not a run directory (no config.yaml)")
        return cls(fs, root, uri if "://" in uri else root)

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.path(rel)).type != pafs.FileType.NotFound

    # ---- primitive writes ----------------------------------------------------------------
    def write_bytes(self, rel: str, data: bytes) -> None:
        """Atomic where the filesystem allows it: temp file + rename."""
        dest = self.path(rel)
        self.fs.create_dir(dest.rsplit("/", 1)[0], recursive=True)
        if self._local:
            tmp = f"{dest}.tmp-{uuid.uuid4().hex[:8]}"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, dest)
        else:
            # compression=None: bytes are stored as given (pyarrow would otherwise gzip a
            # ``.gz`` name a second time, and gunzip it on the way back in).
            with self.fs.open_output_stream(dest, compression=None) as f:
                f.write(data)

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.path(rel), compression=None) as f:
            return f.read()

    def append_line(self, rel: str, obj: Any) -> None:
        self.append_text(rel, dumps(obj) + "\n")

    def append_text(self, rel: str, text: str) -> None:
        """Append and fsync (local storage); object stores have no append: there the file is
        rewritten whole, which is atomic per object."""
        line = text.encode()
        with self._lock:
            dest = self.path(rel)
            if self._local:
                Path(dest).parent.mkdir(parents=True, exist_ok=True)
                with open(dest, "ab") as f:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
            else:
                old = self.read_bytes(rel) if self.exists(rel) else b""
                self.write_bytes(rel, old + line)

    def read_lines(self, rel: str) -> list[dict]:
        if not self.exists(rel):
            return []
        out = []
        for raw in self.read_bytes(rel).decode().splitlines():
            if raw.strip():
                try:
                    out.append(json.loads(raw))
                except json.JSONDecodeError:
                    break  # a line torn by a kill mid-write is the end of what was decided
        return out

    def truncate_lines(self, rel: str, keep: int) -> None:
        """Resume: drop lines past ``keep`` (the part of a step that was cut short is re-decided,
        identically, from the saved state and the stored rollouts)."""
        if not self.exists(rel):
            return
        lines = self.read_bytes(rel).decode().splitlines(keepends=True)
        if len(lines) > keep or (lines and not lines[-1].endswith("\n")):
            # A whole line that lost only its newline to the kill is kept, terminated: the next
            # append must start a line of its own.
            kept = [line if line.endswith("\n") else line + "\n" for line in lines[:keep]]
            self.write_bytes(rel, "".join(kept).encode())

    # ---- run files -----------------------------------------------------------------------
    def write_config(self, redacted: dict) -> None:
        self.write_bytes("config.yaml", yaml.safe_dump(redacted, sort_keys=False).encode())

    def read_config(self) -> dict:
        return yaml.safe_load(self.read_bytes("config.yaml"))

    def decision(self, decision: Decision | dict) -> None:
        """Append one decision, flushed and fsynced before the caller acts on it."""
        record = decision.record() if isinstance(decision, Decision) else decision
        count = self.decision_count()
        self.append_line("decisions.jsonl", record)
        self._decision_count = count + 1
        for listener in self.decision_listeners:
            listener(record)

    def decisions(self) -> list[dict]:
        return self.read_lines("decisions.jsonl")

    def decision_count(self) -> int:
        """Whole decision lines on storage; read once, then kept up to date by ``decision``."""
        if self._decision_count is None:
            self._decision_count = len(self.decisions())
        return self._decision_count

    def truncate_decisions(self, keep: int) -> None:
        """Resume: the decisions of a step cut short are dropped, to be re-decided."""
        self.truncate_lines("decisions.jsonl", keep)
        self._decision_count = None

    def archive_entry(self, entry: dict) -> None:
        self.append_line("archive.jsonl", entry)

    def write_json(self, rel: str, obj: Any) -> None:
        self.write_bytes(rel, json.dumps(obj, default=_json_default, indent=2, ensure_ascii=False).encode())

    def read_json(self, rel: str) -> Any:
        return json.loads(self.read_bytes(rel))

    def write_state(self, state: dict) -> None:
        """The algorithm's state after a step, for resume, written so a step pays for what it
        changed, not for the whole history. A list that only grows (an archive, a lineage, the
        declined edits) lives in ``state/<key>.jsonl`` and each step appends its new items; the
        rest, with each such list's length, is the small ``state/latest.json.gz``, replaced
        atomically last, so a step cut short leaves lines past the recorded length that reading
        ignores. A list is kept inline in the small file the first time this process writes it
        and whenever its earlier items changed (an RNG state), so no file the current small
        file points to is ever rewritten: a kill at any moment leaves a consistent state."""
        small, lengths = {}, {}
        for key, value in state.items():
            if not (isinstance(value, list) and re.fullmatch(r"[A-Za-z0-9_]+", key)):
                small[key] = value
                continue
            lines = [dumps(item) + "\n" for item in value]
            known = self._state_lists.get(key)
            rel = f"state/{key}.jsonl"
            n = len(known) if known is not None else 0
            grows = known is not None and lines[:n] == known
            if grows and key in self._state_filed:  # the current small file reads n lines of it
                if len(lines) > n:
                    self.append_text(rel, "".join(lines[n:]))
                lengths[key] = len(lines)
            elif grows:  # inline until now: the current small file ignores this file, so write it whole
                self.write_bytes(rel, "".join(lines).encode())
                self._state_filed.add(key)
                lengths[key] = len(lines)
            else:
                small[key] = value
                self._state_filed.discard(key)
            self._state_lists[key] = lines
        small[STATE_LISTS] = lengths
        self.write_bytes(STATE, gzip.compress(dumps(small).encode(), compresslevel=1))

    def read_state(self) -> dict:
        """The last saved state; ``{}`` before the first step. (Runs from before lists were kept
        apart hold the whole state in ``state/latest.json.gz``, or a plain ``state/latest.json``.)"""
        if self.exists(STATE):
            state = json.loads(gzip.decompress(self.read_bytes(STATE)))
        elif self.exists("state/latest.json"):
            state = self.read_json("state/latest.json")
        else:
            return {}
        for key, n in state.pop(STATE_LISTS, {}).items():
            lines = self.read_bytes(f"state/{key}.jsonl").decode().splitlines()[:n] if n else []
            state[key] = [json.loads(line) for line in lines]
        return state

    def write_rollouts(self, table: pa.Table, tag: str) -> str:
        rel = f"rollouts/{time.time_ns()}-{tag}.parquet"
        sink = io.BytesIO()
        pq.write_table(table, sink)
        self.write_bytes(rel, sink.getvalue())
        return rel

    def rollouts(self) -> pa.Table:
        sel = pafs.FileSelector(self.path("rollouts"), allow_not_found=True)
        files = sorted(i.path for i in self.fs.get_file_info(sel) if i.path.endswith(".parquet"))
        tables = []
        for f in files:
            with self.fs.open_input_file(f) as fh:
                tables.append(pq.read_table(fh, schema=SCHEMA))
        return concat(tables)

    def write_traces(self, traces: list[dict], tag: str) -> str:
        """One gzipped JSONL file per measurement (``zcat`` reads it). Traces are the bulk of a
        run's bytes: a meta-evolve gate round writes a thousand inner-search curves, which
        gzip's fastest level shrinks about tenfold for a few milliseconds of driver time."""
        rel = f"traces/{time.time_ns()}-{tag}.jsonl.gz"
        self.write_bytes(rel, gzip.compress("".join(dumps(t) + "\n" for t in traces).encode(), compresslevel=1))
        return rel

    def read_trace(self, trace_ref: str) -> dict:
        rel, _, idx = trace_ref.rpartition("#")
        if rel not in self._trace_cache:
            if len(self._trace_cache) > 64:
                self._trace_cache.clear()
            data = self.read_bytes(rel)
            self._trace_cache[rel] = (gzip.decompress(data) if rel.endswith(".gz") else data).decode().splitlines()
        return json.loads(self._trace_cache[rel][int(idx)])

    # ---- snapshots -----------------------------------------------------------------------
    def put_snapshot(self, snap: Snapshot) -> None:
        if self.exists(f"snapshots/{snap.snapshot_id}.json"):
            return
        for entry in snap.files.values():
            if not self.exists(f"blobs/{entry.digest}"):
                self.write_bytes(f"blobs/{entry.digest}", snap.blobs[entry.digest])
        self.write_json(f"snapshots/{snap.snapshot_id}.json", snap.manifest())

    def get_snapshot(self, snapshot_id: str) -> Snapshot:
        """A stored snapshot, checked by ``Snapshot.from_manifest`` (safe paths, digests, id);
        only well-formed names are read, so no file outside ``snapshots/`` and ``blobs/`` is."""
        if not (isinstance(snapshot_id, str) and re.fullmatch(r"[0-9a-f]{1,64}", snapshot_id)):
            raise ConfigError(f"{self.uri}: {snapshot_id!r} is not a snapshot id")
        if not self.exists(f"snapshots/{snapshot_id}.json"):
            raise ConfigError(f"{self.uri}: no snapshot {snapshot_id}")
        try:
            manifest = self.read_json(f"snapshots/{snapshot_id}.json")
        except ValueError as exc:
            raise ConfigError(f"{self.uri}: snapshot {snapshot_id}: manifest is not JSON ({exc})") from None
        files = manifest.get("files") if isinstance(manifest, dict) else None
        entries = files.values() if isinstance(files, dict) else []
        digests = {e[0] for e in entries if isinstance(e, list) and e and is_digest(e[0])}
        blobs = {d: self.read_bytes(f"blobs/{d}") for d in sorted(digests) if self.exists(f"blobs/{d}")}
        if isinstance(manifest, dict) and manifest.get("snapshot_id") != snapshot_id:
            raise ConfigError(f"{self.uri}: snapshots/{snapshot_id}.json holds another snapshot id")
        return Snapshot.from_manifest(manifest, blobs)

    def iter_snapshot_ids(self) -> Iterator[str]:
        sel = pafs.FileSelector(self.path("snapshots"), allow_not_found=True)
        for info in self.fs.get_file_info(sel):
            yield info.base_name.removesuffix(".json")

    def local_path(self) -> Path:
        if not self._local:
            raise ClusterError(f"{self.uri} is not on the local filesystem")
        return Path(self.root)
