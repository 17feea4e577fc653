"""Run one rollout of a ``program`` target so that nothing the candidate does can crash or stall
its caller (a Ray worker process evaluating many rollouts), reach the caller's secrets, or disturb the
rollouts running beside it.

Protocol. ``argv`` (usually ``[sys.executable, entry_script]``) runs with the checkout as cwd; the
task arrives as one JSON document on stdin; the program answers with one JSON object on stdout.
If the whole of stdout is not one JSON value, its last non-empty line is tried instead:
candidates print debug lines, and a result printed last is still a result. A stdout that is a
JSON value but not an object is a protocol error either way.

Statuses: ``ok`` (exit 0, an object holding every required key); ``protocol_error`` (exit 0 with
anything else on stdout, or stdout over ``stdout_max_bytes``); ``timeout`` (the wall clock, or
RLIMIT_CPU); ``error`` (a non-zero exit or a signal: a MemoryError under RLIMIT_AS, a file over
RLIMIT_FSIZE, a crash). Only our own misuse raises (``RsiError``): a missing cwd, an interpreter
that does not exist, a machine where privileges cannot be dropped.

Containment:

* Environment: an allowlist (PATH, LANG, LANGUAGE, LC_*, TZ, PYTHONHASHSEED) plus thread caps
  for the numeric libraries (one thread each, so numpy neither fills the process budget nor the
  address-space limit), then the variables the config names in ``env_passthrough``, then
  ``env``. HOME and TMPDIR point at a fresh directory removed after the rollout. Nothing else of
  the caller's environment (model keys, tokens, RAY_*) reaches the candidate. A venv interpreter
  finds its site-packages from its own path, so neither VIRTUAL_ENV nor PYTHONPATH is passed.
* Process tree: a new session; its process group is SIGKILLed at the deadline and again right
  after the main process exits, so background orphans end with the rollout.
* rlimits: CPU (``cpu_s``; SIGXCPU counts as a timeout), AS, FSIZE, NPROC and CORE=0, entered
  together with the uid below by util-linux ``prlimit`` and ``setpriv`` exec'd in front of the
  program (a vfork spawn, whose cost does not grow with the caller's memory as a fork's does), or
  by a preexec function where those tools are missing.
* I/O (``rsi._sandbox_pump``): stdout and stderr are read incrementally from one selector
  together with a pidfd for the exit (no thread and no polling interval per rollout); stdout is
  stored up to its cap, then the rollout is killed; of stderr only the tail is kept.

Fork loops when the caller is root (the usual case in containers and on these machines). Linux
exempts uid 0 from RLIMIT_NPROC outright (fork skips the check for the root user, whatever its
capabilities), so the limit alone bounds nothing. A root caller therefore runs each rollout
under a uid of its own (``rsi._sandbox_slots``): one of ``_SLOTS`` uids from ``_SLOT_BASE``
(or the top of the mapped range inside a user namespace), held through an flock on a slot file
that every process on the machine shares, and left to rest after use while init reaps the
zombies of its killed processes.
With a uid per rollout, RLIMIT_NPROC = ``max_procs + 1`` is a per-rollout budget, so concurrent
rollouts neither share nor starve it (a shared uid such as ``nobody`` would make 8 concurrent
rollouts split one budget, and let a hostile one exhaust it for the others). It also gives a
cleanup by identity: after the rollout every process of that uid is killed, those that left the
process group with setsid included. The processes are found by a scan of /proc, not by a helper
that becomes the uid and calls kill(-1): forking a large Ray worker process costs time in proportion to
its memory. The scan reads the owner of /proc/PID, which is root for a process that made itself
non-dumpable, so one that both leaves the group and turns non-dumpable (ssh-agent does) is the
one escapee this misses.

The candidate keeps no capability except CAP_DAC_READ_SEARCH (as an ambient capability, when the
caller has it), because interpreters often live under a directory only root may enter (a pyenv
in /root): it may read and traverse files, but not write what it does not own, signal other
users' processes or read their /proc environ. no_new_privs stops setuid binaries from regaining
privilege. The checkout stays owned by the caller and gets go+rX, so the candidate can read but
not change it (write to $TMPDIR or $HOME); its HOME is owned by its uid.

A non-root caller cannot change uid: RLIMIT_NPROC counts every task of the user, so it is set to
the user's current task count plus ``max_procs``; concurrent rollouts share that headroom, and a
process that escapes the process group with setsid can outlive the rollout.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsi import jail, jail_docker
from rsi._sandbox_pump import _TAIL_BYTES, Dialogue, DialogueError, _Pump, _Run
from rsi._sandbox_slots import (
    _CAP_DAC_READ_SEARCH,
    _PR_SET_NO_NEW_PRIVS,
    _become,
    _capset_args,
    _has_cap,
    _libc,
    _ok,
    _Slot,
    _slot_base,
)
from rsi.errors import ConfigError, RsiError

STATUSES = ("ok", "error", "timeout", "protocol_error")
BACKENDS = ("auto", "bwrap", "docker", "process")


_ENV_ALLOW = ("PATH", "LANG", "LANGUAGE", "TZ", "PYTHONHASHSEED")
_ENV_FIXED = {
    "PYTHONDONTWRITEBYTECODE": "1",  # a read-only checkout, and no __pycache__ to commit
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2",  # each glibc arena reserves 64 MB of address space under RLIMIT_AS
}


@dataclass(frozen=True)
class Limits:
    """What one rollout may use. Config maps onto these fields one to one."""

    timeout_s: float = 60.0  # wall clock
    cpu_s: int | None = None  # RLIMIT_CPU; None -> ceil(timeout_s) + 1
    memory_mb: int = 2048  # RLIMIT_AS
    max_procs: int = 64  # processes and threads the rollout may create
    file_size_mb: int = 64  # RLIMIT_FSIZE
    stdout_max_bytes: int = 8 * 1024 * 1024  # beyond: truncated, protocol_error
    tmpfs_mb: int = 64  # each of the jail's private /tmp and /dev/shm
    open_files: int = 256  # RLIMIT_NOFILE
    backend: str = "auto"  # auto (bwrap on Linux) | bwrap | process (uncontained, explicit opt-in)

    def __post_init__(self):
        for name in (
            "timeout_s",
            "memory_mb",
            "max_procs",
            "file_size_mb",
            "stdout_max_bytes",
            "tmpfs_mb",
            "open_files",
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(f"sandbox limit {name} must be positive, got {getattr(self, name)!r}")
        if self.cpu_s is not None and self.cpu_s <= 0:
            raise ConfigError(f"sandbox limit cpu_s must be positive, got {self.cpu_s!r}")

    @property
    def cpu_limit_s(self) -> int:
        return self.cpu_s if self.cpu_s is not None else math.ceil(self.timeout_s) + 1


@dataclass
class Outcome:
    status: str  # "ok" | "error" | "timeout" | "protocol_error"
    output: dict | None  # the parsed JSON object when status == "ok"
    returncode: int | None  # negative: killed by that signal
    duration_s: float
    stdout_tail: str  # last few KB, for traces
    stderr_tail: str
    reason: str  # one line: why it is not ok ("" when ok)


def scrubbed_env(passthrough: Iterable[str] = (), extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The candidate's whole environment: the allowlist, the variables named in ``passthrough``
    (taken from ours, skipped when unset), then ``extra``."""
    env = {k: v for k, v in os.environ.items() if k in _ENV_ALLOW or k.startswith("LC_")}
    env.setdefault("PATH", os.defpath)
    env.update(_ENV_FIXED)
    for name in passthrough:
        if name in os.environ:
            env[name] = os.environ[name]
    env.update(extra or {})
    return env


