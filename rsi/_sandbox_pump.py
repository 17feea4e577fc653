"""One rollout's process, driven on one selector: stdin fed, stdout and stderr drained, the exit
seen through a pidfd (or a container's exit pipe), so a rollout costs no extra thread and its end
is noticed the moment it happens. An online rollout converses through a ``Dialogue``.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rsi import _sandbox_slots
from rsi.errors import RsiError

if TYPE_CHECKING:
    from rsi.sandbox import Limits

_TAIL_BYTES = 4096  # what a trace keeps of stdout/stderr
_DIALOGUE_LINE_BYTES = 1 << 20  # one answer in a dialogue (a bin index, a node) is far shorter
_READ_BYTES = 1 << 16
_EXIT_GRACE_S = 1.0  # after the main process exits, how long pipes held by escapees may stay open
_POLL_S = 0.01  # exit polling where pidfd is missing (non-Linux, old kernels)


class DialogueError(Exception):
    """The program's side of a dialogue broke the protocol (the rollout's protocol_error)."""


class Dialogue:
    """The trusted side of an online rollout: it reveals the task one message at a time.

    ``opening`` is written first; each line the program prints goes to ``reply``, whose bytes
    are written next (None: nothing more to say, stdin is closed). ``result`` is the output
    object once the program exited 0. ``reply`` and ``result`` raise ``DialogueError`` on a
    line or an ending that breaks the protocol; the program is then stopped."""

    def opening(self) -> bytes:
        raise NotImplementedError

    def reply(self, line: bytes) -> bytes | None:
        raise NotImplementedError

    def result(self) -> dict:
        raise NotImplementedError


# ---- running: one selector for stdin, stdout, stderr and the exit -------------------------


@dataclass
class _Run:
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    overflow: bool = False
    broken: str = ""  # a dialogue's protocol error
    timed_out: bool = False
    returncode: int | None = None
    cpu_s: float = 0.0
    duration_s: float = 0.0
    oom_killed: bool = False  # a container's memory limit (the cgroup's), as the engine reports it


class _Pump:
    """Feeds stdin, drains stdout/stderr and waits for the exit on one selector, so a rollout
    costs no extra thread and its end is seen the moment it happens."""

    def __init__(
        self,
        proc: subprocess.Popen,
        payload: bytes,
        limits: Limits,
        kill_all: Callable[[], None],
        dialogue: Dialogue | None = None,
    ):
        self.proc, self.payload, self.limits, self.kill_all = proc, bytearray(payload), limits, kill_all
        self.dialogue, self.partial, self.said_all = dialogue, bytearray(), dialogue is None
        self.stdin_registered = True  # a dialogue's stdin is unregistered while it awaits an answer
        self.run_ = _Run()
        self.started = time.monotonic()
        self.deadline = self.started + limits.timeout_s
        self.exited_at: float | None = None
        self.reaped: tuple[int, Any] | None = None
        self.sel = selectors.DefaultSelector()
        if proc.stdin is None or proc.stdout is None or proc.stderr is None:
            raise RsiError("a rollout process needs pipes for stdin, stdout and stderr")  # _start opens all three
        self.stdin, self.stdout, self.stderr = proc.stdin, proc.stdout, proc.stderr
        self.open: set[int] = {self.stdout.fileno(), self.stderr.fileno()}
        for fd in self.open:
            self.sel.register(fd, selectors.EVENT_READ)
        self.stdin_fd = self.stdin.fileno()
        os.set_blocking(self.stdin_fd, False)
        self.sel.register(self.stdin_fd, selectors.EVENT_WRITE)
        self.sent = 0
        exit_fd = getattr(proc, "exit_fd", None)  # a container's exit, as the docker jail signals it
        self.pidfd = exit_fd if exit_fd is not None else _sandbox_slots._pidfd(proc.pid)
        if self.pidfd is not None:
            self.sel.register(self.pidfd, selectors.EVENT_READ)

    def run(self) -> _Run:
        try:
            self._loop()
        finally:
            if self.exited_at is None:  # timeout, overflow, or our own exception: end it all
                self.kill_all()
                self._reap()
            self._close()
        return self.run_

    def _loop(self) -> None:
        while self.open or self.exited_at is None:
            end = self.deadline if self.exited_at is None else min(self.deadline, self.exited_at + _EXIT_GRACE_S)
            left = end - time.monotonic()
            if left <= 0:
                self.run_.timed_out = self.exited_at is None
                return
            for key, _ in self.sel.select(left if self.pidfd is not None else min(left, _POLL_S)):
                if key.fd == self.pidfd:
                    self._on_exit()
                elif key.fd == self.stdin_fd:
                    self._feed()
                elif not self._drain(key.fd):
                    return
            if self.pidfd is None and self.exited_at is None and self._exited():
                self._on_exit()

    def _on_exit(self) -> None:
        # the main process is a zombie until reaped, so its pid cannot be reused under killpg
        self.kill_all()
        self._reap()
        if self.pidfd is not None:
            self.sel.unregister(self.pidfd)

    def _exited(self) -> bool:
        """Without a pidfd: peek at the exit, leaving the zombie in place where waitid allows."""
        if hasattr(os, "waitid"):
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)  # macOS before 3.13: reap now
        if pid:
            self.reaped = (status, usage)
        return bool(pid)

    def _reap(self) -> None:
        collect = getattr(self.proc, "collect", None)  # a container: the engine has its exit code
        if collect is not None:
            self.run_.returncode, self.run_.cpu_s = collect()
            self.run_.oom_killed = bool(getattr(self.proc, "oom_killed", False))
        else:
            status, usage = self.reaped or os.wait4(self.proc.pid, 0)[1:]
            self.run_.returncode = self.proc.returncode = os.waitstatus_to_exitcode(status)
            self.run_.cpu_s = usage.ru_utime + usage.ru_stime
        self.run_.duration_s = time.monotonic() - self.started
        self.exited_at = time.monotonic()

    def _feed(self) -> None:
        try:
            self.sent += os.write(self.stdin_fd, self.payload[self.sent : self.sent + _READ_BYTES])
        except BlockingIOError:
            self._want_write(True)
            return
        except OSError:  # the candidate closed stdin or exited: what it did not read is its loss
            self.sent = len(self.payload)
        if self.sent < len(self.payload):
            self._want_write(True)
            return
        self._want_write(False)
        if not self.said_all:  # a dialogue: the next message waits for the program's answer
            return
        self.stdin.close()
        self.stdin_fd = -1

    def _want_write(self, on: bool) -> None:
        if on != self.stdin_registered:
            if on:
                self.sel.register(self.stdin_fd, selectors.EVENT_WRITE)
            else:
                self.sel.unregister(self.stdin_fd)
            self.stdin_registered = on

    def _drain(self, fd: int) -> bool:
        """False once stdout is over its cap (the rollout is then killed)."""
        data = os.read(fd, _READ_BYTES)
        if not data:
            self.sel.unregister(fd)
            self.open.discard(fd)
            return True
        if fd == self.stderr.fileno():
            err = self.run_.stderr
            err += data
            if len(err) > 2 * _TAIL_BYTES:
                del err[:-_TAIL_BYTES]
            return True
        out, cap = self.run_.stdout, self.limits.stdout_max_bytes
        if len(out) + len(data) > cap:
            out += data[: cap - len(out) + 1]
            del out[cap:]
            self.run_.overflow = True
            return False
        if self.dialogue is None:
            out += data
            return True
        if len(out) > _TAIL_BYTES:  # a dialogue's transcript is counted against the cap, kept as a tail
            del out[: len(out) - _TAIL_BYTES]
        out += data
        return self._converse(self.dialogue, data)

    def _converse(self, dialogue: Dialogue, data: bytes) -> bool:
        """Answer every complete line; False once the program broke the protocol."""
        self.partial += data
        *lines, rest = self.partial.split(b"\n")
        self.partial = bytearray(rest)
        if len(self.partial) > _DIALOGUE_LINE_BYTES:  # never ends a line: held memory stays bounded
            self.run_.broken = f"a dialogue line longer than {_DIALOGUE_LINE_BYTES} bytes"
            return False
        for line in lines:
            if self.said_all:
                self.run_.broken = "a line after the dialogue ended"
                return False
            try:
                message = dialogue.reply(bytes(line))
            except DialogueError as exc:
                self.run_.broken = str(exc)
                return False
            if message is None:
                self.said_all = True
            else:
                self.payload += message
            if self.stdin_fd >= 0 and not self.stdin_registered:
                self._feed()  # in lockstep the pipe is empty: the write goes through at once
        return True

    def _close(self) -> None:
        self.sel.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
        for stream in (self.stdin, self.stdout, self.stderr):
            stream.close()
