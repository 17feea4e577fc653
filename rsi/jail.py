"""The rollout jail: Linux namespaces, entered through bubblewrap, around every candidate process.

Everything a worker proposes is hostile code. Inside the jail a candidate sees:

* its checkout (a private writable copy) at ``/checkout``, its working directory;
* the interpreter and its libraries, read-only: ``/usr`` and the Python prefixes (the venv and
  its base), with this project's own packages masked by empty directories wherever they are
  installed there, so neither the scorers nor the benchmark data (gold answers, test sets) can be
  read from inside;
* fixed harness files a benchmark hands it on purpose, read-only under ``/harness``;
* a private, size-capped ``/tmp`` and ``/dev/shm`` (tmpfs, gone with the jail), a minimal
  ``/dev`` and a ``/proc`` of its own PID namespace.

No home directory, run directory, Ray session directory or token, no other process. It has no
capabilities, no network namespace shared with the host (no device but its own loopback, so
neither the Ray cluster nor a model endpoint is reachable), its own PID, IPC and UTS namespaces,
and may not create further user namespaces. When its main process exits or is killed, the PID
namespace goes with it: nothing it started outlives the rollout.

Root callers. Linux exempts uid 0 from RLIMIT_NPROC, and a user namespace created by root maps
its processes to uid 0 outside. So a root caller runs bubblewrap as the rollout's own slot uid
(see ``rsi.sandbox``): bubblewrap then builds the jail unprivileged, and the process budget is
per rollout. An unprivileged bubblewrap cannot open paths under a directory only root may enter
(a pyenv under ``/root``), so those are first bind-mounted onto world-traversable mount points in
a private mount namespace made with util-linux ``unshare`` (it vanishes with the rollout).

Non-root callers need unprivileged user namespaces (most distributions allow them; some ship
them off: ``kernel.unprivileged_userns_clone=0`` or an AppArmor restriction). Where bubblewrap or
user namespaces are missing, ``probe`` says so at start-up; nothing silently runs weaker.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from rsi.errors import ConfigError

CHECKOUT = "/checkout"
HARNESS = "/harness"
JAIL_UID = 1000  # the candidate's uid inside its user namespace (mapped to the caller's or the slot's)
STAGE_DIR = "/run/rsi-jail"  # root callers only: mount points for paths an unprivileged user cannot open

# This project's own top-level packages: never readable from inside, wherever installed.
OWN_PACKAGES = ("rsi", "actors", "algorithms", "cluster", "benchmarks", "targets")
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")


class JailUnavailable(ConfigError):
    """This machine cannot build the jail; the message names what is missing (exit 2, before
    anything starts: a run never falls back to a weaker sandbox by itself)."""

    def __init__(self, what: str, fix: str | None = None):
        super().__init__(
            f"the rollout jail cannot be built here: {what}. "
            + (
                fix
                or "Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), or set "
                "target.limits.backend: process to run candidates uncontained"
            )
        )


def bwrap_path() -> str | None:
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/bin", "/bin", "/usr/local/bin"])
    return shutil.which("bwrap", path=search)


@functools.cache
def python_roots() -> tuple[str, ...]:
    """Directories the interpreter and its libraries live in (real paths, outermost only)."""
    cands = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        str(Path(os.path.realpath(sys.executable)).parent.parent),
    }
    real = sorted({os.path.realpath(c) for c in cands} | cands)
    roots = [r for r in real if os.path.isdir(r) and not r.startswith("/usr/")]
    return tuple(r for r in roots if not any(r != o and r.startswith(o.rstrip("/") + "/") for o in roots))


@functools.cache
def masked_packages() -> tuple[str, ...]:
    """Directories of this project's packages that sit inside a bound root (a non-editable
    install puts them in site-packages): each is covered by an empty tmpfs in the jail."""
    out = []
    roots = python_roots() + ("/usr",)
    for name in OWN_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        for loc in (spec.submodule_search_locations or []) if spec else []:
            real = os.path.realpath(loc)
            if any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
                out.append(real)
    return tuple(sorted(set(out)))


def traversable_by_others(path: str) -> bool:
    """Whether a user with no relation to the owners can reach ``path`` (x on every ancestor)."""
    p = Path(path)
    for d in [*reversed(p.parents), p] if p.is_dir() else reversed(p.parents):
        try:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def command(
    argv: Sequence[str],
    checkout: Path,
    harness: Mapping[str, str],
    tmpfs_mb: int,
    stage: bool,
    enter: Sequence[str] = (),
    binds: Mapping[str, str] | None = None,
    fds: list[int] | None = None,
) -> list[str]:
    """The argv that runs ``argv`` in a fresh jail. ``harness`` maps host files to their names
    under ``/harness``; ``binds`` maps host paths to absolute jail paths, writable (a model
    proxy's socket directory); ``enter`` is exec'd right before bubblewrap (rlimits, the uid change).
    With ``stage`` (a root caller whose ``enter`` drops to a slot uid), sources that uid could
    not open are first bound onto mount points in a private mount namespace, as root.

    The checkout is copied into the jail's own size-capped tmpfs at ``/checkout`` from file
    descriptors opened here (appended to ``fds``; the caller passes them to the child and closes
    them after the start): the candidate's writable copy costs no host disk, is bounded like its
    ``/tmp``, and vanishes with the jail. Last, the jail's root is remounted read-only, so the
    directories bubblewrap made for its mount points are no scratch space."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise JailUnavailable("bubblewrap (bwrap) is not installed")
    staged: list[tuple[str, str]] = []

    def src(path: str) -> str:
        if not stage or traversable_by_others(path):
            return path
        point = f"{STAGE_DIR}/{len(staged)}"
        staged.append((path, point))
        return point

    size = str(tmpfs_mb * 1024 * 1024)
    cmd = [bwrap, *_isolation(), *_system_files(src)]
    # The private /tmp first: an interpreter that lives under /tmp (a venv in a clone there) is
    # bound on top of it below, instead of being hidden by it.
    cmd += _private_mounts(size)
    for root in python_roots():
        cmd += ["--ro-bind", src(root), root]
    for pkg in masked_packages():
        cmd += ["--tmpfs", pkg, "--remount-ro", pkg]
    cmd += ["--size", size, "--tmpfs", CHECKOUT]
    cmd += _copy_in(checkout, fds if fds is not None else [])
    for host, name in harness.items():
        cmd += ["--ro-bind", src(host), f"{HARNESS}/{name}"]
    for host, dest in (binds or {}).items():
        cmd += ["--bind", src(host), dest]
    cmd = [*enter, *cmd, "--remount-ro", "/", "--chdir", CHECKOUT, "--", *argv]
    return _staged_first(staged, cmd) if staged else cmd


def _private_mounts(size: str) -> list[str]:
    """The jail's own /proc and /dev, and its private /tmp and /dev/shm of ``size`` bytes each."""
    return [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        size,
        "--tmpfs",
        "/tmp",
        "--size",
        size,
        "--tmpfs",
        "/dev/shm",
    ]


def _isolation() -> list[str]:
    """bubblewrap's namespaces, capabilities and identity for the jail, and the read-only /usr."""
    return [
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        str(JAIL_UID),
        "--gid",
        str(JAIL_UID),
        "--hostname",
        "rsi-jail",
        "--ro-bind",
        "/usr",
        "/usr",
    ]


def _system_files(src: Callable[[str], str]) -> list[str]:
    """The system's top-level library links and the few /etc files the dynamic loader reads,
    read-only; ``src`` names where each /etc source is bound from (see ``command``'s ``stage``)."""
    args: list[str] = []
    for link in _SYSTEM_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    for f in _ETC_FILES:
        if os.path.exists(f):
            args += ["--ro-bind", src(f), f]
    return args


def _staged_first(staged: list[tuple[str, str]], cmd: list[str]) -> list[str]:
    """``cmd`` run after each ``(source, mount point)`` of ``staged`` is bound, as root, in a
    private mount namespace."""
    _ensure_stage_points(len(staged))
    mounts = " && ".join(f'mount --bind "${i * 2 + 1}" "${i * 2 + 2}"' for i in range(len(staged)))
    script = f'{mounts} && shift {2 * len(staged)} && exec "$@"'
    unshare = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if unshare is None:
        raise JailUnavailable("util-linux unshare is not installed (needed by a root caller)")
    return [
        unshare,
        "--mount",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        script,
        "sh",
        *(x for pair in staged for x in pair),
        *cmd,
    ]


def checkout_entries(root: Path) -> Iterator[tuple[str, str | None]]:
    """The tree at ``root`` as the jail recreates it: ``(relative path, None)`` for a directory,
    ``(relative path, host path)`` for a regular file, each directory's subdirectories before its
    files, sorted. Links and special files are left out (snapshots hold regular files only)."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        for d in sorted(dirnames):
            yield os.path.normpath(os.path.join(rel_dir, d)), None
        for f in sorted(filenames):
            path = os.path.join(dirpath, f)
            if not os.path.islink(path) and os.path.isfile(path):
                yield os.path.normpath(os.path.join(rel_dir, f)), path


def _copy_in(root: Path, fds: list[int]) -> list[str]:
    """bubblewrap arguments that recreate the tree at ``root`` under ``/checkout``: each
    directory made, each file copied from a descriptor opened now (as the caller, so a root
    caller's 0700 checkout needs no change of owner), executables kept executable."""
    args: list[str] = []
    for rel, path in checkout_entries(root):
        if path is None:
            args += ["--dir", f"{CHECKOUT}/{rel}"]
            continue
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        fds.append(fd)
        mode = "0755" if os.stat(fd).st_mode & stat.S_IXUSR else "0644"
        args += ["--perms", mode, "--file", str(fd), f"{CHECKOUT}/{rel}"]
    return args


def _ensure_stage_points(n: int) -> None:
    os.makedirs(STAGE_DIR, mode=0o755, exist_ok=True)
    for i in range(n):
        point = f"{STAGE_DIR}/{i}"
        if not os.path.isdir(point):
            os.makedirs(point, mode=0o755, exist_ok=True)


def translate(argv: Sequence[str], checkout: Path, harness: Mapping[str, str]) -> list[str]:
    """Host paths in ``argv`` as the jail sees them (the checkout and the harness files). An
    interpreter started by a relative path (``../.venv/bin/python``) reports itself as
    ``/cwd/../.venv/bin/python``, through a directory the jail does not show: the program's
    path is normalised first."""
    root = str(checkout).rstrip("/")
    if argv and os.path.isabs(argv[0]):
        argv = [os.path.normpath(argv[0]), *argv[1:]]
    out = []
    for a in argv:
        if a in harness:
            a = f"{HARNESS}/{harness[a]}"
        elif a == root or a.startswith(root + "/"):
            a = CHECKOUT + a[len(root) :]
        out.append(a)
    return out


def exit_code(returncode: int) -> int:
    """bubblewrap reports a child killed by signal N as exit code 128 + N; as Popen would."""
    return -(returncode - 128) if 128 < returncode < 128 + 65 else returncode


@functools.cache
def probe(slot_uid: int | None) -> None:
    """Build one jail the way a rollout will (as ``slot_uid`` for a root caller) and run the
    interpreter in it; raise ``JailUnavailable`` naming what is missing. Cached per process."""
    if not sys.platform.startswith("linux"):
        raise JailUnavailable("the bubblewrap jail needs Linux namespaces")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rsi-jail-probe-") as tmp:
        enter = []
        if slot_uid is not None:
            os.chown(tmp, slot_uid, slot_uid)
            enter = [
                "setpriv",
                f"--reuid={slot_uid}",
                f"--regid={slot_uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--no-new-privs",
                "--",
            ]
        # Normalised as ``translate`` does for rollouts: an interpreter started by a relative path
        # (``../.venv/bin/python``) has ``..`` in ``sys.executable``, through a folder not in the jail.
        argv = [os.path.normpath(sys.executable), "-c", "import os; print(os.getuid())"]
        cmd = command(argv, Path(tmp), {}, 1, stage=slot_uid is not None, enter=enter, fds=[])
        try:
            done = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, env={"PATH": os.defpath}
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise JailUnavailable(f"bubblewrap could not start: {exc}") from None
    if done.returncode != 0 or done.stdout.strip() != str(JAIL_UID):
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise JailUnavailable(
            f"bubblewrap could not build the jail ({why}); user namespaces may be disabled "
            "(sysctl kernel.unprivileged_userns_clone, or an AppArmor userns restriction)"
        )