def run_program(
    argv: Sequence[str],
    cwd: Path,
    stdin_obj: Any,
    limits: Limits = Limits(),
    env_passthrough: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    required_keys: Iterable[str] = (),
    harness: Mapping[str, str] | None = None,
    binds: Mapping[str, str] | None = None,
    dialogue: Dialogue | None = None,
) -> Outcome:
    """Run one rollout to its end; every candidate behaviour comes back as an Outcome.

    ``harness`` maps fixed host files (a benchmark's skeleton) to the names they have under
    ``/harness`` in the jail; ``argv`` may name them by host path. With the ``process`` backend
    they are run where they lie. ``binds`` maps host directories to absolute paths in the jail,
    writable (a model proxy's socket); the process backend ignores them.

    With a ``dialogue`` (an online problem) stdin is not one document: the trusted side answers
    each line the program prints with the next message, so the program never holds more than
    the dialogue has chosen to reveal; ``stdin_obj`` is unused and the output is the dialogue's
    own ``result()``."""
    argv = [os.fspath(a) for a in argv]
    cwd = Path(cwd)
    payload = _first_input(argv, cwd, stdin_obj, dialogue)
    backend = resolve_backend(limits.backend)
    if backend == "docker":  # the container is the jail: no slot uid, no host home
        run = _run_in_container(argv, cwd, payload, limits, env_passthrough, env, harness, binds, dialogue)
        if isinstance(run, Outcome):
            return run
        return _outcome(run, limits, required_keys, dialogue)
    jailed = backend == "bwrap"
    slot = _Slot.acquire() if os.geteuid() == 0 else None
    home = None if jailed else tempfile.mkdtemp(prefix="rsi-rollout-")
    try:
        if home is None:  # jailed: the jail's private /tmp is the home
            jail.probe(_probe_uid() if slot is not None else None)  # once per process
        elif slot is not None:
            os.chown(home, slot.uid, slot.uid)
            _open_to_others(cwd)
        sandbox_env = _rollout_env(home or "/tmp", env_passthrough, env)
        with _one_cpu(dialogue is not None):
            proc = _start(argv, cwd, sandbox_env, limits, slot, dict(harness or {}) if jailed else None, binds)
            if isinstance(proc, Outcome):
                return proc
            run = _Pump(proc, payload, limits, functools.partial(_kill_all, proc.pid, slot), dialogue).run()
        if jailed and run.returncode is not None:
            run.returncode = jail.exit_code(run.returncode)
    finally:
        if slot is not None:
            slot.release()
        if home is not None:
            _remove_tree(home)
    return _outcome(run, limits, required_keys, dialogue)


