"""Online bin-packing heuristic: best fit, the starting point of the FunSearch paper."""

import numpy as np


# EVOLVE-BLOCK-START
def priority(item: float, bins: np.ndarray) -> np.ndarray:
    """Returns priority with which we want to add item to each bin.

    Args:
      item: Size of item to be added to the bin.
      bins: Array of residual capacities of the bins the item fits in, in bin order.

    Return:
      Array of same size as bins with priority score of each bin; the highest wins,
      ties go to the first.
    """
    return -(bins - item)


# EVOLVE-BLOCK-END
