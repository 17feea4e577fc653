"""One uid per concurrent rollout on the machine, for a caller that runs as root.

Linux exempts uid 0 from RLIMIT_NPROC, so a root caller runs each rollout under a uid of its
own: one of ``_SLOTS`` uids held through an flock on a slot file every process on the machine
shares (``rsi.sandbox``'s docstring has the whole argument). This module holds that uid's life:
acquiring a slot, dropping privilege to it (keeping at most CAP_DAC_READ_SEARCH), and sweeping
every process of the uid once the rollout ends, escapees that left the process group included.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import os
import random
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from rsi.errors import RsiError

_SWEEP_S = 10.0  # a sweep that has not converged by then is a bug of ours, not a candidate's

_SLOT_BASE = 1_600_000_000  # far above any account a system creates
_SLOTS = 4096
_SLOT_REST_S = 30.0
_MIN_SANDBOX_UID = 1000  # a sweep never targets root or a system account
_SLOT_DIRS = ("/run/lock", "/tmp")  # fixed, not $TMPDIR: every caller on a machine must agree

# Linux ABI constants (linux/prctl.h, linux/capability.h)
_PR_SET_KEEPCAPS = 8
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_RAISE = 2
_CAP_DAC_READ_SEARCH = 2
_CAP_SETGID = 6
_CAP_SETUID = 7
_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _capset_args(cap: int):
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    data[cap // 32].effective = data[cap // 32].permitted = data[cap // 32].inheritable = 1 << (cap % 32)
    return header, data, cap


def _become(uid: int, caps, libc) -> None:
    """In the child: become ``uid`` (its own group, no supplementary groups), keeping at most
    the one capability in ``caps`` as an ambient capability so it survives exec."""
    if caps is not None:
        _ok(libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0))
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if caps is not None:
        header, data, cap = caps
        _ok(libc.capset(ctypes.byref(header), data))
        _ok(libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, cap, 0, 0))


def _ok(rc: int) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@functools.lru_cache(maxsize=1)
def _libc():
    """prctl and capset, resolved in the parent so the forked child only calls them."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    return _Libc(libc.prctl, libc.capset)


@dataclass(frozen=True)
class _Libc:
    prctl: Any
    capset: Any


@functools.cache
def _has_cap(cap: int) -> bool:
    try:
        with open("/proc/self/status") as f:
            eff = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    except (OSError, StopIteration):
        return False
    return bool(eff >> cap & 1)


# ---- slots: one uid per concurrent rollout on the machine --------------------------------


class _Slot:
    """A uid of the slot range, held through an flock on its slot file for the rollout's life.

    A slot file is non-empty while a rollout may have processes under its uid; an acquirer that
    finds it so (its holder died mid-rollout) clears the uid first."""

    def __init__(self, uid: int, fd: int):
        self.uid = uid
        self.fd = fd
        self.clean = False

    @classmethod
    def acquire(cls) -> _Slot:
        if not sys.platform.startswith("linux"):
            raise RsiError("running rollouts as root is supported on Linux only; run as a normal user")
        if not (_has_cap(_CAP_SETUID) and _has_cap(_CAP_SETGID)):
            raise RsiError("running as root without CAP_SETUID/CAP_SETGID: rollouts cannot be given their own uid")
        base, directory = _slot_base(), _slot_dir()
        start = random.randrange(_SLOTS)
        for rested_only in (True, False):
            for i in range(_SLOTS):
                n = (start + i) % _SLOTS
                fd = _lock_slot_file(os.path.join(directory, f"{n:04d}"), rested_only)
                if fd is not None:
                    slot = cls(base + n, fd)
                    if os.fstat(fd).st_size:
                        slot.sweep()
                    os.pwrite(fd, b"1", 0)
                    slot.clean = False
                    return slot
        raise RsiError(f"all {_SLOTS} sandbox slots are busy")

    def sweep(self) -> None:
        _kill_uid(self.uid)
        self.clean = True

    def release(self) -> None:
        if self.clean:
            os.ftruncate(self.fd, 0)
        os.close(self.fd)