def _run_in_container(
    argv: list[str],
    cwd: Path,
    payload: bytes,
    limits: Limits,
    env_passthrough: Iterable[str],
    env: Mapping[str, str] | None,
    harness: Mapping[str, str] | None,
    binds: Mapping[str, str] | None,
    dialogue: Dialogue | None,
    probe: bool = True,
) -> _Run | Outcome:
    """One rollout in a Docker container (``rsi.jail_docker``), pumped like any child; the
    container and its checkout volume are removed whatever happened."""
    if probe:
        _probe_docker()  # once per process
    sandbox_env = _rollout_env("/tmp", env_passthrough, env)  # the container's private /tmp
    exe = _resolve(argv[0], cwd, sandbox_env.get("PATH", os.defpath))
    if exe is None:
        return _cannot_start(argv[0], cwd, "not found or not executable")
    proc = jail_docker.start([exe, *argv[1:]], cwd, sandbox_env, limits, dict(harness or {}), binds)
    try:
        return _Pump(proc, payload, limits, proc.kill, dialogue).run()  # type: ignore[arg-type]
    finally:
        proc.remove()


def _rollout_env(home: str, passthrough: Iterable[str], extra: Mapping[str, str] | None) -> dict[str, str]:
    """The candidate's environment, with ``home`` as its HOME and temporary directory."""
    private = dict.fromkeys(("HOME", "TMPDIR", "TEMP", "TMP"), home)
    return scrubbed_env(passthrough, {**private, **(extra or {})})


@functools.cache
def _probe_docker() -> None:
    """Run the interpreter in one container the way a rollout will, or raise ``JailUnavailable``
    naming what is missing (no engine, no SDK, containers that do not start)."""
    limits = Limits(timeout_s=60)
    with tempfile.TemporaryDirectory(prefix="rsi-docker-probe-") as tmp:
        argv = [sys.executable, "-c", "import json, os; print(json.dumps({'uid': os.getuid()}))"]
        run = _run_in_container(argv, Path(tmp), b"", limits, (), None, None, None, None, probe=False)
    out = run if isinstance(run, Outcome) else _outcome(run, limits, (), None)
    if out.status != "ok" or out.output != {"uid": jail.JAIL_UID}:
        why = out.reason or out.stderr_tail[-200:]
        raise jail_docker.unavailable(f"containers that run the interpreter (a probe ended {out.status}: {why})")


