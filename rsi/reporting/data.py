"""What a report reads from a run directory, on any ``pyarrow.fs``, tolerantly and read-only.

A run may be finished (``summary.json``), still running, or killed: every file is optional
except ``config.yaml`` (what makes a directory a run), a torn last decision line ends the log
(``RunRecords.read_lines``), and a figure that the records cannot support is left out with a
note instead of failing the report.

Candidates come from the decision log: every decision that names a snapshot (except the
bookkeeping kinds in ``NOT_A_CANDIDATE``) is a measured candidate, first seen at its earliest
step; a ``decline`` or ``invalid`` decision is an edit that never became one. A candidate's
score is the mean over tasks of its per-task avg@k (``ScoreMatrix``) on the run's search split
(train, else dev), k being every repetition stored for that task; where no rollout is stored
the decision's own figure (``train_mean``, ``mean``, the mean of ``means``) stands in.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from rsi.errors import ConfigError
from rsi.records import RunRecords
from rsi.results import ScoreMatrix

#: Decisions that name a snapshot without measuring it as a new candidate.
NOT_A_CANDIDATE = frozenset(
    {"promote", "test", "validate", "round", "stop", "budget", "decline", "invalid", "merge", "restart"}
)
#: Decisions that record an edit which never became a measured candidate.
DECLINED = frozenset({"decline", "invalid"})
#: Decisions after the search itself (the runner's test, meta-evolve's validation).
AFTER_SEARCH = frozenset({"test", "validate"})


@dataclass
class Candidate:
    snapshot_id: str
    step: int
    kind: str  # the first decision's kind: seed, screen, admit, keep, measure, ...
    parent_id: str | None = None
    donor_id: str | None = None
    accepted: bool | None = None  # the last decision's verdict
    reason: str = ""
    score: float | None = None
    score_from: str = ""  # "rollouts" or "decision"
    decisions: list[dict] = field(default_factory=list)
    promoted: bool = False

    @property
    def status(self) -> str:
        if self.kind == "seed":
            return "seed"
        return {True: "admitted", False: "rejected", None: "measured"}[self.accepted]

    @property
    def admitted(self) -> bool:
        return self.kind == "seed" or self.accepted is True


@dataclass
class Declined:
    step: int
    kind: str
    parent_id: str | None
    reason: str
    snapshot_id: str | None = None
    detail: str = ""


def _number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def decision_score(d: dict) -> float | None:
    """The figure a decision itself records for its candidate's search-split mean."""
    for key in ("train_mean", "mean"):
        if (v := _number(d.get(key))) is not None:
            return v
    means = d.get("means")
    if isinstance(means, dict) and means:
        vals = [_number(v) for v in means.values()]
        numbers = [v for v in vals if v is not None]
        if len(numbers) == len(vals):
            return float(np.mean(numbers))
    return None


def task_means(rows: pa.Table) -> dict[str, float]:
    """Per-task avg@k over every stored repetition (each measurement's trials renumbered, so a
    re-measurement adds repetitions instead of overwriting the first one's)."""
    tasks = rows["task_id"].to_pylist()
    seen: dict[str, int] = {}
    trials = []
    for t in tasks:
        trials.append(seen.get(t, 0))
        seen[t] = seen.get(t, 0) + 1
    renumbered = pa.table({"task_id": tasks, "trial": pa.array(trials, pa.int32()), "score": rows["score"]})
    return ScoreMatrix.from_table(renumbered).avg_at_k()


