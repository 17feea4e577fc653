"""AHE: Agentic Harness Engineering — Agent Debugger, Evolve Agent, attributed verdicts
(docs/algorithms/ahe.md).

The harness is evolved as a directory the worker edits itself. What makes each edit
falsifiable is its manifest: the Evolve Agent declares which files it changed and which train
tasks each change should flip or might break, and the next measurement judges every
declaration. There is no score gate: every valid edit is kept (``keep``), because the verdicts,
not a score threshold, are what the next Evolve Agent reasons over (KEEP / IMPROVE / ROLLBACK,
with the original contents of the changed files to roll back to). Train is the only split the
search sees; dev and test traces never reach the debugger or the Evolve Agent, and the runner
measures test once at the end.

Reference: upstream china-qijizhifeng/agentic-harness-engineering at commit
8b2a55d97590363fe50c3cc6b5e833b020a4bb4c; that hash was carried over from an earlier
implementation and has not been independently verified. This is a port of the paper's default
(published) path, not a line-by-line reproduction. Differences:

- The manifest comes in a ``<MANIFEST>`` block of the reply (``rsi.prompting.tagged``), not as
  a file in the checkout (such a file would belong to no component and reject the commit).
- The changed paths come from the snapshot (``Snapshot.changed_paths``: bytes, component label
  and executable bit), never from the worker's claim; declared paths must equal them exactly.
- Only the published mode, in which the Evolve Agent decides on earlier edits from the
  verdicts; the conservative variants that roll back falsified changes or gate on
  non-regression by score are not implemented, so there is no ``mode`` parameter (an unknown
  parameter is an error, not silently ignored).
- Evidence budgets use the shared helpers (the tail kept and the cut marked; failure-first
  lists keep their head), not a head-and-tail clip.
- An invalid manifest or an invalid edit declines the round, recorded with its reason, and the
  reason reaches the next prompt (``declined_edits``, latest 4); the run goes on.
- A debugger call that fails propagates after the model client's own retries: a broken worker
  is visible, not papered over with a placeholder report.
- The full component rule table is in the Evolve Agent's prompt; ``evolve_scope: "*"`` means
  every component the target declares, and a new file must match exactly one rule.
- Runtime artifacts the worker's tools leave (``__pycache__``, ``*.pyc``) are discarded before
  the commit. No add/remove switches: the scope and the component rules already say it.
- A task passes at full score (1.0); flips are between fail and pass on one measurement per
  task. Debugger calls run concurrently on the worker pool (at most ``worker.replicas`` at a
  time) and their reports are ordered by task, so the records equal a sequential run's; after
  a declined round the version and its traces are unchanged, so its diagnosis is reused.
"""

from __future__ import annotations

import json

from algorithms.ahe import _prompts
from algorithms.ahe.manifest import ManifestError, flips, parse_manifest, passes, unattributed_regressions, verdict
from algorithms.ahe.params import AHEParams
from rsi.algorithm import Algorithm
from rsi.decisions import Decision
from rsi.errors import ConfigError
from rsi.prompting import MIN_EVIDENCE_CHARS, component_table, evidence, render, split_budget
from rsi.results import ScoreMatrix
from rsi.snapshot import Snapshot, runtime_artifacts
from rsi.workers.base import EditResult

DECLINED_SHOWN = 4