def _outcome(run: _Run, limits: Limits, required_keys: Iterable[str], dialogue: Dialogue | None) -> Outcome:
    status, output, reason = _verdict(run, limits, required_keys, dialogue)
    return Outcome(
        status=status,
        output=output,
        returncode=run.returncode,
        duration_s=run.duration_s,
        stdout_tail=_tail(run.stdout),
        stderr_tail=_tail(run.stderr),
        reason=reason,
    )


@contextlib.contextmanager
def _one_cpu(enabled: bool) -> Iterator[None]:
    """A dialogue's two sides on one CPU: this thread, and the child started inside (which
    inherits the affinity). They take strict turns, so they never need two CPUs at once, and a
    hand-over on one CPU is a plain context switch, where across CPUs every message waits for the
    other one to wake (an inter-processor interrupt; in a VM, an exit to the hypervisor): 6 µs
    against about 50 µs per round trip on the machines measured. The CPU is the one this thread
    runs on now, which the scheduler chose; the thread gets its own affinity back afterwards."""
    before = _pin_to_current_cpu() if enabled else None
    try:
        yield
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)


def _pin_to_current_cpu() -> set[int] | None:
    """Pin the calling thread to the CPU it runs on; its previous affinity, or None if nothing
    was changed (no affinity support, one CPU allowed anyway, the CPU unknown)."""
    try:
        before = os.sched_getaffinity(0)
        with open("/proc/thread-self/stat", "rb") as f:
            cpu = int(f.read().rsplit(b")", 1)[1].split()[36])  # field 39, "processor"
        if len(before) < 2 or cpu not in before:
            return None
        os.sched_setaffinity(0, {cpu})
        return before
    except (AttributeError, OSError, ValueError, IndexError):  # not Linux, or no /proc
        return None


def _first_input(argv: list[str], cwd: Path, stdin_obj: Any, dialogue: Dialogue | None) -> bytes:
    """What the program reads first (the task as one JSON line, or the dialogue's opening), after
    the command and the checkout are checked."""
    if not argv:
        raise RsiError("run_program needs a command")
    if not cwd.is_dir():
        raise RsiError(f"checkout {cwd} does not exist")
    try:
        return dialogue.opening() if dialogue is not None else (json.dumps(stdin_obj) + "\n").encode()
    except (TypeError, ValueError) as exc:
        raise RsiError(f"task input is not JSON-serialisable: {exc}") from exc


def resolve_backend(name: str) -> str:
    """``auto`` is the bubblewrap jail on Linux; elsewhere there is no automatic choice (the
    weak ``process`` backend is only ever an explicit opt-in)."""
    if name == "auto":
        if not sys.platform.startswith("linux"):
            raise ConfigError(
                "no jail on this platform: set target.limits.backend to process to run candidates "
                "uncontained (Linux runs them in bubblewrap)"
            )
        return "bwrap"
    if name not in BACKENDS:
        raise ConfigError(f"unknown sandbox backend {name!r}; valid: {', '.join(BACKENDS)}")
    return name


def check_backend(name: str) -> str:
    """Start-up check: the backend this machine will use, or ``JailUnavailable`` saying what is
    missing (bubblewrap, user namespaces) before anything runs."""
    backend = resolve_backend(name)
    if backend == "bwrap":
        jail.probe(_probe_uid() if os.geteuid() == 0 else None)
    elif backend == "docker":
        _probe_docker()
    return backend


def _probe_uid() -> int:
    """The uid start-up probes run as: just below the slots, so never a rollout's."""
    return _slot_base() - 1


# ---- starting the child ------------------------------------------------------------------


