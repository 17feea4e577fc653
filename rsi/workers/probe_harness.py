"""The mutator's probe, run inside the rollout jail: calls two versions of a marked function on
the same inputs and prints their results.

Jailed script (see ``rsi.workers._probe``): stdin holds one JSON object ``{"functions": [source,
...], "name": function name, "numpy": alias or null, "math": alias or null, "builtins": [names],
"cases": [{argument: number or list of numbers}, ...]}``; stdout gets ``{"results": [[result per
case] or null per function]}``, a result being a number or a list of numbers (NaN and infinities
as JSON's extended literals, which the trusted side parses). A function that raises on any case
gets null. It imports nothing of this project: it is mounted alone under ``/harness``.
"""

import builtins
import json
import math
import sys
import warnings

import numpy as np


def results(source, name, spec, cases):
    namespace = {"__builtins__": {n: getattr(builtins, n) for n in spec["builtins"]}}
    if spec["numpy"]:
        namespace[spec["numpy"]] = np
    if spec["math"]:
        namespace[spec["math"]] = math
    try:
        exec(compile(source, "<probe>", "exec"), namespace)
        func = namespace[name]
        out = []
        for case in cases:
            args = {k: np.asarray(v, dtype=float) if isinstance(v, list) else v for k, v in case.items()}
            out.append(np.asarray(func(**args), dtype=float).tolist())
        return out
    except Exception:  # a probe that cannot run decides nothing
        return None


def main():
    spec = json.load(sys.stdin)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        found = [results(src, spec["name"], spec, spec["cases"]) for src in spec["functions"]]
    sys.stdout.write(json.dumps({"results": found}) + "\n")


if __name__ == "__main__":
    main()
