"""One exception root. Failures of a candidate are data (rollout statuses, decline records);
these exceptions are for the user's mistakes and for our own infrastructure."""


class RsiError(Exception):
    """Root of every error rsi raises on purpose."""


class ConfigError(RsiError):
    """Bad input found before any run directory, Ray start or model call: the CLI exits 2."""


class WorkerError(RsiError):
    """A worker (model, agent, script) failed in a way the run must record."""


class ClusterError(RsiError):
    """Ray or storage could not do what was asked."""


class SeedFailed(RsiError):
    """Every rollout of the starting version failed: no search can start from it (exit 1)."""


class Rejected(RsiError):
    """A commit was refused. ``reason`` is a stable name recorded in decisions."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