def _bwrap_command(
    tools: tuple[str, str],
    argv: list[str],
    cwd: Path,
    rlimits: list[tuple[int, tuple[int, int]]],
    uid: int | None,
    limits: Limits,
    harness: dict[str, str],
    binds: Mapping[str, str] | None,
    fds: list[int],
) -> list[str]:
    """The argv that enters the bubblewrap jail: rlimits and the uid change through ``tools``,
    then bubblewrap with the checkout copied in from ``fds`` (see ``jail.command``)."""
    enter = _jail_argv(tools, [], rlimits, uid, False)
    return jail.command(
        jail.translate(argv, cwd, harness),
        cwd,
        {h: n for h, n in harness.items()},
        limits.tmpfs_mb,
        stage=uid is not None,
        enter=enter,
        binds=binds,
        fds=fds,
    )


def _start(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    limits: Limits,
    slot: _Slot | None,
    harness: dict[str, str] | None = None,
    binds: Mapping[str, str] | None = None,
):
    """The running child, or an ``error`` Outcome when the candidate's own executable cannot start.

    The jail (uid, capability, rlimits, no_new_privs) is entered through util-linux ``prlimit``
    and ``setpriv`` exec'd in front of the program wherever they work: the spawn then needs no
    preexec_fn and is a vfork, ~1 ms whatever the caller's size, where forking a 150 MB Ray worker process
    costs ~30 ms. Elsewhere (macOS, images without util-linux) a preexec_fn enters the same jail.
    """
    exe = _resolve(argv[0], cwd, env.get("PATH", os.defpath))
    if exe is None:
        return _cannot_start(argv[0], cwd, "not found or not executable")
    argv = [exe, *argv[1:]]
    rlimits = _rlimits(limits, slot, jailed=harness is not None)
    uid = slot.uid if slot is not None else None
    fds: list[int] = []  # the checkout's files, read by bubblewrap into the jail
    if harness is not None:  # the bubblewrap jail: rlimits and the uid change, then bubblewrap
        tools = _util_linux(uid is not None, False)
        if tools is None:
            raise jail.JailUnavailable("util-linux prlimit and setpriv are needed to enter the jail")
        cmd = _bwrap_command(tools, argv, cwd, rlimits, uid, limits, harness, binds, fds)
        preexec, cwd = None, Path("/")
    else:
        keep_cap = uid is not None and _has_cap(_CAP_DAC_READ_SEARCH)
        tools = _util_linux(uid is not None, keep_cap)
        if tools is not None:
            cmd, preexec = _jail_argv(tools, argv, rlimits, uid, keep_cap), None
        else:
            cmd, preexec = argv, _jail(rlimits, uid, keep_cap)
    try:
        return subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec,
            close_fds=True,
            bufsize=0,
            pass_fds=fds,
        )
    except subprocess.SubprocessError as exc:  # raised by preexec: rlimits or the uid change
        raise RsiError(f"could not enter the sandbox ({exc}); root needs CAP_SETUID and CAP_SETGID") from exc
    except OSError as exc:
        if tools is not None:
            raise RsiError(f"cannot start {cmd[0]}: {exc}") from exc
        return _cannot_start(argv[0], cwd, exc.strerror)
    finally:
        for fd in fds:  # the child holds its own copies until bubblewrap has read the files
            os.close(fd)


def _resolve(name: str, cwd: Path, path: str) -> str | None:
    """What exec will run for ``name``: a path relative to cwd when it has a slash, else the
    first match on the child's PATH."""
    if "/" in name:
        return str(cwd / name) if _executable(cwd / name) else None
    return next((str(Path(d, name)) for d in path.split(os.pathsep) if d and _executable(Path(d, name))), None)


def _executable(path: Path) -> bool:
    # effective ids: plain access() drops every capability of a non-root caller, so inside a
    # rollout (its own uid plus CAP_DAC_READ_SEARCH) it would deny what exec allows
    effective = os.access in os.supports_effective_ids
    return path.is_file() and os.access(path, os.X_OK, effective_ids=effective)


def _cannot_start(name: str, cwd: Path, why: str | None) -> Outcome:
    """The candidate's own executable failing to start is its error; any other is ours."""
    if "/" in name and (cwd / name).resolve().is_relative_to(cwd.resolve()):
        return Outcome("error", None, None, 0.0, "", "", f"cannot start {name}: {why}")
    raise RsiError(f"cannot start {name}: {why}")


