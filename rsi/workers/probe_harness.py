"""The mutator's probe, run inside the rollout jail: for each of several jobs, calls versions of
a marked function (a parent and a child) on the same inputs and prints their results.

Jailed script (see ``rsi.workers._probe``): stdin holds one JSON object ``{"jobs": [job, ...]}``,
a job being ``{"functions": [source, ...], "name": function name, "numpy": alias or null, "math":
alias or null, "builtins": [names], "cases": [{argument: number or list of numbers}, ...]}``;
stdout gets ``{"results": [[[result per case] or null per function] per job]}``, a result being a
number or a list of numbers (NaN and the infinities as the strings "nan", "inf", "-inf": the
sandbox accepts finite JSON numbers only). A function that raises on any case gets null. It
imports nothing of this project: it is mounted alone under ``/harness``.
"""

import builtins
import json
import math
import sys
import warnings

import numpy as np


def results(source, spec):
    namespace = {"__builtins__": {n: getattr(builtins, n) for n in spec["builtins"]}}
    if spec["numpy"]:
        namespace[spec["numpy"]] = np
    if spec["math"]:
        namespace[spec["math"]] = math
    try:
        exec(compile(source, "<probe>", "exec"), namespace)
        func = namespace[spec["name"]]
        out = []
        for case in spec["cases"]:
            # lists become arrays of their own type, as the mutator built them (ints stay ints)
            args = {k: np.asarray(v) if isinstance(v, list) else v for k, v in case.items()}
            out.append(_wire(np.asarray(func(**args), dtype=float).tolist()))
        return out
    except Exception:  # a probe that cannot run decides nothing
        return None


def _wire(value):
    """A result as the trusted side reads it: JSON allows finite numbers only, so NaN and the
    infinities travel as the strings "nan", "inf" and "-inf"."""
    if isinstance(value, list):
        return [_wire(v) for v in value]
    return value if math.isfinite(value) else str(value)


def main():
    jobs = json.load(sys.stdin)["jobs"]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        found = [[results(src, job) for src in job["functions"]] for job in jobs]
    sys.stdout.write(json.dumps({"results": found}) + "\n")


if __name__ == "__main__":
    main()
