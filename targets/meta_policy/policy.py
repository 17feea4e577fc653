import math


def priority(rank, visits, total, prior, depth, n_nodes):
    """Flat PUCT as ERA ships it: c = 1 and the uniform prior 1 / n_nodes."""
    return rank + 1.0 * (1.0 / n_nodes) * math.sqrt(total) / (1 + visits)
