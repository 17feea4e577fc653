"""meta-evolve: evolve the tree search's node-selection rule (docs/algorithms/meta.md).

The outer artifact is the value of a decision slot (``policy.py`` of a ``policy`` target); one
outer rollout is one whole inner search with that value; its score is the meta-reward. Each
round:

1. the proposer (the offline symbolic mutator, or an LLM reflector that sees the rule and the
   incumbent's inner curves) writes ``candidates_per_round`` rules;
2. each proposal is judged in one place (``validate_proposal``): an invalid one is counted in
   ``invalid_proposals`` and yields no candidate, never a replacement. The proposal is hostile
   code: its AST layers run here, its build and smoke test in the rollout jail, and its inner
   searches ask it for each selection in the jail (``algorithms.meta.jailed``);
3. every valid candidate is measured on the gate hold-out (train), all of them concurrently,
   paired by instance and seed against the incumbent; ``paired_gate`` accepts only a gain that
   is positive and at least ``z_gate`` standard errors;
4. a gate-passing candidate must confirm its gain on the oracle set (dev, fresh instances)
   before it becomes the incumbent; of several, the one with the largest confirmed gain wins.

Every round prints one line (proposals, best gain ± SE, decision, elapsed) and records its
figures, so a run is never silent between its plan and its summary. After the runner's single
test measurement, ``after_test`` writes the validation report (``algorithms.meta.validation``).

Differences from the seed: proposals of a round are gated concurrently on the cluster (not one
per sweep); merge/conflict resolution of several accepted rules is not done (one incumbent per
round); the gate statistic is a paired z-test, not the engine's Beta-posterior gate.
"""

from __future__ import annotations

import math
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from algorithms.meta import _prompts
from algorithms.meta.benchmark import MetaBenchmark
from algorithms.meta.mutate import mutate_priority
from algorithms.meta.params import MetaEvolveParams
from algorithms.meta.stats import GateResult, paired_gate, required_holdout
from algorithms.meta.target import POLICY_FILE, SLOT, defines_policy_class, value_kind
from algorithms.meta.values import validate_proposal
from algorithms.slots import slot
from rsi.algorithm import Algorithm
from rsi.errors import ConfigError
from rsi.prompting import render
from rsi.results import Request, ScoreMatrix
from rsi.snapshot import Snapshot


@dataclass
class Candidate:
    text: str
    snapshot: Snapshot
    gate: GateResult | None = None
    oracle: GateResult | None = None
    refs: dict | None = None
    scores: list[float] | None = None

    # ``gate`` and ``scores`` are set by ``MetaEvolve.gate`` for every measured candidate,
    # ``oracle`` by ``MetaEvolve.confirm`` for every gate pass: these read them once set.
    @property
    def gate_result(self) -> GateResult:
        if self.gate is None:
            raise ValueError(f"candidate {self.snapshot.snapshot_id} has not been gated")
        return self.gate

    @property
    def oracle_result(self) -> GateResult:
        if self.oracle is None:
            raise ValueError(f"candidate {self.snapshot.snapshot_id} has not been confirmed")
        return self.oracle

    @property
    def gate_scores(self) -> list[float]:
        if self.scores is None:
            raise ValueError(f"candidate {self.snapshot.snapshot_id} has not been gated")
        return self.scores


def figures(g: GateResult | None, prefix: str = "") -> dict:
    """A gate result as decision-record fields (an unknown SE is recorded as null)."""
    if g is None:
        return {}
    fin = lambda v: float(v) if math.isfinite(v) else None  # noqa: E731
    return {
        f"{prefix}gain": fin(g.mean_gain),
        f"{prefix}se": fin(g.se),
        f"{prefix}z": fin(g.z),
        f"{prefix}n": g.n,
        f"{prefix}wins": g.wins,
        f"{prefix}losses": g.losses,
    }


def fmt_gate(g: GateResult) -> str:
    return f"gain {g.mean_gain:+.4f} ± {g.se:.4f} (z {g.z:.1f}, {g.wins}/{g.losses} wins/losses over {g.n} pairs)"


