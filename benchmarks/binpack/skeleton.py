"""The paper's online bin-packing skeleton, run in the jail with cwd = a candidate checkout.

Online means online: the instance stays on the trusted side, which reveals one item at a time
(``rsi.benchmark``'s lockstep dialogue, ``PackingDialogue`` in this package). Protocol, one JSON
value per line:

* stdin, first: ``{"capacity": int, "n": int}`` — the bin capacity and the number of items
  (the paper's loop opens one bin per item, so the harness needs ``n`` to lay them out);
* then, per item: the item, after which this script prints the index of the bin it chose;
* after the last decision of a list, a series (``PackingSeries``: stage 1 of meta-evolve packs
  every list of a node in one jail) may send the next list's header and items: fresh bins;
* stdin closes after the last decision.

The next item is written only after the previous decision came back, so nothing the candidate
does — walking the stack, reading stdin ahead — can see a future item. Whatever the candidate
prints goes to stderr; a decision it wrote itself could only concern the item it was shown.
The trusted side re-checks every decision (the bin exists and the item fits) and counts the
bins itself. A heuristic that
raises ends the process non-zero: that rollout is an ``error``.
"""

import contextlib
import importlib.util
import json
import os
import sys
from pathlib import Path

# A checkout is committed after rollouts; leave no __pycache__ in it.
sys.dont_write_bytecode = True


def load_online():
    """The shared packing step, loaded by path so nothing in the checkout can shadow it."""
    path = Path(__file__).resolve().parent / "online.py"
    spec = importlib.util.spec_from_file_location("_binpack_online", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    # Decisions go out on a private copy of stdout; fd 1 itself becomes stderr, so no print of
    # the candidate's, however low-level, lands among them by accident.
    decisions = os.dup(1)
    os.dup2(2, 1)
    header = json.loads(sys.stdin.readline())
    online = load_online()
    # The checkout takes the place of this script's folder: the candidate imports its own
    # modules, never the benchmark's.
    sys.path[0] = os.getcwd()
    with contextlib.redirect_stdout(sys.stderr):
        from heuristic import priority

        bins = online.open_bins(header["capacity"], header["n"])
        for line in sys.stdin:
            digits = line[:-1]
            item = int(digits) if digits.isascii() and digits.isdigit() else json.loads(line)  # same value, faster
            if type(item) is dict:  # the next list of a series: its header, then its items
                bins = online.open_bins(item["capacity"], item["n"])
                continue
            os.write(decisions, b"%d\n" % online.place(bins, item, priority))


if __name__ == "__main__":
    main()