_PRLIMIT_NAMES = {
    resource.RLIMIT_CPU: "cpu",
    resource.RLIMIT_AS: "as",
    resource.RLIMIT_FSIZE: "fsize",
    resource.RLIMIT_NPROC: "nproc",
    resource.RLIMIT_CORE: "core",
    resource.RLIMIT_NOFILE: "nofile",
}


def _jail_argv(tools: tuple[str, str], argv: list[str], rlimits, uid: int | None, keep_cap: bool) -> list[str]:
    prlimit, setpriv = tools

    def value(v: int) -> str:
        return "unlimited" if v == resource.RLIM_INFINITY else str(v)

    cmd = [prlimit, *(f"--{_PRLIMIT_NAMES[res]}={value(s)}:{value(h)}" for res, (s, h) in rlimits), "--", setpriv]
    if uid is not None:
        cmd += [f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        if keep_cap:
            cmd += ["--inh-caps=-all,+dac_read_search", "--ambient-caps=-all,+dac_read_search"]
    cmd += ["--no-new-privs", "--"]
    return [*cmd, *argv]


@functools.cache
def _util_linux(become_uid: bool, keep_cap: bool) -> tuple[str, str] | None:
    """prlimit and setpriv, if this machine has both and they run the whole jail: tried once
    with the very flags a rollout uses, so a setpriv too old or too restricted falls back to
    preexec instead of failing every rollout as if the candidate had."""
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/bin", "/bin", "/usr/sbin", "/sbin"])
    prlimit, setpriv = shutil.which("prlimit", path=search), shutil.which("setpriv", path=search)
    if prlimit is None or setpriv is None:
        return None
    tools = (prlimit, setpriv)
    probe_uid = _probe_uid() if become_uid else None
    current = [(res, resource.getrlimit(res)) for res in _PRLIMIT_NAMES]
    cmd = _jail_argv(tools, [tools[1], "--dump"], current, probe_uid, keep_cap)
    try:
        done = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={"PATH": os.defpath},
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return tools if done.returncode == 0 else None


def _jail(rlimits, uid: int | None, keep_cap: bool) -> Callable[[], None]:
    """The same jail as a preexec function. It runs in the forked child between fork and exec,
    so it only calls functions resolved in the parent and allocates next to nothing."""
    libc = _libc()
    caps = _capset_args(_CAP_DAC_READ_SEARCH) if keep_cap else None

    def preexec():
        if uid is not None:
            _become(uid, caps, libc)
        # last: the child is still a copy of the caller, whose address space may exceed RLIMIT_AS
        for res, pair in rlimits:
            resource.setrlimit(res, pair)
        if libc is not None:
            _ok(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))

    return preexec


def _rlimits(limits: Limits, slot: _Slot | None, jailed: bool = False) -> list[tuple[int, tuple[int, int]]]:
    mb = 1024 * 1024
    cpu = limits.cpu_limit_s
    # the uid is the rollout's own: the count starts at its main process (in the jail also
    # bubblewrap and the PID namespace's init)
    own = 3 if jailed else 1
    if slot is not None:
        nproc = limits.max_procs + own
    elif os.path.isdir("/proc/self/task"):
        nproc = _user_tasks(os.getuid()) + limits.max_procs + own
    else:
        nproc = None
    pairs = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),  # SIGXCPU at the soft limit, SIGKILL a second later
        (resource.RLIMIT_FSIZE, (limits.file_size_mb * mb,) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_NOFILE, (limits.open_files,) * 2),
    ]
    if nproc is not None:
        pairs.append((resource.RLIMIT_NPROC, (nproc, nproc)))
    pairs.append((resource.RLIMIT_AS, (limits.memory_mb * mb,) * 2))  # last: see _jail
    # the child sets them after giving up privilege, so it can only lower the caller's limits
    return [(res, _clamp(pair, resource.getrlimit(res)[1])) for res, pair in pairs]


def _clamp(pair: tuple[int, int], hard: int) -> tuple[int, int]:
    if hard == resource.RLIM_INFINITY:
        return pair
    return (min(pair[0], hard), min(pair[1], hard))


