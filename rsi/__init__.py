"""rsi: a Ray-based parallel search cluster for recursive self-improvement.

Nothing in this package imports Ray at module level: the core types (Snapshot, Results,
records, config) are plain Python and testable in-process. Ray lives in ``actors/``.
"""

__version__ = "0.1.0"
