"""DarwinX: preserve-and-extend search (docs/algorithms/darwinx.md).

A candidate joins the confirmed population only if, re-measured on the whole train pool, it
gains without losing what its lineage already solved. A cheap screen on a random subset
decides whether the full confirm is paid for; every measured candidate is archived (rejected
specialists included) so recombination can merge complementary abilities.

Mechanism port of the paper and the official Beagle code, not a reproduction of its
experiments. Differences from full Beagle: Snapshot + records instead of Git worktrees,
SQLite and a campaign supervisor (and a killed run resumes: ``rsi resume``); a fixed train
pool, numeric gates and a lineage solved invariant; uniform exploration; pairs ranked by the
size of the union of solved sets; one edit per step (no internal analyze/implement/review
loop); two-branch merges only; no verifier/anti-cheat and no teacher model.

Added here: parent and candidate measurements (and all ``parallel_candidates`` of a
round) run concurrently on the cluster, decided in candidate order; each confirm also reports
a paired uncertainty figure (sign test, bootstrap interval).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from algorithms.darwinx import _prompts
from algorithms.darwinx.candidate import Candidate, common_ancestor
from algorithms.darwinx.gate_stats import gate_figures, paired_uncertainty, screen_passes, screen_reason, solved_set
from algorithms.darwinx.islands import Islands
from algorithms.darwinx.params import DarwinXParams
from algorithms.slots import (
    TOLERANCE,
    ExploreOrBestLineage,
    best_held_out,
    build_rule,
    resolve_slot,
    train_shortlist,
)
from rsi.algorithm import Algorithm
from rsi.decisions import Decision
from rsi.errors import ConfigError
from rsi.prompting import evidence, render
from rsi.records import dumps
from rsi.results import Request, ScoreMatrix
from rsi.snapshot import Snapshot
from rsi.workers.base import REF_DIR, EditResult


@dataclass
class Proposal:
    step: int
    kind: str  # mutation | recombination
    parent: Candidate
    donor: Candidate | None = None  # recombination's donor: the gates measure against it too
    candidate: Candidate | None = None  # None: the edit was declined
    graft: Candidate | None = None  # a mutation's donor of parts (``graft_probability``); not a gate reference

    @property
    def committed(self) -> Candidate:
        """The candidate of a proposal whose edit was committed (the ones measured)."""
        if self.candidate is None:
            raise ValueError(f"the proposal of step {self.step} has no committed candidate")
        return self.candidate


def configured_policies(params: DarwinXParams) -> dict[str, Any]:
    """The rule in each of DarwinX's decision slots, as ``params`` configure them: a slot left
    out takes its default, and a parent rule named without its parameters takes the algorithm's
    ``exploration_probability`` and ``explore_top``, not the rule's own defaults."""
    specs = dict(params.policies)
    if specs.get("parent_selection", {}).get("rule") == "explore_or_best_lineage":
        specs["parent_selection"] = {
            "exploration_probability": params.exploration_probability,
            "explore_top": params.explore_top,
            **specs["parent_selection"],
        }
    built = {name: build_rule(name, spec) for name, spec in specs.items()}
    built.setdefault("parent_selection", ExploreOrBestLineage(params.exploration_probability, params.explore_top))
    return {
        name: resolve_slot(name, built.get(name))
        for name in ("parent_selection", "screen_sampling", "acceptance", "merge_pairing", "promotion")
    }