def _lock_slot_file(path: str, rested_only: bool) -> int | None:
    """The locked slot file, or None when another rollout holds it or (with ``rested_only``)
    it was released less than ``_SLOT_REST_S`` ago: the zombies of a rollout's killed
    processes count against RLIMIT_NPROC until init reaps them."""
    try:
        fd, fresh = os.open(path, os.O_RDWR | os.O_CLOEXEC), False
    except FileNotFoundError:
        fd, fresh = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600), True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if fresh or not rested_only or time.time() - os.fstat(fd).st_mtime >= _SLOT_REST_S:
            return fd
    except BlockingIOError:
        pass
    os.close(fd)
    return None


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` (the rollout's own), including those that left its
    process group with setsid. A process that has been sent SIGKILL can no longer fork, so
    passes over /proc end once nobody new appears; it returns only when every process of the
    uid has exited (SIGKILL is delivered asynchronously, which a loaded machine makes visible).
    Each kill goes through a pidfd after re-checking the process, so a pid reused meanwhile is
    never hit."""
    if uid < _MIN_SANDBOX_UID:  # the same sweep on uid 0 would end the machine
        raise RsiError(f"refusing to sweep uid {uid}")
    signalled: set[tuple[int, bytes]] = set()
    deadline = time.monotonic() + _SWEEP_S
    while time.monotonic() < deadline:
        live = _live_processes(uid)
        if not live:  # every process of the uid has exited: none outlives the rollout
            return
        fresh = [p for p in live if p not in signalled]
        for pid, started in fresh:
            _kill_exactly(pid, started, uid)
            signalled.add((pid, started))
        if not fresh:  # all signalled, still exiting (a loaded machine takes a moment)
            time.sleep(0.002)
    if any(p not in signalled for p in _live_processes(uid)):
        raise RsiError(f"processes of sandbox uid {uid} kept appearing for {_SWEEP_S} s")


def _live_processes(uid: int) -> list[tuple[int, bytes]]:
    """(pid, start time) of the processes of ``uid`` that are not yet zombies."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            identity = _identity(int(name), uid)
            if identity is not None:
                found.append((int(name), identity))
    return found


def _identity(pid: int, uid: int) -> bytes | None:
    """The start time of ``pid`` if it is a live process of ``uid``, else None."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != uid:
            return None
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):  # gone meanwhile
        return None
    state, started = fields[0], fields[19]  # fields 3 and 22 of proc(5)
    return None if state in (b"Z", b"X") else started


def _kill_exactly(pid: int, started: bytes, uid: int) -> None:
    fd = _pidfd(pid)
    try:
        if _identity(pid, uid) != started:  # exited, or the pid now names another process
            return
        if fd is not None:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        else:  # kernels before 5.3: a pid reused within these microseconds is the residual risk
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    finally:
        if fd is not None:
            os.close(fd)


@functools.lru_cache(maxsize=1)
def _slot_base() -> int:
    """``_SLOT_BASE`` if the user namespace maps it, else the top of the mapped range."""
    uids, gids = _id_map("/proc/self/uid_map"), _id_map("/proc/self/gid_map")

    def fits(base: int) -> bool:
        return all(any(lo <= base and base + _SLOTS <= hi for lo, hi in ranges) for ranges in (uids, gids))

    if fits(_SLOT_BASE):
        return _SLOT_BASE
    # stay below the overflow ids (65534/65535) that end a 64 Ki-id namespace
    candidates = [hi - _SLOTS - 2 for _, hi in uids if hi - _SLOTS - 2 >= _MIN_SANDBOX_UID]
    for base in sorted(candidates, reverse=True):
        if fits(base):
            return base
    raise RsiError("the user namespace maps too few uids to give rollouts their own; run as a normal user")


def _id_map(path: str) -> list[tuple[int, int]]:
    try:
        with open(path) as f:
            return [(int(inner), int(inner) + int(count)) for inner, _, count in (line.split() for line in f)]
    except OSError:  # no user namespaces: every id exists
        return [(0, 2**32 - 1)]


@functools.lru_cache(maxsize=1)
def _slot_dir() -> str:
    for parent in _SLOT_DIRS:
        path = os.path.join(parent, "rsi-sandbox-slots")
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            return path
        except OSError:
            continue
    raise RsiError(f"no writable directory for sandbox slot files among {_SLOT_DIRS}")


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
        return None
