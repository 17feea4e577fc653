"""ADAS: Meta Agent Search over a growing archive, scored on dev (docs/algorithms/adas.md).

A meta agent reads the whole archive of evaluated designs (each one's account and dev score),
edits the harness directory into the next design, reviews its own files ``num_reflections``
times in the same checkout, and the design is evaluated once on dev and archived whether it
scored better or worse: the next prompt is written against the whole history, so a worse design
still says "tried, and this is what it cost". Only the leader moves by score (ties keep the
earlier design); at the end the best archived design is promoted with the whole archive. The
runner measures test once afterwards; test traces never reach the archive or any prompt.

Port of the search mechanism of ShengranHu/ADAS (Automated Design of Agentic Systems). The
upstream commit it follows is not pinned and has not been verified here.
Differences from upstream:

- The design is the harness directory, not a ``forward()`` code string in the upstream agent
  DSL, so the meta agent must be a worker that edits files (``worker.type: agent`` or another
  directory-editing worker); a text-only worker is rejected at startup.
- The archive has one seed, the target's current version with its dev score. The upstream
  baseline agents (chain-of-thought, self-consistency, reflexion, debate, ...) are
  architectures of that DSL and have no counterpart here, so none is invented.
- The description comes in a ``<DESIGN>`` block of the reply (``rsi.prompting.tagged``); an
  untagged reply is the whole description.
- Reflections revise files within one checkout (a worker edit session) and the result is
  committed and evaluated once; upstream reflection rewrote a code string in a chat.
- Changed paths come from the snapshot (``Snapshot.commit``/``changed_paths``), not from the
  worker; an empty edit, an unclassifiable new path or a leaked credential declines the round
  (``declined_designs``) and the run goes on.
- The full component rule table is in both prompts, since a new file must match exactly one
  rule.
- A harness that cannot run, or prints something other than its result object, is an
  ``error``/``protocol_error`` rollout scoring 0 and simply loses; it never ends the run.
- The fitness shown is the mean dev score, not upstream's bootstrap confidence interval.
"""

from __future__ import annotations

import json

from algorithms.adas import _prompts
from algorithms.adas.params import ADASParams
from rsi.algorithm import Algorithm
from rsi.decisions import Decision
from rsi.prompting import component_table, evidence, render, tagged
from rsi.results import ScoreMatrix
from rsi.snapshot import Snapshot
from rsi.workers.base import EditResult


