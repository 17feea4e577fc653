"""The processes on this machine, read from ``/proc``: what a test started, or what a candidate
left behind, found by its command line or its place in the process tree.

Tests read ``/proc`` while processes end around them (that is often what they check), so a
process that vanishes between two reads counts as gone, never as an error. Processes in a jail
or a container are found here too: their PID namespaces are nested in the host's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple


class Process(NamedTuple):
    pid: int
    ppid: int
    uid: int
    #: ``Z`` (zombie) or ``X`` (dead) for one that has ended but is not yet reaped.
    state: str
    #: Start time in clock ticks after boot: with ``pid``, it names one process even once the pid is reused.
    started: int
    #: The arguments, split on NUL; empty for a zombie or a kernel thread.
    argv: list[str]


def process(pid: int | str) -> Process | None:
    """One reading of ``/proc/PID``; None where it is gone (or never was)."""
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
        with open(f"/proc/{pid}/stat", "rb") as f:
            # The command name in parentheses may hold spaces and ")": the fields follow its last ")".
            fields = f.read().rsplit(b")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
        ppid, started = int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):  # FileNotFoundError, ProcessLookupError, PermissionError
        return None
    args = raw.split(b"\0")
    if args[-1] == b"":  # the NUL that ends the last argument; a process may rewrite it away
        args.pop()
    return Process(int(pid), ppid, uid, fields[0].decode(), started, [a.decode(errors="replace") for a in args])


def processes(match: Callable[[Process], bool] = lambda p: True) -> list[Process]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and (p := process(name)) is not None and match(p):
            found.append(p)
    return found


def pids(match: Callable[[Process], bool]) -> list[int]:
    return [p.pid for p in processes(match)]


def cmdline_has(text: str) -> Callable[[Process], bool]:
    """A unique marker a test passes to the processes it starts finds them wherever it sits: an
    argument, a ``-c`` script, a wrapper's command. A zombie has no command line, so ended
    processes not yet reaped are not found."""
    return lambda p: text in "\0".join(p.argv)


def args_are(*argvs: list[str]) -> Callable[[Process], bool]:
    """Exact arguments after ``argv[0]`` (which names the interpreter, however it was found). Where
    a marker is passed down a chain (a caller, ``timeout``, a container's init, the candidate), a
    substring match would find every link; this finds only the process run with these arguments."""
    wanted = [list(argv) for argv in argvs]
    return lambda p: p.argv[1:] in wanted


def descendants(pid: int) -> list[int]:
    """All processes below ``pid``, found by parent links rather than process groups or sessions:
    Ray, and a hostile candidate, may move processes out of either."""
    children: dict[int, list[int]] = {}
    for p in processes():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    """The command line as one string, arguments joined by spaces, for substring tests and
    ``split()``; empty once the process is gone."""
    p = process(pid)
    return " ".join(p.argv) if p is not None else ""
