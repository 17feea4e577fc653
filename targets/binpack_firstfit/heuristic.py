"""Online bin-packing heuristic: first fit, the paper's other baseline."""

import numpy as np


# rsi: evolve
def priority(item: float, bins: np.ndarray) -> np.ndarray:
    """Returns priority with which we want to add item to each bin.

    Args:
      item: Size of item to be added to the bin.
      bins: Array of residual capacities of the bins the item fits in, in bin order.

    Return:
      Array of same size as bins with priority score of each bin; the highest wins,
      ties go to the first. Falling with position makes the first bin that fits win.
    """
    return -np.arange(len(bins), dtype=float)
