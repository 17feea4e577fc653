"""Seeing a run: the self-contained HTML report, text views, TensorBoard export.

``rsi report RUN_DIR`` (``build_report``), ``rsi show RUN_DIR --diff/--lineage`` (``text``);
everything is read from the run directory alone, through ``RunRecords`` (local or any
``pyarrow.fs`` URI), without writing to it.
"""

from rsi.reporting.data import RunView

__all__ = ["RunView"]
