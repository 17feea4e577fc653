"""The rollout jail as a Docker container (``backend: docker``), through the docker SDK.

The contract is the bubblewrap jail's (``rsi.jail``), kept by the container engine instead of by
namespaces this process builds:

* files: the checkout is copied into a size-capped tmpfs volume at ``/checkout`` (the candidate's
  working directory, gone with the rollout); ``/usr``, the system's library links and the Python
  prefixes are bound read-only at their own paths, with this project's packages covered by empty
  tmpfs wherever they are installed there; harness files are read-only under ``/harness``; ``/tmp``
  and ``/dev/shm`` are private capped tmpfs; the root filesystem is read-only;
* no capabilities, ``no-new-privileges``, the engine's default seccomp profile, uid 1000;
* ``network_mode: none``: no device but the container's own loopback;
* its own PID namespace with a small init (``docker-init``) as PID 1, so signals and the limits'
  kills reach the candidate and nothing it started outlives the container;
* a deadline of its own: the container's main process is coreutils' ``timeout``, which kills
  the candidate ``ORPHAN_GRACE_S`` after the wall-clock limit, so a container whose caller died
  (a killed Ray worker or node, which never stops it) still ends, and everything in it with it;
  the next process to start rollouts on the engine removes such a leftover container and its
  volume once they are ``LEFTOVER_AGE_S`` old (``sweep_leftovers``);
* limits: rlimits for address space (set by the start script: the engine has none), CPU
  seconds, file size and open files, as in the bubblewrap jail; the cgroup caps the process count
  and, as a backstop, memory with the three tmpfs included and no swap.

The image is an empty one with the host's top-level links (``/bin -> usr/bin``), built locally on
first use (``rsi-jail-base``): everything the candidate runs comes from the read-only binds, so
the engine must run on the machine that starts the rollout (each Ray node's own engine). The
candidate's stdin, stdout and stderr travel over the container's attach stream; the sandbox's pump
sees them as pipes (``ContainerProcess``), exactly as it sees a bubblewrap child.
"""

from __future__ import annotations

import calendar
import functools
import io
import math
import os
import socket
import stat
import struct
import sys
import tarfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rsi import jail
from rsi.jail import CHECKOUT, HARNESS, JAIL_UID, JailUnavailable

BASE_IMAGE = "rsi-jail-base:3"
LABEL = "rsi.rollout"  # on every container and volume a rollout makes, so leftovers can be found
# /sbin is a plain directory: the engine mounts its init there (the host's /sbin is often a link
# into /usr, which is read-only here)
_DIRS = ("checkout", "tmp", "harness", "etc", "proc", "dev", "sys", "usr", "run", "sbin")
_FRAME = struct.Struct(">BxxxL")  # the attach stream's header: stream id, payload size
_GO = b"\n"  # releases the start script once the checkout has been copied in
# The start script sets the address-space limit (the engine has no RLIMIT_AS), waits for the
# line that says the checkout is in place (sh reads a pipe one byte at a time, so the candidate's
# stdin starts right after it) and becomes the candidate.
_START = 'ulimit -v {as_kb} && read -r _ && exec "$@"'
# Past the wall-clock limit, the caller has stopped the container already unless it died: then
# the container's own deadline ends it. The grace covers the checkout's copy, which happens
# after the clock inside starts and before the caller's does.
ORPHAN_GRACE_S = 30
_TIMEOUT = "/usr/bin/timeout"  # coreutils, bound read-only with /usr
# A rollout's container and volume that ended this long ago were left by a caller that died (a
# live one removes them the moment it has read the exit code): the next process that starts
# rollouts on this engine removes them.
LEFTOVER_AGE_S = 600


def unavailable(why: str) -> JailUnavailable:
    return JailUnavailable(
        f"the docker backend needs {why}",
        "Start a Docker engine on this machine (DOCKER_HOST names a non-default one), or set "
        "target.limits.backend: auto for the bubblewrap jail",
    )