def _user_tasks(uid: int) -> int:
    """Tasks (threads included: RLIMIT_NPROC counts them) the user runs now."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:  # exited while we looked
                pass
    return count


def _open_to_others(root: Path) -> None:
    """go+rX on the checkout, so a rollout under its own uid can read it without any capability
    (mkdtemp makes the top directory 0700). Symlinks are left alone: chmod would follow them."""
    for dirpath, _, filenames in os.walk(root):
        _add_mode(dirpath, 0o055)
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                _add_mode(path, 0o055 if st.st_mode & stat.S_IXUSR else 0o044, st.st_mode)


def _add_mode(path: str, bits: int, mode: int | None = None) -> None:
    mode = os.stat(path).st_mode if mode is None else mode
    if mode & bits != bits:
        os.chmod(path, stat.S_IMODE(mode) | bits)


def _kill_all(pid: int, slot: _Slot | None) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if slot is not None:
        slot.sweep()


# ---- verdict -----------------------------------------------------------------------------


def _verdict(
    run: _Run, limits: Limits, required_keys: Iterable[str], dialogue: Dialogue | None = None
) -> tuple[str, dict | None, str]:
    if run.broken:
        return "protocol_error", None, _clip(run.broken)
    if run.overflow:
        return "protocol_error", None, f"stdout exceeded {limits.stdout_max_bytes} bytes"
    if run.timed_out:
        return "timeout", None, f"wall-clock limit of {limits.timeout_s:g} s reached"
    code = run.returncode
    if code is None:  # _Pump.run reaps the process whatever ended the rollout
        raise RsiError("the rollout process was not reaped")
    if code == -signal.SIGXCPU or (code == -signal.SIGKILL and run.cpu_s >= limits.cpu_limit_s):
        return "timeout", None, f"CPU limit of {limits.cpu_limit_s} s reached"
    if code == -signal.SIGKILL and run.oom_killed:
        return "error", None, f"memory limit reached: the container's {jail_docker.memory_limit_mb(limits)} MB"
    if code != 0:
        what = f"killed by {_signal_name(-code)}" if code < 0 else f"exit code {code}"
        last = _last_line(run.stderr)
        return "error", None, f"{what}: {last}" if last else what
    if dialogue is not None:
        try:
            return "ok", dialogue.result(), ""
        except DialogueError as exc:
            return "protocol_error", None, _clip(str(exc))
    return _parse(bytes(run.stdout), required_keys)


def _parse(stdout: bytes, required_keys: Iterable[str]) -> tuple[str, dict | None, str]:
    from rsi.untrusted import Invalid, Malformed, loads  # bounded depth and size, finite numbers

    text = stdout.decode("utf-8", errors="replace").strip()
    if not text:
        return "protocol_error", None, "no output on stdout"
    try:
        obj = loads(text)
    except Invalid as whole:
        last = text.rsplit("\n", 1)[-1].strip()
        try:
            if last == text:
                raise whole
            obj = loads(last)
        except Invalid as exc:
            broken = next((e for e in (whole, exc) if not isinstance(e, Malformed)), None)
            if broken is not None:  # JSON, but over a bound: deep nesting, NaN, too large
                return "protocol_error", None, f"stdout: {broken}"
            return "protocol_error", None, f"stdout is not a JSON object (last line: {_clip(last)})"
    if not isinstance(obj, dict):
        return "protocol_error", None, f"stdout is a JSON {type(obj).__name__}, not an object"
    missing = [k for k in required_keys if k not in obj]
    if missing:
        return "protocol_error", None, f"output lacks required keys {missing}"
    return "ok", obj, ""


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _last_line(data: bytearray) -> str:
    lines = bytes(data[-_TAIL_BYTES:]).decode("utf-8", errors="replace").strip().splitlines()
    return _clip(lines[-1].strip()) if lines else ""


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _tail(data: bytearray) -> str:
    return bytes(data[-_TAIL_BYTES:]).decode("utf-8", errors="replace")


def _remove_tree(path: str) -> None:
    """Remove a rollout's HOME even where the candidate took its own permissions away."""

    def retry(func, target, _exc):
        try:
            os.chmod(os.path.dirname(target), 0o700)
            if os.path.isdir(target) and not os.path.islink(target):
                os.chmod(target, 0o700)
            func(target)
        except OSError:
            pass

    shutil.rmtree(path, onerror=retry)