class DarwinX(Algorithm):
    Params = DarwinXParams
    requires_splits = ("train",)
    worker_kind = "agent"

    @classmethod
    def check_benchmark(cls, benchmark, params=None) -> None:
        super().check_benchmark(benchmark, params)
        n = len(benchmark.split("train"))
        if params is not None and params.screen_size > n:
            raise ConfigError(
                f"algorithm.screen_size ({params.screen_size}) is larger than the train split ({n} tasks)"
            )
        if params is not None and params.promote_on_dev and not benchmark.split("dev"):
            raise ConfigError(
                f"algorithm.promote_on_dev: benchmark {benchmark.name} has no dev tasks to choose the promoted member on"
            )

    def __init__(self, ctx, params: DarwinXParams):
        super().__init__(ctx, params)
        self.p = params
        self.rng = random.Random(params.seed)  # the spec's own seed; saved by the base state
        policies = configured_policies(params)
        self.parent_selection = policies["parent_selection"]
        self.screen_sampling = policies["screen_sampling"]
        self.acceptance = policies["acceptance"]
        self.merge_pairing = policies["merge_pairing"]
        self.promotion = policies["promotion"]
        self.train_ids = ctx.evaluator.split_ids("train")
        self.archive: list[Candidate] = []
        self._distil_queue: list[tuple[Proposal, str]] = []  # candidates awaiting their distil reply
        self.declined: list[dict] = []
        self.tried_pairs: set[tuple[str, str]] = set()
        self.islands = Islands(params.restart_after, params.islands)

    # ---- the loop (the base runs it: seed, then step_once until max_steps, then finish) ------
    def step_once(self) -> None:
        """One round: ``parallel_candidates`` proposals (a step each), measured together."""
        n = min(self.p.parallel_candidates, self.p.max_steps - self.step)
        proposals = self.propose(n)
        self.measure(proposals)
        self.step = proposals[-1].step
        self.islands.observe(p.candidate for p in proposals if p.candidate is not None)
        for lane in self.islands.due(self.step, self.p.max_steps):
            self._restart(lane)

    def seed(self) -> None:
        snap = self.ctx.seed_snapshot
        table = self.ctx.evaluator.evaluate(snap, "train", trials=self.p.confirm_samples, salt="seed", label="seed")
        self.require_seed_runs(table)
        seed = Candidate(0, snap, 0, "seed", level="seed", admitted=True)
        seed.means = self._means(table)
        seed.solved = solved_set(seed.means, self.p.solved_threshold)
        seed.invariant = set(seed.solved)
        seed.trace_refs = self._trace_refs(table)
        self.archive.append(seed)
        self.ctx.archive.append(seed.record())
        self.islands.start(seed.train_mean)
        self.decide(
            "seed",
            snap.snapshot_id,
            None,
            accepted=True,
            reason=f"train mean {seed.train_mean:.4f}",
            reason_code="seed",
            level="confirm",
            train_mean=seed.train_mean,
            means=seed.means,
            samples=self.p.confirm_samples,
            solved=sorted(seed.solved),
        )

    def propose(self, n: int) -> list[Proposal]:
        """Choose parents (or merge pairs) in order, then let the workers edit concurrently."""
        proposals: list[Proposal] = []
        jobs: list[tuple[Snapshot, str, dict[str, Snapshot] | None]] = []
        for j in range(n):
            step = self.step + 1 + j
            merging = self.p.merge_every and self.islands.own_step(step) % self.p.merge_every == 0
            pair = self._next_pair() if merging else None
            if pair:
                main, donor = pair
                ancestor = common_ancestor(main, donor, self._by_id())
                prop = Proposal(step, "recombination", main, donor)
                self.decide(
                    "merge",
                    None,
                    main.snapshot_id,
                    step=step,
                    donor_id=donor.snapshot_id,
                    reason=f"recombine with {donor.snapshot_id} (ancestor {ancestor.snapshot_id})",
                    reason_code="recombine",
                    ancestor_id=ancestor.snapshot_id,
                    union=len(main.solved | donor.solved),
                )
                refs = {"ancestor": ancestor.snapshot, "donor": donor.snapshot}
                prompt = self._recombine_prompt(main, donor, ancestor)
                self.record_prompt("recombine", prompt, step=step)
                jobs.append((main.snapshot, prompt, refs))
            else:
                lane = self.islands.lane(step)
                parent = self._select_parent(lane)
                graft = self._graft_donor(parent, lane)
                prop = Proposal(step, "mutation", parent, graft=graft)
                prompt = self._mutate_prompt(parent, graft)
                self.record_prompt("mutate", prompt, step=step)
                jobs.append((parent.snapshot, prompt, {"donor": graft.snapshot} if graft else None))
            proposals.append(prop)
        results = self.workers.edit_many(jobs)
        known = {c.snapshot_id for c in self.archive}
        children = self._commit_all(proposals, jobs, results, known)
        for prop, (child, reply) in zip(proposals, children):
            if child is not None:
                known.add(child.snapshot_id)
                prop.candidate = Candidate(
                    len(self.archive) + len([p for p in proposals if p.candidate]),
                    child,
                    prop.step,
                    prop.kind,
                    parent_id=prop.parent.snapshot_id,
                    donor_id=prop.donor.snapshot_id if prop.donor else None,
                    graft_id=prop.graft.snapshot_id if prop.graft else None,
                    reply=reply,
                    island=self.islands.current[self.islands.lane(prop.step)],
                )
        return proposals

    def measure(self, proposals: list[Proposal]) -> None:
        """Screen every valid candidate, confirm the ones that pass; decide in candidate order.
        A candidate's confirm starts as soon as its own screen is in, while the other screens
        still run: whether it passes depends only on its screen and on the archive as it stood
        at the start of the round, so the decisions are those of screening all, then confirming."""
        live = [p for p in proposals if p.candidate is not None]
        subsets = {p.step: self.screen_sampling.sample(self.train_ids, self.p.screen_size, self.rng) for p in live}

        def confirm_if_passed(i: int, tables: list) -> list[Request]:
            p = live[i]
            if not self._screen_verdict(p, *self._sides(p, tables)[:3])[0]:
                return []
            return self._requests(p, "confirm", None, self.p.confirm_samples)

        screen_tables, confirm_tables = self.ctx.evaluator.evaluate_chained(
            [self._requests(p, "screen", subsets[p.step], self.p.screen_samples) for p in live],
            confirm_if_passed,
            label="screen and confirm",
        )
        passed = []
        for p, tables, confirm in zip(live, screen_tables, confirm_tables):
            cand, primary, reference, _ = self._sides(p, tables)
            ok, gain, regression, code, reason = self._screen_verdict(p, cand, primary, reference)
            p.committed.screen_means, p.committed.level = cand, "screen"
            self.decide(
                "screen",
                p.committed.snapshot_id,
                p.parent.snapshot_id,
                accepted=ok,
                step=p.step,
                donor_id=p.committed.donor_id,
                **({"graft_id": p.committed.graft_id} if p.committed.graft_id else {}),
                reason_code=code,
                reason=reason,
                level="screen",
                tasks=subsets[p.step],
                samples=self.p.screen_samples,
                means=cand,
                parent_means=primary,
                reference_means=reference,
                gain=gain,
                regression_mass=regression,
            )
            if ok:
                passed.append((p, confirm))
            else:
                p.committed.gain, p.committed.regression_mass = gain, regression
                self._archive(p, improved=[t for t in cand if cand[t] > primary[t]], regressed=[])
        for p, confirm in passed:
            self._confirm(p, *self._sides(p, confirm))
        self._archive_queued()

    def _screen_verdict(self, p: Proposal, cand: dict, primary: dict, reference: dict):
        """``(passed, gain, regression mass, reason code, reason)`` of a candidate's screen: a
        function of its screen scores and the archive (unchanged within a round) only."""
        ok, gain, regression = screen_passes(cand, primary, reference, self.p.screen_regression_tolerance)
        code, reason = screen_reason(ok, cand, primary, regression, self.p.screen_regression_tolerance)
        twin = self._known_twin(p, cand) if ok and self.p.decline_known_screens else None
        if twin is not None:
            ok, code = False, "screen_matches_known"
            reason = f"screen scores equal those of {twin.snapshot_id}, already measured"
        return ok, gain, regression, code, reason

    def finish(self) -> Snapshot:
        members = [c.member() for c in self.archive]
        kept = {"archive": [c.record() for c in self.archive], "declined_edits": self.declined}
        if self.p.promote_on_dev:
            return self._promote_on_dev(members, kept)
        best_id = self.promotion.choose(members).member_id
        best = next(c for c in self.archive if c.snapshot_id == best_id)
        return self.promote(
            best.snapshot,
            f"highest train mean {best.train_mean:.4f} among confirmed members",
            reason_code="highest_train_mean",
            train_mean=best.train_mean,
            **kept,
        )

    def _promote_on_dev(self, members: list, kept: dict) -> Snapshot:
        """The final choice on instances no gate saw: every gate selected on train, so the highest
        train mean also rewards fitting those instances. The shortlist is measured on dev at once
        (a resumed run reads the stored rows back: same salt)."""
        shortlist = train_shortlist(members, self.p.promote_on_dev)
        by_id = {c.snapshot_id: c for c in self.archive}
        tables = self.ctx.evaluator.evaluate_many(
            [
                Request(by_id[m.member_id].snapshot, "dev", trials=self.p.confirm_samples, salt="promote-dev")
                for m in shortlist
            ],
            label="promotion on dev",
        )
        dev = {m.member_id: ScoreMatrix.from_table(t).mean() for m, t in zip(shortlist, tables)}
        best = by_id[best_held_out(shortlist, dev).member_id]
        return self.promote(
            best.snapshot,
            f"highest dev mean {dev[best.snapshot_id]:.4f} among the {len(shortlist)} confirmed members with the "
            f"highest train means (its train mean {best.train_mean:.4f})",
            reason_code="highest_dev_mean",
            train_mean=best.train_mean,
            dev_mean=dev[best.snapshot_id],
            shortlist=[
                {"snapshot_id": m.member_id, "train_mean": m.train_mean, "dev_mean": dev[m.member_id]}
                for m in shortlist
            ],
            **kept,
        )

    # ---- gates ---------------------------------------------------------------------------
    def _confirm(self, p: Proposal, cand: dict, primary: dict, reference: dict, tables) -> None:
        c = p.committed
        inherited = set(p.parent.invariant)
        if p.donor is not None:
            inherited |= p.donor.invariant | p.parent.solved | p.donor.solved
        figures = gate_figures(
            cand, primary, reference, inherited, self.p.solved_threshold, self.p.regression_tolerance
        )
        passes_gate = self.acceptance.accept(figures)
        below_ratio = figures.regression_mass > TOLERANCE and figures.gain < (
            self.p.regression_gain_ratio * figures.regression_mass - TOLERANCE
        )
        admitted = passes_gate and not below_ratio
        c.level, c.means, c.admitted = "confirm", cand, admitted
        c.gain, c.regression_mass = figures.gain, figures.regression_mass
        c.solved = solved_set(cand, self.p.solved_threshold)
        c.invariant = inherited | c.solved
        c.lineage_gain = p.parent.lineage_gain + figures.gain
        c.trace_refs = self._trace_refs(tables[-1])
        code, reason = (
            ("admitted", "admitted: gains and preserves the lineage")
            if admitted
            else ("lost_solved", "lost solved tasks")
            if figures.lost_invariant
            else ("regression_over_tolerance", "regression over tolerance")
            if figures.regression_mass > self.p.regression_tolerance + 1e-12
            else ("gain_below_ratio", f"gain under {self.p.regression_gain_ratio:g} x regression")
            if passes_gate
            else ("no_gain", "no gain")
        )
        self.decide(
            "confirm",
            c.snapshot_id,
            p.parent.snapshot_id,
            accepted=admitted,
            step=p.step,
            donor_id=c.donor_id,
            **({"graft_id": c.graft_id} if c.graft_id else {}),
            reason_code=code,
            reason=reason,
            level="confirm",
            samples=self.p.confirm_samples,
            means=cand,
            parent_means=primary,
            reference_means=reference,
            gain=figures.gain,
            regression_mass=figures.regression_mass,
            lost_invariant=list(figures.lost_invariant),
            train_mean=c.train_mean,
            uncertainty=paired_uncertainty(cand, primary, seed=p.step),
        )
        self._archive(
            p,
            improved=[t for t in cand if cand[t] > primary[t] + 1e-12],
            regressed=[t for t in cand if cand[t] < reference[t] - 1e-12],
            lost=list(figures.lost_invariant),
        )

    @staticmethod
    def _roles(p: Proposal) -> list[tuple[str, Snapshot]]:
        sides = [("parent", p.parent.snapshot)]
        if p.donor is not None:
            sides.append(("donor", p.donor.snapshot))
        return [*sides, ("candidate", p.committed.snapshot)]

    def _requests(self, p: Proposal, level: str, tasks, samples: int) -> list[Request]:
        """Parent (and donor) and candidate of one proposal, measured together."""
        return [Request(snap, "train", tasks, samples, f"s{p.step}/{level}/{role}") for role, snap in self._roles(p)]

    def _sides(self, p: Proposal, tables: list) -> tuple[dict, dict, dict, list]:
        """``(candidate means, parent means, reference means, tables)`` of one proposal's
        measurement; the reference is the parent, or per task the better of parent and donor."""
        means = {role: self._means(t) for (role, _), t in zip(self._roles(p), tables)}
        reference = means["parent"]
        if "donor" in means:
            reference = {t: max(means["parent"][t], means["donor"][t]) for t in reference}
        return means["candidate"], means["parent"], reference, tables

    # ---- pieces --------------------------------------------------------------------------
    def _known_twin(self, p: Proposal, cand: dict[str, float]) -> Candidate | None:
        """The first version measured on the whole pool (seed or confirm), other than the
        proposal's parent and donor, with exactly the candidate's scores on every screen task:
        the candidate returns to a known behaviour, a confirm would measure nothing new."""
        skip = {p.parent.snapshot_id, p.donor.snapshot_id if p.donor else None}
        for c in self.archive:
            if c.snapshot_id in skip or c.level not in ("seed", "confirm"):
                continue
            if all(t in c.means and abs(c.means[t] - v) <= TOLERANCE for t, v in cand.items()):
                return c
        return None

    def _graft_donor(self, parent: Candidate, lane: int) -> Candidate | None:
        """With ``graft_probability``, another admitted member of the parent's island, drawn
        uniformly, for the worker to take a part from (subtree crossover for the offline mutator).
        No draw at all when the option is off, so such runs repeat exactly."""
        if not self.p.graft_probability or self.rng.random() >= self.p.graft_probability:
            return None
        others = [
            c
            for c in self.archive
            if c.admitted and c.kind != "seed" and c.snapshot_id != parent.snapshot_id and self.islands.holds(c, lane)
        ]
        return self.rng.choice(others) if others else None

    def _select_parent(self, lane: int) -> Candidate:
        members = [c.member() for c in self.archive if self.islands.holds(c, lane)]
        chosen = self.parent_selection.select(members, self.rng)
        return next(c for c in self.archive if c.snapshot_id == chosen.member_id)

    def _restart(self, lane: int) -> None:
        """A new island in ``lane`` (``islands.py``), from the seed or from the best member of the
        other islands (``restart_from``); the stalled one stays in the archive."""
        stalled = self.step - self.islands.best_step[lane]
        left, old = self.islands.best_mean[lane], self.islands.current[lane]
        start = self.archive[0]
        if self.p.restart_from == "best":
            others = [c for c in self.archive if c.admitted and c.level == "confirm" and c.island != old]
            best = max(others, key=lambda c: c.train_mean, default=None)
            if best is None or best.train_mean <= left + TOLERANCE:
                self.islands.wait(lane, self.step)  # this lane holds the best: it goes on
                return
            start = best
        founder = None if start.kind == "seed" else start.snapshot_id
        self.islands.restart(lane, self.step, start.train_mean, founder)
        new = self.islands.current[lane]
        origin = "the seed" if founder is None else f"{founder} of island {start.island} ({start.train_mean:.4f})"
        self.decide(
            "restart",
            start.snapshot_id,
            None,
            step=self.step,
            reason=f"no rise of island {old}'s best train mean ({left:.4f}) in {stalled} steps; "
            f"island {new} starts from {origin}",
            reason_code="stalled",
            island=new,
            left_island=old,
            left_mean=left,
            lane=lane,
        )

    def _next_pair(self) -> tuple[Candidate, Candidate] | None:
        by_id = self._by_id()
        confirmed = [c for c in self.archive if c.level in ("confirm", "seed")]
        for primary, donor in self.merge_pairing.pairs([c.entry() for c in confirmed]):
            main, other = by_id[primary.entry_id], by_id[donor.entry_id]
            if not main.admitted and other.admitted:
                main, other = other, main
            low, high = sorted((main.snapshot_id, other.snapshot_id))
            key = (low, high)
            if main.admitted and key not in self.tried_pairs:
                self.tried_pairs.add(key)
                return main, other
        return None

    def _commit_all(self, proposals: list[Proposal], jobs: list, results: list[EditResult], known: set[str]):
        """Commit every edit of a round in order; an edit that reproduces a known version is
        asked again (all of them of one retry at once) up to ``duplicate_retries`` times, and
        only then declined as a duplicate. Committed children join ``known`` as they come."""
        out: list[tuple[Snapshot | None, str]] = [(None, "")] * len(proposals)
        pending = list(range(len(proposals)))
        for attempt in range(self.p.duplicate_retries + 1):
            last = attempt == self.p.duplicate_retries
            again = []
            for k in pending:
                prop, edited = proposals[k], results[k]
                # A merge is deterministic: asking again would reproduce the same version.
                final = last or prop.kind == "recombination"
                child = self._commit(prop, edited, edited.reply, known, decline_duplicate=final, retries=attempt)
                if child == "again":
                    again.append(k)
                    continue
                if isinstance(child, Snapshot):
                    known.add(child.snapshot_id)
                out[k] = (child if isinstance(child, Snapshot) else None, edited.reply)
            if not again:
                break
            for k, edited in zip(again, self.workers.edit_many([jobs[k] for k in again])):
                results[k] = edited
            pending = again
        return out

    def _commit(
        self,
        prop: Proposal,
        edited: EditResult,
        reply: str,
        known: set[str],
        decline_duplicate: bool = True,
        retries: int = 0,
    ) -> Snapshot | str | None:
        """The child, None when declined, or "again" for a duplicate that may be retried."""
        child = self.commit_or_decline(
            prop.parent.snapshot,
            edited,
            ignore=(REF_DIR,),
            step=prop.step,
            kind_of_edit=prop.kind,
            donor_id=prop.donor.snapshot_id if prop.donor else None,
        )
        if isinstance(child, Decision):
            self.declined.append(
                {
                    "step": prop.step,
                    "parent_id": prop.parent.snapshot_id,
                    "reason": child.reason,
                    "reply": reply[-2000:],
                }
            )
            return None
        if child.snapshot_id in known:
            if not decline_duplicate:
                return "again"
            self.decide(
                "decline",
                child.snapshot_id,
                prop.parent.snapshot_id,
                accepted=False,
                step=prop.step,
                reason="duplicate",
                reason_code="duplicate",
                detail="the edit reproduced a version already measured"
                + (f" (after {retries} retries of the edit)" if retries else ""),
            )
            self.declined.append({"step": prop.step, "parent_id": prop.parent.snapshot_id, "reason": "duplicate"})
            return None
        return child

    def _archive(self, p: Proposal, improved: list, regressed: list, lost: list | None = None) -> None:
        """Queue ``p`` for the archive with its distil question; ``_archive_queued`` asks the
        round's questions at once (one model latency, not one per candidate) and appends the
        candidates in the order they were queued."""
        c = p.committed
        prompt = render(
            _prompts.DISTIL,
            reply=c.reply[-2000:] or "(none)",
            level=c.level,
            admitted=c.admitted,
            gain=_fmt(c.gain),
            regression=_fmt(c.regression_mass),
            lost=lost or "none",
            improved=improved or "none",
            regressed=regressed or "none",
        )
        self.record_prompt("distil", prompt, step=p.step)
        self._distil_queue.append((p, prompt))

    def _archive_queued(self) -> None:
        queued, self._distil_queue = self._distil_queue, []
        if not queued:
            return
        replies = self.workers.ask_many([prompt for _, prompt in queued], replicas=[p.step for p, _ in queued])
        for (p, _), (learning, _usage) in zip(queued, replies):
            c = p.committed
            c.learning = learning
            self.archive.append(c)
            c.index = len(self.archive) - 1
            self.ctx.archive.append(c.record())

    def _means(self, table) -> dict[str, float]:
        return ScoreMatrix.from_table(table).avg_at_k()

    @staticmethod
    def _trace_refs(table) -> dict[str, list[str]]:
        refs: dict[str, list[str]] = {}
        for t, r in zip(table["task_id"].to_pylist(), table["trace_ref"].to_pylist()):
            if r:
                refs.setdefault(t, []).append(r)
        return refs

    def _by_id(self) -> dict[str, Candidate]:
        return {c.snapshot_id: c for c in self.archive}

    # ---- prompts -------------------------------------------------------------------------
    def _mutate_prompt(self, parent: Candidate, graft: Candidate | None = None) -> str:
        budget = self.p.max_evidence_chars
        comps = self.ctx.seed_snapshot.components
        donor = ""
        if graft is not None:
            donor = render(
                _prompts.GRAFT_NOTE,
                donor_id=graft.snapshot_id,
                donor_mean=f"{graft.train_mean:.4f}",
                donor_path=f"{REF_DIR}/donor",
            )
        return render(
            _prompts.MUTATE,
            parent_id=parent.snapshot_id,
            donor=donor,
            confirm_samples=self.p.confirm_samples,
            regression_tolerance=self.p.regression_tolerance,
            solved_threshold=self.p.solved_threshold,
            invariant=sorted(parent.invariant) or "none yet",
            scope=self.ctx.config.run.target.evolve_scope,
            components=comps.table(),
            traces=self._traces_evidence(parent, budget),
            archive=_newest_first([_archive_line(c) for c in self.archive], budget),
            learnings=_newest_first([f"- [{c.snapshot_id}] {c.learning}" for c in self.archive if c.learning], budget),
        )

    def _recombine_prompt(self, main: Candidate, donor: Candidate, ancestor: Candidate) -> str:
        return render(
            _prompts.RECOMBINE,
            main_id=main.snapshot_id,
            ancestor_path=f"{REF_DIR}/ancestor",
            ancestor_id=ancestor.snapshot_id,
            donor_path=f"{REF_DIR}/donor",
            donor_id=donor.snapshot_id,
            donor_only=sorted(donor.solved - main.solved) or "none",
            components=self.ctx.seed_snapshot.components.table(),
            invariant=sorted(main.invariant | donor.invariant | main.solved | donor.solved) or "none",
        )

    def _traces_evidence(self, parent: Candidate, budget: int) -> str:
        """Raw traces of the parent's measurement, failures first, within the budget."""
        order = sorted(parent.means, key=lambda t: parent.means[t])
        blocks = []
        for t in order:
            for ref in parent.trace_refs.get(t, [])[:1]:
                try:
                    trace = self.ctx.records.read_trace(ref)
                except (OSError, ValueError, IndexError):
                    continue
                blocks.append(f"### {t} (avg score {parent.means[t]:.3f})\n{dumps(trace)[:4000]}")
        # Failures come first and are kept first: they are what the next edit must fix.
        return evidence(blocks, budget, keep="first", sep="\n") if blocks else "(no traces recorded)"

    # ---- resume --------------------------------------------------------------------------
    def extra_state(self) -> dict:
        return {
            "archive": [c.record() for c in self.archive],
            "declined": self.declined,
            "tried_pairs": sorted(self.tried_pairs),
            "islands": self.islands.state(),
        }

    def restore(self, state: dict) -> None:
        self.archive = [
            Candidate.from_record(r, self.ctx.records.get_snapshot(r["snapshot_id"])) for r in state["archive"]
        ]
        self.declined = state["declined"]
        self.tried_pairs = {tuple(p) for p in state["tried_pairs"]}
        self.islands = Islands.from_state(self.p.restart_after, self.p.islands, state.get("islands"))


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def _archive_line(c: Candidate) -> str:
    return (
        f"- {c.snapshot_id} ({c.kind}, parent {c.parent_id or '-'}{', donor ' + c.donor_id if c.donor_id else ''}"
        f"{', grafted from ' + c.graft_id if c.graft_id else ''}): "
        f"level {c.level}, admitted {c.admitted}, train mean {c.train_mean:.4f}, gain {_fmt(c.gain)}, "
        f"regression {_fmt(c.regression_mass)}; {c.reply.strip()[:300]}"
    )


def _newest_first(items: list[str], budget: int) -> str:
    """Newest (last) first; whole entries until the budget, then a marked cut."""
    return evidence(list(reversed(items)), budget, keep="first", sep="\n") if items else "(empty)"