@functools.cache
def client() -> Any:
    """The engine this process talks to (``DOCKER_HOST``, else the default socket), checked to
    answer, with the base image in place. Cached per process."""
    if not sys.platform.startswith("linux"):
        raise unavailable("Linux: it binds this machine's interpreter into the container")
    try:
        import docker
    except ImportError:
        raise unavailable("the docker SDK (pip install docker)") from None
    try:
        engine = docker.from_env(timeout=60)
        engine.ping()
    except Exception as exc:  # the SDK raises DockerException, requests' and socket errors alike
        raise unavailable(f"a Docker engine that answers ({type(exc).__name__}: {exc})") from None
    _ensure_base_image(engine)
    try:
        sweep_leftovers(engine)
    except Exception:  # housekeeping: an engine that refuses it still runs rollouts
        pass
    return engine


def sweep_leftovers(engine: Any, min_age_s: float | None = None) -> list[str]:
    """Remove the rollout containers that ended (or were made and never started) at least
    ``min_age_s`` (default ``LEFTOVER_AGE_S``) ago, and the rollout volumes as old that no
    container uses: what a killed worker or node leaves behind, since its containers end by
    their own deadline but nothing removes them. A running container, and its volume, are never
    touched. Returns the names removed."""
    min_age_s = LEFTOVER_AGE_S if min_age_s is None else min_age_s
    now = time.time()
    removed = []
    for container in engine.containers.list(all=True, filters={"label": LABEL}):
        state = container.attrs.get("State", {})
        if container.status in ("exited", "dead"):
            since = state.get("FinishedAt", "")
        elif container.status == "created":
            since = container.attrs.get("Created", "")
        else:
            continue
        if now - _engine_time(since) >= min_age_s:
            container.remove(force=True)
            removed.append(container.name)
    for volume in engine.volumes.list(filters={"label": LABEL, "dangling": True}):
        if now - _engine_time(volume.attrs.get("CreatedAt", "")) >= min_age_s:
            volume.remove(force=True)
            removed.append(volume.name)
    return removed


def _engine_time(stamp: str) -> float:
    """Seconds since the epoch of an engine timestamp (RFC 3339 in UTC, to the second; what
    does not parse counts as now, so it is kept)."""
    try:
        return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return time.time()


def _ensure_base_image(engine: Any) -> None:
    import docker

    try:
        engine.images.get(BASE_IMAGE)
        return
    except docker.errors.ImageNotFound:
        pass
    repo, tag = BASE_IMAGE.split(":")
    engine.api.import_image_from_data(_base_layer(), repository=repo, tag=tag)


