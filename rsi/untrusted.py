"""Reading what a candidate printed: JSON that may be hostile.

Everything a candidate writes on stdout is parsed here, so nothing in it can raise anything but
``Invalid`` (whose message is the one-line reason a rollout records). The rules:

* size: at most ``MAX_BYTES`` of text (the sandbox caps stdout before this; the bound holds for
  any other caller too);
* nesting: at most ``MAX_DEPTH`` levels of arrays/objects. Python's own parser stops near its
  recursion limit with a RecursionError, and every later consumer (a trace dump, a deep copy, a
  scorer's walk) has a stack of its own to overflow, so the bound is far below that;
* numbers: finite only. ``NaN``, ``Infinity`` and literals that overflow a float (``1e400``)
  are rejected: a NaN score or cost poisons every mean and comparison downstream;
* fields: typed readers (``nonneg_int``, ``nonneg_float``, ``usage``) that return a value of the
  expected type within bounds, or raise ``Invalid`` naming the field and what it held.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 64
MAX_BYTES = 64 * 1024 * 1024
MAX_TOKENS = 10**12  # per rollout; a sane count is many orders of magnitude below
MAX_COST_USD = 1e6  # per rollout


class Invalid(ValueError):
    """Untrusted data broke a rule; ``str(exc)`` is the one-line reason."""


class Malformed(Invalid):
    """The text is not JSON at all (as opposed to JSON that breaks a bound)."""


def loads(text: str | bytes, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES) -> Any:
    """Parse one JSON document under the rules above; ``Malformed`` or ``Invalid`` otherwise."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > max_bytes:
            raise Invalid(f"JSON text larger than {max_bytes} bytes")
        text = bytes(text).decode("utf-8", errors="replace")
    elif len(text) > max_bytes:
        raise Invalid(f"JSON text larger than {max_bytes} bytes")
    try:
        obj = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:  # the parser's own stack ran out: far deeper than any bound we allow
        raise Invalid(f"JSON nested deeper than {max_depth} levels") from None
    except Invalid:
        raise
    except ValueError as exc:  # JSONDecodeError, or an integer literal past int's digit limit
        raise Malformed(str(exc)) from None
    # Only a text with more opening brackets than the bound can nest past it.
    if text.count("[") + text.count("{") > max_depth:
        check_depth(obj, max_depth)
    return obj


def check_depth(obj: Any, max_depth: int = MAX_DEPTH) -> None:
    """``Invalid`` if ``obj`` nests lists/dicts deeper than ``max_depth`` (level by level: no
    recursion, so no stack to overflow)."""
    level, depth = ([obj] if isinstance(obj, (dict, list)) else []), 1
    while level:
        if depth > max_depth:
            raise Invalid(f"JSON nested deeper than {max_depth} levels")
        nxt: list = []
        for node in level:
            nxt.extend(c for c in (node.values() if isinstance(node, dict) else node) if isinstance(c, (dict, list)))
        level, depth = nxt, depth + 1


def _reject_constant(name: str):
    raise Invalid(f"non-finite number {name} in JSON")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise Invalid(f"number {_clip(literal)} in JSON is not finite as a float")
    return value


# ---- typed field readers -----------------------------------------------------------------------
def nonneg_int(value: Any, what: str, hi: int) -> int:
    """An integer in [0, hi]; an integral float (``12.0``) counts. Anything else: ``Invalid``."""
    number = int(value) if isinstance(value, float) and math.isfinite(value) and value.is_integer() else value
    if isinstance(number, bool) or not isinstance(number, int):
        raise Invalid(f"{what} must be a non-negative integer, got {show(value)}")
    if not 0 <= number <= hi:
        raise Invalid(f"{what} must be between 0 and {hi}, got {show(value)}")
    return number


def nonneg_float(value: Any, what: str, hi: float) -> float:
    """A finite number in [0, hi] as a float. Anything else: ``Invalid``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Invalid(f"{what} must be a non-negative number, got {show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise Invalid(f"{what} must be a finite number, got {show(value)}")
    if not 0 <= value <= hi:
        raise Invalid(f"{what} must be between 0 and {hi:g}, got {show(value)}")
    return float(value)


@dataclass(frozen=True)
class Usage:
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0


def usage(output: dict) -> Usage:
    """The optional ``usage`` object of a candidate's answer. Absent or null fields are 0; any
    other value outside the protocol is ``Invalid`` naming the field."""
    raw = output.get("usage")
    if raw is None:
        return Usage()
    if not isinstance(raw, dict):
        raise Invalid(f"usage must be an object, got {show(raw)}")
    tokens_in, tokens_out, cost = raw.get("tokens_in"), raw.get("tokens_out"), raw.get("cost_usd")
    return Usage(
        0 if tokens_in is None else nonneg_int(tokens_in, "usage.tokens_in", MAX_TOKENS),
        0 if tokens_out is None else nonneg_int(tokens_out, "usage.tokens_out", MAX_TOKENS),
        0.0 if cost is None else nonneg_float(cost, "usage.cost_usd", MAX_COST_USD),
    )


def show(value: Any, limit: int = 40) -> str:
    """A short, safe rendering of an untrusted value for a reason line."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return _clip(text, limit)


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