class AHE(Algorithm):
    Params = AHEParams
    requires_splits = ("train",)
    worker_kind = "agent"

    @classmethod
    def check_benchmark(cls, benchmark, params=None) -> None:
        super().check_benchmark(benchmark, params)
        ids = [t.task_id for t in benchmark.split("train")]
        dupes = sorted({t for t in ids if ids.count(t) > 1})
        if dupes:
            raise ConfigError(
                f"benchmark {benchmark.name}: train task ids must be unique for per-task verdicts; repeated: {dupes}"
            )

    def __init__(self, ctx, params: AHEParams):
        super().__init__(ctx, params)
        self.p = params
        self.train_ids: list[str] = ctx.evaluator.split_ids("train")
        self.current: Snapshot | None = None
        self.means: dict[str, float] = {}
        self.status: dict[str, str] = {}
        self.trace_refs: dict[str, str] = {}
        self.last_round: dict | None = None  # verdicts and rollback sources of the last kept edit
        self.declined_edits: list[dict] = []
        self.lineage: list[dict] = []
        self.diagnosis: tuple[str | None, dict] = (None, {})

    @property
    def version(self) -> Snapshot:
        """The latest kept version: the seed's from ``seed`` on (or the one a resume restores)."""
        if self.current is None:
            raise RuntimeError("AHE has no current version before the seed is measured")
        return self.current

    # ---- the loop (the base runs it: seed, then step_once until done, then finish) ------------
    def done(self) -> bool:
        if self.step >= self.p.max_steps:
            return True
        if self.train_mean() >= self.p.target_score - 1e-12:
            self.decide(
                "stop",
                self.version.snapshot_id,
                self.version.parent_id,
                reason_code="target_score",
                reason=f"train mean {self.train_mean():.4f} reached target_score {self.p.target_score}",
                train_mean=self.train_mean(),
            )
            return True
        return False

    def step_once(self) -> None:
        self.step += 1
        self.evolve_round()

    def finish(self) -> Snapshot:
        return self.promote(
            self.version,
            "the latest kept version (every valid edit is kept)",
            reason_code="latest_kept",
            train_mean=self.train_mean(),
            lineage=self.lineage,
            declined_edits=self.declined_edits,
        )

    def seed(self) -> None:
        snap = self.ctx.seed_snapshot
        self.require_seed_runs(self.measure(snap, "seed"))
        self.decide(
            "seed",
            snap.snapshot_id,
            None,
            accepted=True,
            reason=f"train mean {self.train_mean():.4f}",
            reason_code="seed",
            train_mean=self.train_mean(),
            means=self.means,
        )
        self.adopt(snap)

    def evolve_round(self) -> None:
        parent = self.version
        edited = self.workers.edit(0, parent, self.evolve_prompt(parent, self.diagnose(parent)))
        reply = edited.reply
        child, discarded = self.commit_edit(parent, edited)
        if child is None:
            return
        changed = parent.changed_paths(child)
        try:
            manifest = parse_manifest(reply, changed)
        except ManifestError as exc:
            self.decide(
                "decline",
                child.snapshot_id,
                parent.snapshot_id,
                accepted=False,
                reason=exc.reason,
                reason_code=exc.reason,
                detail=str(exc),
                changed_paths=changed,
            )
            self.declined_edits.append({"step": self.step, "reason": exc.reason, "detail": str(exc)})
            return
        before, before_mean = self.means, self.train_mean()
        self.measure(child, f"s{self.step}")
        flipped = flips(before, self.means)
        verdicts = [verdict(c, flipped) for c in manifest.changes]
        unattributed = unattributed_regressions(manifest, flipped)
        self.decide(
            "keep",
            child.snapshot_id,
            parent.snapshot_id,
            accepted=True,
            reason_code="kept",
            reason=f"train mean {self.train_mean():.4f} (was {before_mean:.4f}); kept, no score gate",
            train_mean=self.train_mean(),
            parent_train_mean=before_mean,
            means=self.means,
            parent_means=before,
            changed_paths=changed,
            discarded_runtime_files=discarded,
            manifest=manifest.record(),
            verdicts=verdicts,
            unattributed_regressions=unattributed,
            **flipped,
        )
        self.last_round = {
            "step": self.step,
            "version": child.snapshot_id,
            "verdicts": verdicts,
            "unattributed_regressions": unattributed,
            **flipped,
            "rollback_sources": {p: parent.text(p) if p in parent.files else None for p in changed},
        }
        self.adopt(child)

    def diagnose(self, parent: Snapshot) -> dict:
        """What the Evolve Agent is shown of ``parent``'s failures: the raw traces, or the
        debugger's reports (run once per version: a declined round reuses them)."""
        if not self.p.use_debugger:
            return self.raw_traces()
        if self.diagnosis[0] == parent.snapshot_id:
            return self.diagnosis[1]  # the last round was declined: same version, same traces
        diagnosis = self.debug(parent)
        self.diagnosis = (parent.snapshot_id, diagnosis)
        return diagnosis

    # ---- the Agent Debugger ----------------------------------------------------------------
    def debug(self, version: Snapshot) -> dict:
        """One report per trace (failures first, at most ``debugger_max_tasks``), concurrently on
        the worker pool, then one synthesis. A failed call raises."""
        tasks = self.failures_first()[: self.p.debugger_max_tasks]
        prompts = [self.debug_prompt(version, i, t) for i, t in enumerate(tasks)]
        reports = {t: reply for t, (reply, _usage) in zip(tasks, self.workers.ask_many(prompts))}
        blocks = [f"### {t} ({self.means[t]:.3f}, {self.status[t]})\n{reports[t]}" for t in tasks]
        score_lines = self.score_lines()
        part = split_budget(
            {"scores": len("\n".join(score_lines)), "reports": len("\n\n".join(blocks))}, self.p.max_evidence_chars
        )
        text = render(
            _prompts.SYNTHESIZE,
            version=version.snapshot_id,
            scores=evidence(score_lines, max(part["scores"], MIN_EVIDENCE_CHARS), keep="first", sep="\n"),
            reports=evidence(blocks, max(part["reports"], MIN_EVIDENCE_CHARS), keep="first"),
        )
        self.record_prompt("synthesis", text)
        synthesis, _usage = self.workers.ask(0, text)
        return {"synthesis": synthesis, "reports": blocks}

    def debug_prompt(self, version: Snapshot, i: int, task_id: str) -> str:
        text = render(
            _prompts.DEBUG,
            version=version.snapshot_id,
            task_id=task_id,
            score=f"{self.means[task_id]:.3f} ({self.status[task_id]})",
            trace=evidence(self.trace(task_id), self.p.max_evidence_chars),
        )
        self.record_prompt(f"debug-{i:03d}-{task_id}", text)
        return text

    def raw_traces(self) -> dict:
        return {
            "traces": [
                f"### {t} ({self.means[t]:.3f}, {self.status[t]})\n{self.trace(t)}" for t in self.failures_first()
            ]
        }

    # ---- the Evolve Agent ----------------------------------------------------------------
    def evolve_prompt(self, version: Snapshot, diagnosis: dict) -> str:
        last = self.last_round
        sections = {
            "scores": (self.score_lines(), "\n"),
            "synthesis": ([diagnosis["synthesis"]] if "synthesis" in diagnosis else [], ""),
            "diagnosis": (diagnosis.get("reports") or diagnosis.get("traces") or [], "\n\n"),
            "verdicts": (
                [json.dumps({k: v for k, v in last.items() if k != "rollback_sources"}, indent=1)]
                if last
                else [_prompts.NO_ROUND_YET],
                "",
            ),
            "rollback": (
                [
                    f"### {p}\n" + ("(did not exist before: delete it to roll back)" if c is None else f"```\n{c}\n```")
                    for p, c in last["rollback_sources"].items()
                ]
                if last
                else [_prompts.NO_ROUND_YET],
                "\n\n",
            ),
            "declined": (
                [json.dumps(d) for d in self.declined_edits[-DECLINED_SHOWN:]] or [_prompts.NO_DECLINED],
                "\n",
            ),
        }
        part = split_budget({k: len(sep.join(b)) for k, (b, sep) in sections.items()}, self.p.max_evidence_chars)
        fit = {
            k: evidence(b, max(part[k], MIN_EVIDENCE_CHARS), keep="first", sep=sep) for k, (b, sep) in sections.items()
        }
        if "synthesis" in diagnosis:
            shown = render(_prompts.WITH_DEBUGGER, synthesis=fit["synthesis"], reports=fit["diagnosis"])
        else:
            shown = render(_prompts.RAW_TRACES, traces=fit["diagnosis"])
        components = self.ctx.seed_snapshot.components
        text = render(
            _prompts.EVOLVE,
            version=version.snapshot_id,
            mean=f"{self.train_mean():.4f}",
            scores=fit["scores"],
            diagnosis=shown,
            verdicts=fit["verdicts"],
            rollback_sources=fit["rollback"],
            declined=fit["declined"],
            declined_count=DECLINED_SHOWN,
            scope=", ".join(sorted(components.resolve_scope(self.ctx.config.run.target.evolve_scope))),
            components=component_table(components),
        )
        self.record_prompt("evolve", text)
        return text

    # ---- pieces --------------------------------------------------------------------------
    def commit_edit(self, parent: Snapshot, edited: EditResult) -> tuple[Snapshot | None, list[str]]:
        """Discard runtime artifacts, then commit; a rejection is a recorded decline."""
        discarded = runtime_artifacts(edited.tree)
        child = self.commit_or_decline(parent, edited, discarded_runtime_files=discarded)
        if isinstance(child, Decision):
            self.declined_edits.append(
                {"step": self.step, "reason": child.reason, "detail": child.figures.get("detail", "")}
            )
            return None, discarded
        return child, discarded

    def measure(self, snap: Snapshot, salt: str):
        table = self.ctx.evaluator.evaluate(snap, "train", trials=1, salt=f"ahe/{salt}", label=f"train {salt}")
        self.means = ScoreMatrix.from_table(table, self.train_ids).avg_at_k()
        self.status, self.trace_refs = {}, {}
        for t, s, r in zip(table["task_id"].to_pylist(), table["status"].to_pylist(), table["trace_ref"].to_pylist()):
            self.status.setdefault(t, s)
            if r:
                self.trace_refs.setdefault(t, r)
        return table

    def adopt(self, snap: Snapshot) -> None:
        self.current, self.diagnosis = snap, (None, {})
        entry = {
            "index": len(self.lineage),
            "step": self.step,
            "snapshot_id": snap.snapshot_id,
            "parent_id": snap.parent_id,
            "train_mean": self.train_mean(),
        }
        self.lineage.append(entry)
        self.ctx.archive.append(entry)

    def train_mean(self) -> float:
        return sum(self.means.values()) / len(self.means) if self.means else 0.0

    def failures_first(self) -> list[str]:
        return [t for t in self.train_ids if not passes(self.means[t])] + [
            t for t in self.train_ids if passes(self.means[t])
        ]

    def score_lines(self) -> list[str]:
        return [f"- {t}: {self.means[t]:.3f} ({self.status[t]})" for t in self.train_ids]

    def trace(self, task_id: str) -> str:
        ref = self.trace_refs.get(task_id)
        if not ref:
            return "(no trace recorded)"
        return json.dumps(self.ctx.records.read_trace(ref), indent=1, ensure_ascii=False, default=str)

    # ---- resume --------------------------------------------------------------------------
    def extra_state(self) -> dict:
        return {
            "current": self.version.snapshot_id,
            "means": self.means,
            "status": self.status,
            "trace_refs": self.trace_refs,
            "last_round": self.last_round,
            "declined_edits": self.declined_edits,
            "archive": self.lineage,
        }

    def restore(self, state: dict) -> None:
        self.current = self.ctx.records.get_snapshot(state["current"])
        self.means, self.status, self.trace_refs = state["means"], state["status"], state["trace_refs"]
        self.last_round, self.declined_edits = state["last_round"], state["declined_edits"]
        self.lineage = state["archive"]