def _base_layer() -> bytes:
    """An image layer with nothing in it but mount points and the host's top-level links."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in _DIRS:
            info = tarfile.TarInfo(name)
            # the engine copies a directory's mode onto the tmpfs mounted over it
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        for link in jail._SYSTEM_LINKS:
            if os.path.islink(link) and link != "/sbin":
                info = tarfile.TarInfo(link.lstrip("/"))
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(link)
                tar.addfile(info)
    return buf.getvalue()


def memory_limit_mb(limits: Any) -> int:
    """The container's cgroup memory limit: a backstop over the address-space limit, which binds
    each process alone, for a rollout's processes together. The cgroup also counts what the
    rollout writes to its in-memory file systems, hence a tmpfs allowance on top."""
    return limits.memory_mb + 3 * limits.tmpfs_mb


def container_args(
    argv: Sequence[str], env: Mapping[str, str], limits: Any, harness: Mapping[str, str], binds: Mapping[str, str]
) -> dict[str, Any]:
    """``containers.create`` arguments for one rollout (its checkout volume is added by ``start``)."""
    from docker.types import Mount, Ulimit

    mb = 1024 * 1024
    ro = [Mount(p, p, type="bind", read_only=True) for p in ("/usr", *jail.python_roots())]
    ro += [Mount(p, p, type="bind", read_only=True) for p in jail._SYSTEM_LINKS if _real_dir(p) and p != "/sbin"]
    ro += [Mount(f, f, type="bind", read_only=True) for f in jail._ETC_FILES if os.path.exists(f)]
    ro += [Mount(f"{HARNESS}/{name}", host, type="bind", read_only=True) for host, name in harness.items()]
    rw = [Mount(dest, host, type="bind") for host, dest in binds.items()]
    tmp = [Mount("/tmp", None, type="tmpfs", tmpfs_size=limits.tmpfs_mb * mb, tmpfs_mode=0o1777)]
    tmp += [Mount(pkg, None, type="tmpfs", tmpfs_size=4096, tmpfs_mode=0o555) for pkg in jail.masked_packages()]
    cpu = limits.cpu_limit_s
    return {
        "image": BASE_IMAGE,
        "command": [
            _TIMEOUT,
            "-s",
            "KILL",
            str(math.ceil(limits.timeout_s) + ORPHAN_GRACE_S),
            "/bin/sh",
            "-c",
            _START.format(as_kb=limits.memory_mb * 1024),
            "rsi-jail",
            *argv,
        ],
        "working_dir": CHECKOUT,
        "user": f"{JAIL_UID}:{JAIL_UID}",
        "environment": dict(env),
        "hostname": "rsi-jail",
        "network_mode": "none",
        "ipc_mode": "private",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "init": True,
        "shm_size": limits.tmpfs_mb * mb,
        "mounts": ro + rw + tmp,
        "mem_limit": memory_limit_mb(limits) * mb,
        "memswap_limit": memory_limit_mb(limits) * mb,
        "pids_limit": limits.max_procs + 3,  # the init, the deadline's timeout and the start script's shell count too
        "ulimits": [
            Ulimit(name="cpu", soft=cpu, hard=cpu + 1),  # SIGXCPU at the soft limit, SIGKILL after
            Ulimit(name="fsize", soft=limits.file_size_mb * mb, hard=limits.file_size_mb * mb),
            Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "stdin_open": True,
        "labels": {LABEL: "1"},
    }


def _real_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def start(
    argv: Sequence[str],
    checkout: Path,
    env: Mapping[str, str],
    limits: Any,
    harness: Mapping[str, str],
    binds: Mapping[str, str] | None,
) -> ContainerProcess:
    """A started container running ``argv`` on a copy of ``checkout``: its volume made, the
    checkout copied in, the start script released. Whatever fails on the way removes what was made."""
    engine = client()
    volume = engine.volumes.create(
        driver="local",
        driver_opts={"type": "tmpfs", "device": "tmpfs", "o": f"size={limits.tmpfs_mb}m,uid={JAIL_UID},mode=0700"},
        labels={LABEL: "1"},
    )
    container = proc = None
    try:
        args = container_args(jail.translate(argv, checkout, harness), env, limits, harness, binds or {})
        from docker.types import Mount

        args["mounts"].append(Mount(CHECKOUT, volume.name, type="volume"))
        container = engine.containers.create(**args)
        proc = ContainerProcess(container, volume)
        container.start()
        # the checkout volume is mounted while the container runs; before, a copy would vanish
        container.put_archive(CHECKOUT, _checkout_tar(checkout))
        proc.release()
        return proc
    except BaseException:
        if proc is not None:
            proc.remove()
        else:  # made, but not attached: nothing relays it yet
            if container is not None:
                container.remove(force=True)
            volume.remove(force=True)
        raise


def _checkout_tar(root: Path) -> bytes:
    """The checkout's regular files and directories (``jail.checkout_entries``, as the
    bubblewrap jail copies them) as a tar owned by the jail's uid."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, path in jail.checkout_entries(root):
            info = tarfile.TarInfo(rel)
            info.uid = info.gid = JAIL_UID
            if path is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            with open(path, "rb") as fh:
                st = os.fstat(fh.fileno())
                info.size, info.mode = st.st_size, 0o755 if st.st_mode & stat.S_IXUSR else 0o644
                tar.addfile(info, fh)
    return buf.getvalue()


