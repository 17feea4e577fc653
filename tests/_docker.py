"""A Docker engine for the docker jail's tests: the machine's own when one answers, else a
private ``dockerd`` this test session starts and stops.

The private engine needs root and the engine installed (Debian: ``apt-get install docker.io``;
``.ci/run`` installs it). It runs in its own session with its own data root, exec root and socket
under a fresh directory, and no bridge or iptables rules: rollouts use ``network_mode: none``, so
it needs no network at all and works inside the test network namespace. Teardown stops exactly
the process group it started, never another engine on the machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path


def engine_answers(host: str | None) -> bool:
    try:
        import docker

        client = docker.DockerClient(base_url=host, timeout=10) if host else docker.from_env(timeout=10)
        client.ping()
        client.close()
        return True
    except Exception:
        return False


class PrivateEngine:
    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="rsi-dockerd-", dir="/tmp"))  # short: a socket path
        self.host = f"unix://{self.root}/sock"
        self.log = self.root / "dockerd.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60) -> None:
        dockerd = shutil.which("dockerd", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin"]))
        if dockerd is None:
            raise RuntimeError("dockerd is not installed")
        argv = [dockerd, "--iptables=false", "--ip6tables=false", "--bridge=none", "--storage-driver=vfs",
                f"--data-root={self.root}/data", f"--exec-root={self.root}/exec", f"--pidfile={self.root}/pid",
                "-H", self.host]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not engine_answers(self.host):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"dockerd did not answer: {tail}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # dockerd stops its containerd and unmounts
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL) if self.proc else None  # shims left in the group
        except ProcessLookupError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)
