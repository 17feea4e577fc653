"""AHE's change manifest and the verdicts that hold it to account.

The Evolve Agent declares, in ``<MANIFEST>`` JSON, which files it changed and which train tasks
each change should flip (``fix_tasks``) or might break (``risk_tasks``). The declared paths must
equal the real diff, which comes from the snapshot, never from the worker. After the candidate
is re-measured on the same tasks, each declared change gets a verdict; regressions no change
predicted are reported apart, never folded into a change's verdict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, TypedDict

from rsi.prompting import tagged

REQUIRED = ("failure_evidence", "root_cause", "targeted_fix")
#: A task passes at full score: the verdicts talk about flips between fail and pass.
PASS_SCORE = 1.0


class ManifestError(ValueError):
    """An invalid manifest: ``reason`` is the decline reason, the message its detail."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


@dataclass
class Change:
    path: str
    fix_tasks: list[str]
    risk_tasks: list[str]


@dataclass
class Manifest:
    failure_evidence: list[str]
    root_cause: str
    targeted_fix: str
    changes: list[Change]

    def record(self) -> dict:
        return {
            "failure_evidence": self.failure_evidence,
            "root_cause": self.root_cause,
            "targeted_fix": self.targeted_fix,
            "changes": [{"path": c.path, "fix_tasks": c.fix_tasks, "risk_tasks": c.risk_tasks} for c in self.changes],
        }


def parse_manifest(reply: str, changed: list[str]) -> Manifest:
    """The reply's manifest checked against the real ``changed`` paths, or ManifestError.

    Without ``changes``, the top-level ``predicted_impact`` ({fix_tasks, risk_tasks}) expands to
    one change per changed file; a change without ``fix_tasks``/``risk_tasks`` inherits that
    overall prediction field by field; an explicit empty list is a prediction of its own.
    """
    try:
        data = json.loads(tagged(reply, "MANIFEST"))
    except json.JSONDecodeError as exc:
        raise ManifestError("manifest_not_json", f"the <MANIFEST> block is not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ManifestError("manifest_not_json", "the manifest must be one JSON object")
    missing = [k for k in REQUIRED if k not in data]
    if "changes" not in data and "predicted_impact" not in data:
        missing.append("changes (or predicted_impact)")
    if missing:
        raise ManifestError("manifest_missing_fields", f"missing: {', '.join(missing)}")
    overall = _object(data.get("predicted_impact", {}), "predicted_impact")
    default = {k: _tasks(overall.get(k, []), f"predicted_impact.{k}") for k in ("fix_tasks", "risk_tasks")}
    if "changes" in data:
        if not isinstance(data["changes"], list):
            raise ManifestError("manifest_missing_fields", "changes must be a list of {path, fix_tasks, risk_tasks}")
        changes = []
        for i, raw in enumerate(data["changes"]):
            raw = _object(raw, f"changes[{i}]")
            if not isinstance(raw.get("path"), str) or not raw["path"]:
                raise ManifestError("manifest_missing_fields", f"changes[{i}] needs a path")
            fix, risk = (
                _tasks(raw[k], f"changes[{i}].{k}") if k in raw else list(default[k])
                for k in ("fix_tasks", "risk_tasks")
            )
            changes.append(Change(raw["path"].strip().removeprefix("./"), fix, risk))
    else:
        changes = [Change(p, list(default["fix_tasks"]), list(default["risk_tasks"])) for p in changed]
    declared = [c.path for c in changes]
    undeclared = sorted(set(changed) - set(declared))
    unchanged = sorted(set(declared) - set(changed))
    if undeclared or unchanged:
        parts = []
        if undeclared:
            parts.append(f"changed but not declared: {undeclared}")
        if unchanged:
            parts.append(f"declared but not changed: {unchanged}")
        raise ManifestError("manifest_path_mismatch", "; ".join(parts) + f" (the real diff: {sorted(changed)})")
    if len(set(declared)) != len(declared):
        raise ManifestError("manifest_path_mismatch", "a path is declared more than once")
    evidence = data["failure_evidence"]
    evidence = [evidence] if isinstance(evidence, str) else evidence
    if not isinstance(evidence, list):
        raise ManifestError("manifest_missing_fields", "failure_evidence must be a list of strings")
    return Manifest([str(e) for e in evidence], str(data["root_cause"]), str(data["targeted_fix"]), changes)


def _object(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise ManifestError("manifest_missing_fields", f"{where} must be an object")
    return value


def _tasks(value, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(t, (str, int)) and not isinstance(t, bool) for t in value):
        raise ManifestError("manifest_missing_fields", f"{where} must be a list of task ids")
    return list(dict.fromkeys(str(t) for t in value))


# ---- measuring --------------------------------------------------------------------------------
def passes(score: float) -> bool:
    return score >= PASS_SCORE - 1e-9


class Flips(TypedDict):
    """The train tasks by what a candidate did to them (each list in task order)."""

    fail_to_pass: list[str]
    pass_to_fail: list[str]
    unchanged: list[str]


def flips(before: dict[str, float], after: dict[str, float]) -> Flips:
    """Per task, in task order: fail_to_pass, pass_to_fail, unchanged (pass/fail unchanged)."""
    out: Flips = {"fail_to_pass": [], "pass_to_fail": [], "unchanged": []}
    for t in before:
        was, now = passes(before[t]), passes(after.get(t, 0.0))
        key: Literal["fail_to_pass", "pass_to_fail", "unchanged"] = (
            "fail_to_pass" if now and not was else "pass_to_fail" if was and not now else "unchanged"
        )
        out[key].append(t)
    return out


def verdict(change: Change, flipped: Flips) -> dict:
    """EFFECTIVE: every declared fix task flipped (no declared risk realised); PARTIALLY_EFFECTIVE:
    some did; MIXED: flips and realised risks; HARMFUL: only realised risks; INEFFECTIVE: neither
    (a change declaring no fix task can only be INEFFECTIVE or HARMFUL)."""
    fixed = [t for t in change.fix_tasks if t in flipped["fail_to_pass"]]
    realised = [t for t in change.risk_tasks if t in flipped["pass_to_fail"]]
    if fixed and realised:
        name = "MIXED"
    elif realised:
        name = "HARMFUL"
    elif fixed and len(fixed) == len(change.fix_tasks):
        name = "EFFECTIVE"
    elif fixed:
        name = "PARTIALLY_EFFECTIVE"
    else:
        name = "INEFFECTIVE"
    return {
        "path": change.path,
        "verdict": name,
        "fix_tasks": change.fix_tasks,
        "risk_tasks": change.risk_tasks,
        "fixed": fixed,
        "not_fixed": [t for t in change.fix_tasks if t not in fixed],
        "realised_risks": realised,
    }


def unattributed_regressions(manifest: Manifest, flipped: Flips) -> list[str]:
    """pass_to_fail tasks that no change declared as a risk: what the manifest missed."""
    predicted = {t for c in manifest.changes for t in c.risk_tasks}
    return [t for t in flipped["pass_to_fail"] if t not in predicted]
