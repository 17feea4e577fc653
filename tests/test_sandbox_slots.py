"""Sandbox slot recovery: a rollout uid whose previous holder died is swept before it is reused.

A root caller runs each rollout under a uid of its own, one of the slots of ``rsi._sandbox_slots``,
held through an flock on the slot's file; the file stays non-empty while processes of that uid
may live. Here a real holder process (``run_program`` in a subprocess) starts a candidate that
also leaves a process outside its process group, and is SIGKILLed mid-rollout: its flock goes
with it, but the candidate's processes and the non-empty slot file stay. The next rollout that
takes that slot must kill them first, then run clean.

The slot a rollout takes starts from ``random.randrange``; the test seeds Python's RNG so that
the next rollout starts its search at the dead holder's slot, and dates the slot file back past
its rest period (what the passing of 30 seconds would do), so that slot is the first one taken.

With the ``process`` backend the dead holder's candidate processes live on and the sweep is what
ends them. In the bubblewrap jail they die with the holder (``--die-with-parent`` takes the
jail's PID namespace down), so only the slot file's mark is left: the next rollout still takes
that slot, finds nothing to kill, runs clean and clears the mark.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from _procs import Process, process, processes

from rsi import _sandbox_slots, sandbox
from rsi.sandbox import Limits, run_program

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(os.geteuid() != 0, reason="rollout uid slots are used by root callers only")]

REPO = Path(__file__).resolve().parents[1]
SLEEPER = "import time; time.sleep(600)"
# The candidate: leaves a process of its own in a new session (out of its process group), then
# sleeps; it never answers.
CANDIDATE = f"""
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", {SLEEPER!r}, sys.argv[1]], start_new_session=True)
time.sleep(600)
"""


def live(pid) -> bool:
    """Whether a process can still run: not a zombie, not exiting (PF_EXITING), no SIGKILL
    pending. A sweep sends SIGKILL and does not wait for the end, so a swept process may linger
    a moment in its exit; it never runs again. (Also sent, as source, into the next rollout.)"""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open(f"/proc/{pid}/status") as f:
            pending = [int(line.split()[1], 16) for line in f if line.startswith(("SigPnd:", "ShdPnd:"))]
    except (OSError, IndexError, ValueError):
        return False
    return fields[0] not in (b"Z", b"X") and not int(fields[6]) & 0x4 and not any(p >> 8 & 1 for p in pending)


# The next rollout: which uid it runs under, and which other live processes of that uid it sees.
CLEAN = inspect.getsource(live) + """
import json, os
others = [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) != os.getpid() and live(n)
          and os.stat(f"/proc/{n}").st_uid == os.getuid()]
print(json.dumps({"answer": "clean", "uid": os.getuid(), "others": others}))
"""
HOLDER = """
import json, sys
from pathlib import Path
from rsi.sandbox import Limits, run_program
run_program([sys.executable, "-c", sys.argv[1], sys.argv[2]], Path(sys.argv[3]), {},
            Limits(timeout_s=300, **json.loads(sys.argv[4])))
"""
# The backends this version of the sandbox has: the explicit, uncontained ``process`` one and the
# default (the jail where there is one). A sandbox without a choice runs candidates as processes.
HAS_BACKENDS = "backend" in Limits.__dataclass_fields__
BACKENDS = ["process", "default"] if HAS_BACKENDS else ["default"]


def limits_for(backend: str) -> dict:
    return {"backend": backend} if backend != "default" else {}


def in_effect(backend: str) -> str:
    return sandbox.resolve_backend(Limits().backend if backend == "default" else backend) if HAS_BACKENDS \
        else "process"


def live_processes(match) -> dict[int, Process]:
    """pid -> reading of the processes that can still run for which ``match``: the sweep's SIGKILL
    leaves a process lingering a moment in its exit, and it must not count as one left running."""
    return {p.pid: p for p in processes(lambda p: match(p) and live(p.pid))}


def still_running(then: Process) -> bool:
    """``then``'s pid may be reused by the time the test looks again: the start time tells."""
    now = process(then.pid)
    return now is not None and now.started == then.started and live(then.pid)


@pytest.mark.parametrize("backend", BACKENDS)
def test_next_rollout_on_a_dead_holders_slot_sweeps_its_processes_and_runs_clean(tmp_path, backend):
    marker = f"rsi-slot-test-{uuid.uuid4().hex}"
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, CANDIDATE, marker, str(checkout),
                               json.dumps(limits_for(backend))], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    leftover: dict[int, Process] = {}
    try:
        deadline = time.monotonic() + 120
        while not (escapees := live_processes(lambda p: p.argv[1:4] == ["-c", SLEEPER, marker])):
            assert holder.poll() is None, f"the holder ended early: {holder.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "the candidate never started its background process"
            time.sleep(0.05)
        escapee, = escapees.values()
        slot_uid = escapee.uid
        base = _sandbox_slots._slot_base()
        assert base <= slot_uid < base + _sandbox_slots._SLOTS, "the rollout ran under a slot uid"
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(timeout=30) == -signal.SIGKILL

        # The holder is gone; its slot file's mark is not, nor (outside the jail) its candidate's processes.
        if in_effect(backend) == "bwrap":
            deadline = time.monotonic() + 30
            while live_processes(lambda p: p.uid == slot_uid):
                assert time.monotonic() < deadline, "the jail outlived its holder"
                time.sleep(0.05)
        else:
            leftover = live_processes(lambda p: p.uid == slot_uid)
            assert set(escapees) <= set(leftover)
            assert any(p.argv[1:3] == ["-c", CANDIDATE] for p in leftover.values()), "the candidate lives on"
        slot = slot_uid - base
        slot_file = Path(_sandbox_slots._slot_dir()) / f"{slot:04d}"
        assert slot_file.read_bytes() == b"1"
        rested = time.time() - 2 * _sandbox_slots._SLOT_REST_S
        os.utime(slot_file, (rested, rested))

        seed = next(s for s in range(1_000_000) if random.Random(s).randrange(_sandbox_slots._SLOTS) == slot)
        state = random.getstate()
        random.seed(seed)
        try:
            out = run_program([sys.executable, "-c", CLEAN], checkout, {}, Limits(timeout_s=60, **limits_for(backend)))
        finally:
            random.setstate(state)

        assert (out.status, out.returncode, out.reason, out.output["answer"]) == ("ok", 0, "", "clean")
        if in_effect(backend) == "process":
            # the same uid, and none of the dead holder's processes beside it: swept before it started
            assert (out.output["uid"], out.output["others"]) == (slot_uid, [])
        assert slot_file.stat().st_mtime > rested + _sandbox_slots._SLOT_REST_S, "the next rollout took that slot"
        assert slot_file.read_bytes() == b"", "released clean: nothing of that uid left"
        assert [pid for pid, p in leftover.items() if still_running(p)] == []
        assert live_processes(lambda p: p.uid == slot_uid) == {}
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        for pid, p in leftover.items():
            if still_running(p):
                os.kill(pid, signal.SIGKILL)
        holder.stderr.close()