class ADAS(Algorithm):
    Params = ADASParams
    requires_splits = ("dev",)
    worker_kind = "agent"

    def __init__(self, ctx, params: ADASParams):
        super().__init__(ctx, params)
        self.p = params
        # The archive is what prompts and the promote record see, as-is; the snapshots (the
        # only thing that can be checked out and promoted) are kept beside it, same index.
        self.archive: list[dict] = []
        self.snapshots: list[Snapshot] = []
        self.best: Snapshot | None = None
        self.best_score = 0.0
        self.declined_designs: list[dict] = []

    @property
    def leader(self) -> Snapshot:
        """The archive's leader: the seed's from ``seed`` on (or the one a resume restores)."""
        if self.best is None:
            raise RuntimeError("ADAS has no leader before the seed is measured")
        return self.best

    # ---- the loop (the base runs it: seed, then step_once until max_steps, then finish) ------
    def step_once(self) -> None:
        self.step += 1
        self.search_step()

    def seed(self) -> None:
        """The current version on dev is archive entry 0 and the first leader."""
        snap = self.ctx.seed_snapshot
        score = self.dev_score(snap, "seed", require_runs=True)
        self.decide(
            "seed",
            snap.snapshot_id,
            None,
            accepted=True,
            reason=f"dev score {score:.4f}",
            reason_code="seed",
            score=score,
            account=_prompts.SEED_ACCOUNT,
            archive_index=0,
        )
        self.add_to_archive(snap, _prompts.SEED_ACCOUNT, score)
        self.best, self.best_score = snap, score

    def search_step(self) -> None:
        parent = self.leader  # the archive leader (the earlier design on ties), not the last candidate
        with self.workers.session(0, parent) as session:
            account = self.described(session.edit(self.design_prompt(parent)), "")
            for r in range(1, self.p.num_reflections + 1):
                account = self.described(session.edit(self.reflect_prompt(r, account)), account)
            tree = session.tree()
        account = account or "(no description given)"
        child = self.commit_design(parent, tree, account)
        if child is None:
            return
        score = self.dev_score(child, f"s{self.step}")
        accepted = score > self.best_score
        reason = (
            f"dev score {score:.4f} > leader {self.best_score:.4f}: new leader"
            if accepted
            else f"dev score {score:.4f} <= leader {self.best_score:.4f}: archived, leader kept"
        )
        self.decide(
            "admit",
            child.snapshot_id,
            parent.snapshot_id,
            accepted=accepted,
            reason=reason,
            reason_code="new_leader" if accepted else "archived",
            score=score,
            leader_score=self.best_score,
            account=account,
            archive_index=len(self.archive),
        )
        self.add_to_archive(child, account, score)
        if accepted:
            self.best, self.best_score = child, score

    def finish(self) -> Snapshot:
        index = self.best_index()
        return self.promote(
            self.leader,
            f"highest dev score in the archive ({self.best_score:.4f})",
            reason_code="highest_dev_score",
            score=self.best_score,
            archive_index=index,
            archive=self.archive,
            archive_snapshot_ids=[s.snapshot_id for s in self.snapshots],
            declined_designs=self.declined_designs,
        )

    # ---- pieces --------------------------------------------------------------------------
    def dev_score(self, snap: Snapshot, salt: str, require_runs: bool = False) -> float:
        table = self.ctx.evaluator.evaluate(snap, "dev", trials=1, salt=f"adas/{salt}", label=f"dev {salt}")
        if require_runs:
            self.require_seed_runs(table)
        return ScoreMatrix.from_table(table).mean()

    @staticmethod
    def described(reply: str, previous: str) -> str:
        """The description a reply gives (the ``<DESIGN>`` block, else the whole reply); an empty
        reply gives none, and the last one given stands."""
        return tagged(reply, "DESIGN") if reply.strip() else previous

    def commit_design(self, parent: Snapshot, tree: EditResult, account: str) -> Snapshot | None:
        child = self.commit_or_decline(parent, tree, account=account)
        if isinstance(child, Decision):
            self.declined_designs.append(
                {
                    "step": self.step,
                    "parent_id": parent.snapshot_id,
                    "reason": child.reason,
                    "detail": child.figures.get("detail", ""),
                    "account": account,
                }
            )
            return None
        return child

    def add_to_archive(self, snap: Snapshot, account: str, score: float) -> None:
        self.archive.append({"account": account, "score": score})
        self.snapshots.append(snap)
        self.ctx.archive.append(
            {
                "index": len(self.archive) - 1,
                "step": self.step,
                "snapshot_id": snap.snapshot_id,
                "parent_id": snap.parent_id,
                "account": account,
                "score": score,
            }
        )

    def design_prompt(self, parent: Snapshot) -> str:
        text = render(
            _prompts.DESIGN,
            parent_id=parent.snapshot_id,
            parent_score=f"{self.best_score:.4f}",
            **self.evidence_blocks(),
        )
        self.record_prompt("design", text)
        return text

    def reflect_prompt(self, r: int, account: str) -> str:
        text = render(
            _prompts.REFLECT, round=r, rounds=self.p.num_reflections, account=account, **self.evidence_blocks()
        )
        self.record_prompt(f"reflect-{r}", text)
        return text

    def evidence_blocks(self) -> dict:
        """The archive (one JSON record per line, as archived) and the component rules, each
        within ``max_evidence_chars`` on its own; the oldest designs are cut first."""
        budget = self.p.max_evidence_chars
        components = self.ctx.seed_snapshot.components
        return {
            "archive_note": _prompts.ARCHIVE_NOTE,
            "archive": evidence([json.dumps(e, ensure_ascii=False) for e in self.archive], budget),
            "scope": ", ".join(sorted(components.resolve_scope(self.ctx.config.run.target.evolve_scope))),
            "components": evidence(component_table(components), budget),
        }

    def best_index(self) -> int:
        return next(i for i, s in enumerate(self.snapshots) if s is self.best)

    # ---- resume --------------------------------------------------------------------------
    def extra_state(self) -> dict:
        return {
            "archive": self.archive,
            "archive_snapshot_ids": [s.snapshot_id for s in self.snapshots],
            "best_index": self.best_index(),
            "declined_designs": self.declined_designs,
        }

    def restore(self, state: dict) -> None:
        self.archive = state["archive"]
        self.snapshots = [self.ctx.records.get_snapshot(i) for i in state["archive_snapshot_ids"]]
        self.best = self.snapshots[state["best_index"]]
        self.best_score = self.archive[state["best_index"]]["score"]
        self.declined_designs = state["declined_designs"]