def extract_rule(reply: str) -> str:
    """The last fenced code block of a reply, else the reply itself (the gate then judges it)."""
    blocks = re.findall(r"```(?:python|py)?[ \t]*\n(.*?)```", reply, flags=re.S)
    return (blocks[-1] if blocks else reply).strip() + "\n"


class MetaEvolve(Algorithm):
    Params = MetaEvolveParams
    requires_splits = ("train", "dev", "test")

    # ---- startup validation ------------------------------------------------------------------
    @classmethod
    def check_config(cls, resolved) -> None:
        p, run = resolved.algo_params, resolved.run
        try:
            slot(p.slot)
        except ConfigError as exc:
            raise ConfigError(f"algorithm.slot: {exc}") from None
        if p.slot != SLOT:
            raise ConfigError(
                f"algorithm.slot: {p.slot!r} is a decision slot, but the meta benchmarks run tree "
                f"searches, which consult only {SLOT}"
            )
        if run.target.kind != "policy":
            raise ConfigError(
                f"target.kind: the meta loop evolves a decision rule; use kind policy "
                f"(e.g. targets/meta_policy), not {run.target.kind!r}"
            )
        if p.proposer == "llm":
            if resolved.worker_cfg is None:
                raise ConfigError("algorithm.worker: proposer llm needs a worker (type llm) to write the rules")
            return
        if resolved.worker_cfg is not None:
            raise ConfigError(
                "algorithm.worker: proposer symbolic uses no worker; remove the worker block "
                "or set algorithm.proposer: llm"
            )
        rule = resolved.target_dir() / (run.target.entry or POLICY_FILE)
        if rule.is_file() and defines_policy_class(rule.read_text(errors="replace")):
            raise ConfigError(
                f"algorithm.proposer: symbolic mutates the narrow priority face, and {rule.name} "
                f"holds a class Policy; use proposer llm"
            )

    @classmethod
    def check_benchmark(cls, benchmark, params=None) -> None:
        if not isinstance(benchmark, MetaBenchmark):
            raise ConfigError(
                f"benchmark {benchmark.name!r}: the meta loop needs a meta benchmark (meta_landscape, meta_binpack)"
            )
        super().check_benchmark(benchmark, params)

    # ---- the loop ------------------------------------------------------------------------------
    def __init__(self, ctx, params: MetaEvolveParams):
        super().__init__(ctx, params)
        self.p = params
        self.entry = ctx.config.run.target.entry or POLICY_FILE
        #: The rollout jail's limits: a proposal's check runs there, like its rollouts.
        self.limits = ctx.config.run.target.limits
        self.train_ids = ctx.evaluator.split_ids("train")
        self.dev_ids = ctx.evaluator.split_ids("dev")
        self.incumbent = ctx.seed_snapshot
        self.incumbent_refs: dict = {}
        self.incumbent_scores: list[float] = []
        self.round = 0
        self.invalid_proposals = 0
        self.repeats = 0
        self.admitted: list[str] = []
        self.seen = {self.rule(self.incumbent)}
        self.history: list[dict] = []

    @property
    def meta_benchmark(self) -> MetaBenchmark:
        """The run's benchmark, a meta benchmark (``check_benchmark`` refuses any other)."""
        benchmark = self.ctx.benchmark
        if not isinstance(benchmark, MetaBenchmark):
            raise ConfigError(f"benchmark {benchmark.name!r}: the meta loop needs a meta benchmark")
        return benchmark

    # ---- the loop (the base runs it: seed, then a round per step until max_rounds, then finish) ---
    def seed(self) -> None:
        self.measure_seed()

    def done(self) -> bool:
        return self.round >= self.p.max_rounds

    def step_once(self) -> None:
        self.round += 1
        self.step = self.round
        self.one_round()

    def finish(self) -> Snapshot:
        sizing = self.holdout_sizing()
        advice = (
            ""
            if not sizing
            else (
                f"; median paired sd {sizing['paired_sd']:.4f}: a +0.01 gain at z {self.p.z_gate:g} needs "
                f"{sizing['holdout_for_gain']['0.01']} pairs (this gate holds {len(self.train_ids)})"
            )
        )
        return self.promote(
            self.incumbent,
            f"incumbent after {self.round} rounds ({len(self.admitted)} admitted, "
            f"{self.invalid_proposals} invalid proposals){advice}",
            reason_code="incumbent",
            rounds=self.round,
            admitted=self.admitted,
            invalid_proposals=self.invalid_proposals,
            repeats=self.repeats,
            rule=self.rule(self.incumbent),
            **sizing,
        )

    def holdout_sizing(self) -> dict:
        """The seed's first lesson, measured: how many hold-out pairs a gain needs at this run's
        paired sd (the median over measured candidates that differed from their incumbent)."""
        sds = [h["se"] * math.sqrt(h["n"]) for h in self.history if h.get("se")]
        if not sds:
            return {}
        sd = float(np.median(sds))
        return {
            "paired_sd": sd,
            "holdout_for_gain": {f"{g:g}": required_holdout(sd, g, self.p.z_gate) for g in (0.005, 0.01, 0.02)},
        }

    def measure_seed(self) -> None:
        (table,) = self.ctx.evaluator.evaluate_many([Request(self.incumbent, "train", salt="gate")], label="seed")
        self.incumbent_scores = self.vector(table, self.train_ids)
        self.incumbent_refs = self.refs(table)
        info = self.meta_benchmark.describe()
        self.decide(
            "seed",
            self.incumbent.snapshot_id,
            None,
            accepted=True,
            reason_code="seed",
            reason=f"seed rule: hold-out mean {np.mean(self.incumbent_scores):.4f} over "
            f"{len(self.train_ids)} pairs of {info['source']} (oracle {len(self.dev_ids)} pairs, "
            f"budget {info['budget']}, reward {info['reward']})",
            mean=float(np.mean(self.incumbent_scores)),
            n=len(self.train_ids),
            **info,
        )

    def one_round(self) -> None:
        t0 = time.monotonic()
        texts = self.propose(self.rule(self.incumbent))
        invalid_before, repeats_before = self.invalid_proposals, self.repeats
        verdicts = self.judge(texts)
        cands = [c for c in (self.candidate(t, verdicts.get(t)) for t in texts) if c is not None]
        self.gate(cands)
        confirmed = self.confirm([c for c in cands if c.gate_result.accepted])
        parent = self.incumbent
        best = max(confirmed, key=lambda c: c.oracle_result.mean_gain) if confirmed else None
        if best is not None:
            self.admit(best, parent)
        top = max(cands, key=lambda c: c.gate_result.z) if cands else None
        decision = (
            f"admitted {best.snapshot.snapshot_id}"
            if best
            else "not confirmed on the oracle set"
            if any(c.gate_result.accepted for c in cands)
            else "nothing passed the gate"
        )
        shown = f"best {fmt_gate(top.gate_result)}" if top else "no candidate measured"
        elapsed = time.monotonic() - t0
        self.decide(
            "round",
            self.incumbent.snapshot_id,
            parent.snapshot_id,
            accepted=best is not None,
            reason_code="admitted"
            if best
            else "not_confirmed"
            if any(c.gate_result.accepted for c in cands)
            else "nothing_passed",
            reason=f"round {self.round}/{self.p.max_rounds}: {len(texts)} proposed, {len(cands)} measured, "
            f"{self.invalid_proposals - invalid_before} invalid, {self.repeats - repeats_before} "
            f"repeated; {shown}; {decision}; {elapsed:.1f}s",
            round=self.round,
            proposed=len(texts),
            measured=len(cands),
            invalid=self.invalid_proposals - invalid_before,
            invalid_proposals=self.invalid_proposals,
            repeated=self.repeats - repeats_before,
            admitted=best.snapshot.snapshot_id if best else None,
            elapsed_s=round(elapsed, 3),
            **figures(top.gate if top else None, "best_"),
        )

    def admit(self, best: Candidate, parent: Snapshot) -> None:
        """``best`` becomes the incumbent: the ``admit`` decision with its gate figures (and the
        oracle's, when confirmed)."""
        if self.p.confirm:
            second, oracle = (
                f"oracle gain {best.oracle_result.mean_gain:+.4f} ± {best.oracle_result.se:.4f}",
                figures(best.oracle, "oracle_"),
            )
        else:
            second, oracle = "not confirmed (algorithm.confirm: false)", {}
        self.decide(
            "admit",
            best.snapshot.snapshot_id,
            parent.snapshot_id,
            accepted=True,
            reason_code="new_incumbent",
            reason=f"new incumbent: hold-out gain {best.gate_result.mean_gain:+.4f} ± {best.gate_result.se:.4f}, {second}",
            confirmed=self.p.confirm,
            round=self.round,
            **figures(best.gate),
            **oracle,
            rule=best.text,
        )
        self.incumbent, self.incumbent_refs, self.incumbent_scores = (
            best.snapshot,
            best.refs or {},
            best.gate_scores,
        )
        self.admitted.append(best.snapshot.snapshot_id)

    # ---- proposals -----------------------------------------------------------------------------
    def propose(self, source: str) -> list[str]:
        n = self.p.candidates_per_round
        if self.p.proposer == "symbolic":
            budget = self.meta_benchmark.params.budget
            return [mutate_priority(source, self.rng, budget=budget) for _ in range(n)]
        prompts = [self.reflect_prompt(source, i + 1, n) for i in range(n)]
        for i, prompt in enumerate(prompts):
            self.record_prompt(f"reflect-{i + 1}", prompt)
        return [extract_rule(reply) for reply, _usage in self.workers.ask_many(prompts)]

    def judge(self, texts: list[str]) -> dict[str, tuple]:
        """``validate_proposal`` of each new text of a round, the jailed checks run concurrently
        (each is a subprocess: a round waits for the slowest, not the sum). A text measured
        before is not judged again: it passed, and is a repeat."""
        todo = list(dict.fromkeys(t for t in texts if t not in self.seen))
        if len(todo) <= 1:
            return {t: validate_proposal(value_kind(t, self.limits), t) for t in todo}
        with ThreadPoolExecutor(max_workers=min(len(todo), 8)) as pool:
            verdicts = pool.map(lambda t: validate_proposal(value_kind(t, self.limits), t), todo)
            return dict(zip(todo, verdicts))

    def candidate(self, text: str, verdict: tuple | None = None) -> Candidate | None:
        """The one place a proposal is judged; what fails yields no candidate and is counted.
        The AST layers run here; the build and smoke test of the proposal run in the jail."""
        if verdict is None and text in self.seen:
            verdict = (True, "")
        ok, reason = verdict or validate_proposal(value_kind(text, self.limits), text)
        if not ok:
            self.invalid_proposals += 1
            self.decide(
                "invalid",
                None,
                self.incumbent.snapshot_id,
                accepted=False,
                reason=reason[:300],
                reason_code="invalid_proposal",
                round=self.round,
                invalid_proposals=self.invalid_proposals,
                proposal=text[:4000],
            )
            return None
        if text in self.seen:  # a valid rule measured before: nothing new to learn from it
            self.repeats += 1
            return None
        self.seen.add(text)
        tree = {path: (self.incumbent.read(path), entry.executable) for path, entry in self.incumbent.files.items()}
        tree[self.entry] = (text.encode(), self.incumbent.files[self.entry].executable)
        child = self.commit(self.incumbent, tree, round=self.round)
        return Candidate(text, child) if child is not None else None

    # ---- gates ---------------------------------------------------------------------------------
    def gate(self, cands: list[Candidate]) -> None:
        """Incumbent and every candidate on the hold-out, concurrently; paired by (instance, seed)."""
        if not cands:
            return
        reqs = [Request(self.incumbent, "train", salt="gate")]
        reqs += [Request(c.snapshot, "train", salt="gate") for c in cands]
        tables = self.ctx.evaluator.evaluate_many(reqs, label=f"round {self.round}: gate")
        base = self.vector(tables[0], self.train_ids)
        for c, table in zip(cands, tables[1:]):
            c.scores, c.refs = self.vector(table, self.train_ids), self.refs(table)
            c.gate = paired_gate(base, c.scores, self.p.z_gate)
            code, verdict = (
                ("gate_passed", "passes the gate")
                if c.gate.accepted
                else ("under_z_gate", f"positive but under {self.p.z_gate:g} SE")
                if c.gate.mean_gain > 0
                else ("no_gain", "no gain")
            )
            self.decide(
                "screen",
                c.snapshot.snapshot_id,
                self.incumbent.snapshot_id,
                accepted=c.gate.accepted,
                reason_code=code,
                reason=f"{fmt_gate(c.gate)}: {verdict}",
                round=self.round,
                level="gate",
                z_gate=self.p.z_gate,
                failed=self.failed(table),
                **figures(c.gate),
                rule=c.text,
            )
            self.history.append(
                {
                    "round": self.round,
                    "snapshot_id": c.snapshot.snapshot_id,
                    "rule": c.text,
                    **figures(c.gate),
                    "accepted": c.gate.accepted,
                }
            )

    def confirm(self, passed: list[Candidate]) -> list[Candidate]:
        """A gate pass becomes the incumbent only if the gain holds on fresh oracle instances.

        With ``confirm: false`` the gate's own figures stand in for the oracle's: a second opinion
        that reads the same numbers, which is how the seed's loop committed a losing rule."""
        if not passed:
            return []
        if not self.p.confirm:
            for c in passed:
                c.oracle = c.gate
            return passed
        reqs = [Request(self.incumbent, "dev", salt="oracle")] + [
            Request(c.snapshot, "dev", salt="oracle") for c in passed
        ]
        tables = self.ctx.evaluator.evaluate_many(reqs, label=f"round {self.round}: confirm")
        base = self.vector(tables[0], self.dev_ids)
        for c, table in zip(passed, tables[1:]):
            c.oracle = paired_gate(base, self.vector(table, self.dev_ids), self.p.z_gate)
            self.decide(
                "confirm",
                c.snapshot.snapshot_id,
                self.incumbent.snapshot_id,
                accepted=c.oracle.accepted,
                reason_code="confirmed" if c.oracle.accepted else "not_confirmed",
                reason=f"oracle {fmt_gate(c.oracle)}: {'confirmed' if c.oracle.accepted else 'not confirmed'}",
                round=self.round,
                level="oracle",
                z_gate=self.p.z_gate,
                **figures(c.oracle),
            )
        outcome = {c.snapshot.snapshot_id: c.oracle_result.accepted for c in passed}
        for h in self.history:
            if h["snapshot_id"] in outcome:
                h["confirmed"] = outcome[h["snapshot_id"]]
        return [c for c in passed if c.oracle_result.accepted]

    # ---- pieces ----------------------------------------------------------------------------------
    def rule(self, snapshot: Snapshot) -> str:
        return snapshot.text(self.entry)

    @staticmethod
    def vector(table, ids: list[str]) -> list[float]:
        means = ScoreMatrix.from_table(table, ids).avg_at_k()
        return [means[t] for t in ids]

    @staticmethod
    def refs(table) -> dict:
        return {t: r for t, r in zip(table["task_id"].to_pylist(), table["trace_ref"].to_pylist()) if r}

    @staticmethod
    def failed(table) -> int:
        return sum(s != "ok" for s in table["status"].to_pylist())

    def rule_snapshot(self, text: str) -> Snapshot:
        """The seed's tree with another rule (the c-sweep's hand-tuned rules); not a proposal."""
        seed = self.ctx.seed_snapshot
        if self.rule(seed) == text:
            return seed
        tree = {path: (seed.read(path), entry.executable) for path, entry in seed.files.items()}
        tree[self.entry] = (text.encode(), seed.files[self.entry].executable)
        snap = seed.commit_tree(tree, "*")
        self.ctx.records.put_snapshot(snap)
        return snap

    # ---- the reflector's prompt ------------------------------------------------------------------
    def reflect_prompt(self, source: str, index: int, count: int) -> str:
        budget = self.meta_benchmark.params.budget
        every = max(1, budget // 12)
        return render(
            _prompts.REFLECT,
            budget=budget,
            reward=self.meta_benchmark.params.reward,
            describe=value_kind(source).describe(),
            incumbent=source.strip(),
            every=every,
            traces=self.traces_evidence(every),
            pairs=len(self.train_ids),
            z_gate=self.p.z_gate,
            history=self.history_evidence(),
            index=index,
            count=count,
        )

    def traces_evidence(self, every: int) -> str:
        """Curves of the incumbent's searches, from its worst to its best hold-out pair."""
        if not self.incumbent_refs or self.p.traces_in_prompt == 0:
            return "(no traces recorded)"
        scored = sorted((s, t) for s, t in zip(self.incumbent_scores, self.train_ids) if t in self.incumbent_refs)
        k = min(self.p.traces_in_prompt, len(scored))
        picks = [scored[round(i * (len(scored) - 1) / max(1, k - 1))] for i in range(k)] if scored else []
        lines = []
        for score, task_id in picks:
            try:
                trace = self.ctx.records.read_trace(self.incumbent_refs[task_id])
            except (OSError, ValueError, IndexError, KeyError):
                continue
            curve = trace.get("curve", [])[::every]
            detail = trace.get("detail", {})
            lines.append(
                f"- {task_id}: meta-reward {score:.4f}; curve {curve}; tree nodes {detail.get('nodes')}, "
                f"max depth {detail.get('max_depth')}, rule faults {detail.get('faults')}"
            )
        return self.evidence("\n".join(lines), self.p.max_evidence_chars) if lines else "(no traces readable)"

    def history_evidence(self) -> str:
        out: list[str] = []
        used = 0
        for h in reversed(self.history):
            se = "?" if h["se"] is None else f"{h['se']:.4f}"
            oracle = "" if "confirmed" not in h else ", confirmed" if h["confirmed"] else ", not confirmed"
            line = (
                f"- round {h['round']}: gain {h['gain']:+.4f} ± {se}, "
                f"{'accepted' if h['accepted'] else 'rejected'}{oracle}\n```python\n{h['rule'].strip()}\n```"
            )
            if used + len(line) > self.p.max_evidence_chars:
                out.append(f"[... {len(self.history) - len(out)} older candidates cut ...]")
                break
            out.append(line)
            used += len(line)
        return "\n".join(out) or "(none yet)"

    # ---- after the runner's test measurement ---------------------------------------------------
    def after_test(self, promoted: Snapshot, test_table) -> dict:
        from algorithms.meta.validation import validation_report

        return validation_report(self, promoted, test_table)

    # ---- resume --------------------------------------------------------------------------------
    def extra_state(self) -> dict:
        return {
            "round": self.round,
            "incumbent": self.incumbent.snapshot_id,
            "incumbent_refs": self.incumbent_refs,
            "incumbent_scores": self.incumbent_scores,
            "invalid_proposals": self.invalid_proposals,
            "repeats": self.repeats,
            "admitted": self.admitted,
            "seen": sorted(self.seen),
            "history": self.history,
        }

    def restore(self, state: dict) -> None:
        self.round = state["round"]
        self.incumbent = self.ctx.records.get_snapshot(state["incumbent"])
        self.incumbent_refs, self.incumbent_scores = state["incumbent_refs"], state["incumbent_scores"]
        self.invalid_proposals, self.repeats = state["invalid_proposals"], state["repeats"]
        self.admitted, self.seen, self.history = state["admitted"], set(state["seen"]), state["history"]
