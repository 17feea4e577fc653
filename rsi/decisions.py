"""Decisions: one typed, versioned record per decision a run makes, one line of ``decisions.jsonl``.

Pinned fields (every line has them): ``step``, ``kind``, ``snapshot_id``, ``parent_id``,
``donor_id``, ``accepted``, ``reason_code`` (a stable name a program can count) and ``reason``
(the human sentence, with the numbers that decided). An algorithm adds its own figures (gain,
regression mass, the measured means, ...) beside them.

``kind`` is an open string: algorithms from entry points add their own kinds. The core kinds:

| kind | what was decided |
| --- | --- |
| ``seed`` | the starting version was measured |
| ``decline`` | an edit was not committed (its ``reason_code`` says why: ``no_change``, ``duplicate``, ...) |
| ``screen`` / ``confirm`` | a candidate passed or failed a cheap or a full measurement gate |
| ``admit`` / ``keep`` | a candidate joined the archive (ADAS) / became the current version (AHE) |
| ``merge`` | two versions were paired for recombination |
| ``stop`` | the search ended early (budget, target score) |
| ``promote`` | the version the run returns |
| ``test`` | the promoted version's single measurement on the test split |

Lines written before records were typed (version 1) have no ``reason_code`` and no
``donor_id`` where unused; ``Decision.read`` fills them so old runs resume and report.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

VERSION = 2

CORE_KINDS = ("seed", "decline", "screen", "confirm", "admit", "keep", "merge", "stop", "promote", "test")


class Decision(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    v: int = VERSION
    step: int
    kind: str
    snapshot_id: str | None = None
    parent_id: str | None = None
    donor_id: str | None = None
    accepted: bool | None = None
    reason_code: str
    reason: str = ""

    def record(self) -> dict[str, Any]:
        """The JSON line: pinned fields first, then the algorithm's figures."""
        return self.model_dump()

    @property
    def figures(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @classmethod
    def read(cls, line: dict) -> Decision:
        """A stored line of any version (version 1 lines get a ``reason_code`` derived from
        their reason: declines already stored a code there)."""
        if "reason_code" not in line:
            line = {**line, "v": 1, "reason_code": legacy_code(line.get("kind", ""), line.get("reason") or "")}
        return cls.model_validate(line)


def legacy_code(kind: str, reason: str) -> str:
    """A version-1 line's code: the reason itself where it already was a code (declines),
    else the kind."""
    return reason if re.fullmatch(r"[a-z][a-z0-9_]*", reason or "") else kind
