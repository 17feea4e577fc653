"""Component rules of a target: ``components.yaml`` in the target root.

Every file of a target must match exactly one rule, so every change a worker makes can be
attributed to a named component and checked against the evolve scope.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import yaml

from rsi.errors import ConfigError, Rejected

COMPONENTS_FILE = "components.yaml"
# The rule file itself belongs to no component and is never in any evolve scope.
META_COMPONENT = "_components"


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """``**`` crosses directories, ``*`` and ``?`` do not (gitignore-like, anchored)."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


@dataclass(frozen=True)
class Rule:
    name: str
    glob: str

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return glob_to_regex(self.glob)


@dataclass(frozen=True)
class Components:
    rules: tuple[Rule, ...]

    @classmethod
    def load(cls, root: str | Path) -> Components:
        path = Path(root) / COMPONENTS_FILE
        if not path.is_file():
            raise ConfigError(f"{path}: missing components.yaml (ordered rules of {{name, glob}})")
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: YAML error: {exc}") from None
        return cls.parse(data, where=str(path))

    @classmethod
    def parse(cls, data, where: str = COMPONENTS_FILE) -> Components:
        if isinstance(data, dict) and "components" in data:
            data = data["components"]
        if not isinstance(data, list) or not data:
            raise ConfigError(f"{where}: expected a non-empty list of {{name, glob}} rules")
        rules, names = [], set()
        for i, item in enumerate(data):
            if not isinstance(item, dict) or set(item) != {"name", "glob"}:
                raise ConfigError(f"{where}: rule {i} must have exactly the keys name and glob")
            if item["name"] in names:
                raise ConfigError(f"{where}: duplicate component name {item['name']!r}")
            names.add(item["name"])
            rules.append(Rule(str(item["name"]), str(item["glob"])))
        return cls(tuple(rules))

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.rules]

    def matches(self, path: str) -> list[str]:
        return [r.name for r in self.rules if r.regex.match(path)]

    def label(self, path: str) -> str:
        """The one component a path belongs to; Rejected if zero or several rules match."""
        if path == COMPONENTS_FILE:
            return META_COMPONENT
        hits = self.matches(path)
        if not hits:
            raise Rejected("unclassified_path", f"{path} matches no component rule")
        if len(hits) > 1:
            raise Rejected("ambiguous_path", f"{path} matches several component rules: {', '.join(hits)}")
        return hits[0]

    def resolve_scope(self, scope) -> frozenset[str]:
        if scope in (None, "*") or scope == ["*"]:
            return frozenset(self.names)
        scope = [scope] if isinstance(scope, str) else list(scope)
        unknown = [s for s in scope if s not in self.names]
        if unknown:
            raise ConfigError(f"evolve_scope names unknown components {unknown}; declared: {self.names}")
        return frozenset(scope)

    def table(self) -> str:
        """The rule table shown to workers in prompts."""
        lines = ["| component | glob |", "| --- | --- |"]
        lines += [f"| {r.name} | `{r.glob}` |" for r in self.rules]
        return "\n".join(lines)