class ContainerProcess:
    """A running container as the sandbox's pump sees a child: ``stdin``, ``stdout`` and ``stderr``
    are pipes relayed to and from the attach stream by two threads; ``exit_fd`` becomes readable
    when the container has exited (a third thread waits on the engine); ``collect`` gives the exit
    code. ``kill`` and ``remove`` end it; ``remove`` also drops the checkout volume, so nothing the
    candidate wrote exists after the rollout."""

    def __init__(self, container: Any, volume: Any):
        self.container, self.volume = container, volume
        self.returncode: int | None = None
        self._sock = container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        self._raw: socket.socket = getattr(self._sock, "_sock", self._sock)
        in_r, in_w = os.pipe()
        out_r, self._out_w = os.pipe()
        err_r, self._err_w = os.pipe()
        self.exit_fd, self._exit_w = os.pipe()
        self._in_r = in_r
        self.stdin = os.fdopen(in_w, "wb", buffering=0)
        self.stdout = os.fdopen(out_r, "rb", buffering=0)
        self.stderr = os.fdopen(err_r, "rb", buffering=0)
        self._status: int | None = None
        self.oom_killed = False  # the engine's word: the cgroup's out-of-memory killer struck
        self._threads: list[threading.Thread] = []

    def release(self) -> None:
        """Let the start script exec the candidate, then relay its streams."""
        self._raw.sendall(_GO)
        for loop in (self._relay_stdin, self._relay_output, self._wait):
            t = threading.Thread(target=loop, daemon=True, name=f"rsi-docker-{loop.__name__}")
            t.start()
            self._threads.append(t)

    def _relay_stdin(self) -> None:
        try:
            while data := os.read(self._in_r, 1 << 16):
                self._raw.sendall(data)
            self._raw.shutdown(socket.SHUT_WR)  # the candidate reads EOF
        except OSError:
            pass  # the container has gone: what it did not read is its loss
        finally:
            os.close(self._in_r)

    def _relay_output(self) -> None:
        targets = {1: self._out_w, 2: self._err_w}
        try:
            while header := _read_exactly(self._raw, _FRAME.size):
                stream, size = _FRAME.unpack(header)
                payload = _read_exactly(self._raw, size)
                fd = targets.get(stream)
                if fd is not None:
                    _write_all(fd, payload)
        except OSError:
            pass  # the pump stopped reading (an overflow), or the stream was closed under us
        finally:
            os.close(self._out_w)
            os.close(self._err_w)

    def _wait(self) -> None:
        try:
            self._status = int(self.container.wait()["StatusCode"])
        except Exception:  # the engine lost the container: a kill by signal as far as we know
            self._status = 137
        else:
            try:
                self.container.reload()
                self.oom_killed = bool(self.container.attrs["State"].get("OOMKilled"))
            except Exception:
                pass  # removed under us: the exit code alone tells the story
        os.write(self._exit_w, b"x")
        os.close(self._exit_w)

    def collect(self) -> tuple[int, float]:
        """The exit code as Popen gives it (a kill by signal N is -N) and the CPU seconds used
        (not measured: 0.0; a CPU limit shows as SIGXCPU). ``oom_killed`` is read by then."""
        self._threads[-1].join()
        assert self._status is not None
        self.returncode = jail.exit_code(self._status)
        return self.returncode, 0.0

    def kill(self) -> None:
        if self._status is not None:
            return  # it has exited: the pump's kill after an exit needs no call to the engine
        try:
            self.container.kill()
        except Exception:
            pass  # already exited, or already gone

    def remove(self) -> None:
        try:
            self.container.remove(force=True)
        finally:
            try:
                self._sock.close()
            finally:
                self.volume.remove(force=True)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 16))
        if not chunk:
            if left == n:
                return b""
            raise OSError("the attach stream ended inside a frame")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