class RunView:
    """One run directory, read once, for the report and the ``rsi show``/``ls``/``compare`` commands."""

    def __init__(self, uri: str):
        self.records = RunRecords.open(uri)
        self.uri = self.records.uri
        self.name = self.uri.rstrip("/").rsplit("/", 1)[-1]

    # ---- files (each optional) ------------------------------------------------------------
    def _json(self, rel: str):
        try:
            return self.records.read_json(rel) if self.records.exists(rel) else None
        except (ValueError, OSError):
            return None  # torn or unreadable: as if absent

    @cached_property
    def config(self) -> dict:
        try:
            return self.records.read_config() or {}
        except Exception:  # noqa: BLE001 - a report shows what it can
            return {}

    @cached_property
    def summary(self) -> dict | None:
        s = self._json("summary.json")
        return s if isinstance(s, dict) else None

    @cached_property
    def meta(self) -> dict:
        m = self._json("run.json")
        return m if isinstance(m, dict) else {}

    @cached_property
    def meta_report(self) -> dict | None:
        m = self._json("meta_report.json")
        return m if isinstance(m, dict) else None

    @cached_property
    def state(self) -> dict:
        try:
            return self.records.read_state()
        except Exception:  # noqa: BLE001 - a state torn by a kill on an object store
            return {}

    @cached_property
    def decisions(self) -> list[dict]:
        return [d for d in self.records.decisions() if isinstance(d, dict)]

    @cached_property
    def rollouts(self) -> pa.Table:
        rows = self.records.rollouts()
        fp = self.meta.get("fingerprint")
        if fp and rows.num_rows:
            mine = rows.filter(pc.equal(rows["fingerprint"], fp))
            if mine.num_rows:  # rows of an older target fingerprint (resume --allow-changed) left out
                rows = mine
        return rows

    @property
    def algorithm(self) -> str:
        return (self.summary or {}).get("algorithm") or (self.config.get("algorithm") or {}).get("name") or "?"

    @property
    def benchmark(self) -> str:
        return str((self.config.get("benchmark") or {}).get("name") or "?")

    # ---- time ------------------------------------------------------------------------------
    def mtime(self, rel: str) -> float | None:
        info = self.records.fs.get_file_info(self.records.path(rel))
        if info.type == pafs.FileType.NotFound or info.mtime is None:
            return None
        return info.mtime.timestamp()

    @cached_property
    def started(self) -> float | None:
        return self.mtime("run.json") or self.mtime("config.yaml")

    @cached_property
    def last_write(self) -> float | None:
        """The newest write the run made (decision, state, rollouts, traces, summary)."""
        times = [self.mtime(rel) for rel in ("decisions.jsonl", STATE, "summary.json", "run.json")]
        for folder in ("rollouts", "traces"):
            sel = pafs.FileSelector(self.records.path(folder), allow_not_found=True)
            times += [i.mtime.timestamp() for i in self.records.fs.get_file_info(sel) if i.mtime is not None]
        known = [t for t in times if t is not None]
        return max(known) if known else None

    def status(self, now: float | None = None, active_s: float = 600.0) -> str:
        """finished (summary.json), failed (cannot continue: no run.json, or the seed failed on
        every rollout), running (a write within ``active_s``: the records have no heartbeat, so
        recent activity stands in for one), else resumable."""
        if self.summary is not None:
            return "finished"
        if not self.meta:
            return "failed"
        now = time.time() if now is None else now
        if self.last_write is not None and now - self.last_write <= active_s:
            return "running"
        statuses = self.rollouts["status"].to_pylist()
        if not self.decisions and statuses and "ok" not in statuses:
            return "failed"  # the seed failed every rollout: a resume would stop the same way
        return "resumable"

    # ---- derived ---------------------------------------------------------------------------
    @cached_property
    def split(self) -> str:
        """The search split the candidates' scores are read on: train, else dev, else test."""
        have = set(self.rollouts["split"].to_pylist())
        return next((s for s in ("train", "dev", "test") if s in have), "train")

    @cached_property
    def task_matrix(self) -> dict[str, dict[str, float]]:
        """snapshot id -> task id -> avg@k on the search split."""
        rows = self.rollouts
        if not rows.num_rows:
            return {}
        rows = rows.filter(pc.equal(rows["split"], self.split))
        out = {}
        sids = rows["snapshot_id"].to_pylist()
        for sid in dict.fromkeys(sids):
            mask = pa.array([s == sid for s in sids])
            out[sid] = task_means(rows.filter(mask))
        return out

    @cached_property
    def promoted_id(self) -> str | None:
        if self.summary and self.summary.get("snapshot_id"):
            return self.summary["snapshot_id"]
        promotes = [d for d in self.decisions if d.get("kind") == "promote"]
        return promotes[-1].get("snapshot_id") if promotes else None

    @cached_property
    def candidates(self) -> list[Candidate]:
        """Every measured candidate, in order of first decision."""
        by_id: dict[str, Candidate] = {}
        for d in self.decisions:
            sid, kind = d.get("snapshot_id"), d.get("kind")
            if not sid or kind in NOT_A_CANDIDATE:
                continue
            c = by_id.get(sid)
            if c is None:
                c = by_id[sid] = Candidate(sid, int(d.get("step") or 0), str(kind))
            c.decisions.append(d)
            c.parent_id = c.parent_id or d.get("parent_id")
            c.donor_id = c.donor_id or d.get("donor_id")
            if d.get("accepted") is not None or not c.reason:
                c.accepted, c.reason = d.get("accepted"), str(d.get("reason") or "")
        for c in by_id.values():
            if c.parent_id is None and c.kind != "seed":
                c.parent_id = self._manifest_parent(c.snapshot_id)
            means = self.task_matrix.get(c.snapshot_id)
            if means:
                c.score, c.score_from = float(np.mean(list(means.values()))), "rollouts"
            else:
                figs = [v for v in (decision_score(d) for d in c.decisions) if v is not None]
                if figs:
                    c.score, c.score_from = figs[-1], "decision"
            c.promoted = c.snapshot_id == self.promoted_id
        return list(by_id.values())

    @cached_property
    def declined(self) -> list[Declined]:
        return [
            Declined(
                int(d.get("step") or 0),
                str(d.get("kind")),
                d.get("parent_id"),
                str(d.get("reason") or ""),
                d.get("snapshot_id"),
                str(d.get("detail") or ""),
            )
            for d in self.decisions
            if d.get("kind") in DECLINED
        ]

    def _manifest_parent(self, sid: str) -> str | None:
        try:
            return self.records.read_json(f"snapshots/{sid}.json").get("parent_id")
        except Exception:  # noqa: BLE001 - a missing or torn manifest
            return None

    @cached_property
    def steps(self) -> int:
        steps = [int(d.get("step") or 0) for d in self.decisions if d.get("kind") not in AFTER_SEARCH]
        return max(steps, default=0)

    @cached_property
    def best(self) -> Candidate | None:
        scored = [c for c in self.candidates if c.score is not None]
        return max(scored, key=lambda c: (c.score, -c.step)) if scored else None

    def resolve_snapshot(self, prefix: str) -> str:
        """A snapshot id from a unique prefix of it."""
        ids = sorted(self.records.iter_snapshot_ids())
        if prefix in ids:
            return prefix
        hits = [i for i in ids if i.startswith(prefix)] if prefix else []
        if len(hits) == 1:
            return hits[0]
        if not hits:
            raise ConfigError(f"{self.uri}: no snapshot {prefix!r}")
        raise ConfigError(f"{self.uri}: snapshot prefix {prefix!r} is ambiguous ({', '.join(hits[:5])})")

    # ---- time and cost ---------------------------------------------------------------------
    def cost(self) -> dict:
        """Rollouts (summed duration, cost, tokens) vs model calls (usage) vs driver (the rest
        of the elapsed time). Without summary.json the elapsed time is read from file times."""
        rows = self.rollouts
        col = lambda name: [v for v in rows[name].to_pylist() if v is not None] if rows.num_rows else []  # noqa: E731
        usage = (self.summary or {}).get("usage") or self.state.get("usage") or {}
        if self.summary and _number(self.summary.get("elapsed_s")) is not None:
            elapsed, elapsed_from = float(self.summary["elapsed_s"]), "summary.json"
        elif self.started is not None and self.last_write is not None:
            elapsed, elapsed_from = max(0.0, self.last_write - self.started), "file times (no summary.json)"
        else:
            elapsed, elapsed_from = None, "unknown"
        rollout_s = float(sum(col("duration_s")))
        model_s = _number(usage.get("duration_s", usage.get("seconds")))
        driver_s = None if elapsed is None else max(0.0, elapsed - rollout_s - (model_s or 0.0))
        executed = (self.summary or {}).get("rollouts", {})
        return {
            "elapsed_s": elapsed,
            "elapsed_from": elapsed_from,
            "rollout_s": rollout_s,
            "rollouts_stored": rows.num_rows,
            "rollouts_executed": executed.get("executed"),
            "cache_hits": executed.get("cache_hits"),
            "rollout_cost_usd": float(sum(col("cost_usd"))),
            "rollout_tokens_in": int(sum(col("tokens_in"))),
            "rollout_tokens_out": int(sum(col("tokens_out"))),
            "model_calls": usage.get("calls"),
            "model_tokens_in": usage.get("tokens_in"),
            "model_tokens_out": usage.get("tokens_out"),
            "model_cost_usd": usage.get("cost_usd"),
            "model_s": model_s,
            "driver_s": driver_s,
        }


STATE = "state/latest.json.gz"


def short(sid: str | None, n: int = 8) -> str:
    return "-" if not sid else sid[:n]


def dumps_pretty(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False, default=str)
