"""The program sandbox against hostile candidates: every one must end with the right status,
quickly, leaving no process, no file and no secret behind.

Hostile programs are bounded by construction (a fork *tree* of depth 8 has at most 256
processes even if every defence failed), so a regression cannot take the machine down."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest
from _procs import cmdline_has, pids

from rsi import _sandbox_slots, sandbox
from rsi.errors import ConfigError, RsiError
from rsi.sandbox import Limits, run_program, scrubbed_env

pytestmark = pytest.mark.timeout(60)

ROOT = os.geteuid() == 0
REPO = Path(__file__).resolve().parents[1]

FORK_TREE = """
import os, sys, time
failed = 0
for _ in range(8):  # a binary tree: 2**8 processes at most, even with no limit at all
    try:
        os.fork()
    except OSError:
        failed += 1
if failed:
    sys.stderr.write(f"fork failed {failed}\\n")
    sys.stderr.flush()
time.sleep(60)
"""


JAILS = ("bwrap", "docker")  # the backends that copy the checkout into a private tmpfs


@pytest.fixture(params=["bwrap", "docker", "util-linux", "preexec"])
def jail(request, monkeypatch):
    """Every way a rollout is contained: the bubblewrap jail (the default), the same contract in
    a Docker container, and the explicit ``process`` opt-in both ways: prlimit/setpriv exec'd in
    front of the program, and the preexec_fn used where those tools are missing."""
    if request.param == "docker":
        request.getfixturevalue("docker_host")
        monkeypatch.setattr(sandbox, "resolve_backend", lambda name: "docker")
        return request.param
    if request.param != "bwrap":
        monkeypatch.setattr(sandbox, "resolve_backend", lambda name: "process")
    if request.param == "preexec":
        monkeypatch.setattr(sandbox, "_util_linux", lambda *args: None)
    elif sandbox._util_linux(ROOT, ROOT and sandbox._has_cap(2)) is None:
        pytest.skip("prlimit/setpriv are not usable on this machine")
    return request.param


@pytest.fixture
def checkout():
    """Like Snapshot.check_out: a mkdtemp directory (mode 0700, owned by us)."""
    path = Path(tempfile.mkdtemp(prefix="rsi-test-checkout-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def program(checkout: Path, body: str, *args: str) -> list[str]:
    (checkout / "main.py").write_text(textwrap.dedent(body))
    return [sys.executable, "main.py", *args]


def marker() -> str:
    return f"rsi-sandbox-test-{uuid.uuid4().hex}"


def gone(mark: str, within: float = 3.0) -> list[int]:
    """SIGKILL is delivered at once but a process takes a moment to exit: wait a little."""
    end = time.monotonic() + within
    while (found := pids(cmdline_has(mark))) and time.monotonic() < end:
        time.sleep(0.02)
    return found


# ---- the protocol ------------------------------------------------------------------------


def test_good_program_gets_the_task_and_its_output_is_parsed(jail, checkout):
    argv = program(checkout, """
        import json, sys
        task = json.load(sys.stdin)
        print("debug: starting")  # a debug line before the result is allowed
        print(json.dumps({"answer": task["x"] * 2, "cwd": __import__("os").getcwd()}))
    """)
    out = run_program(argv, checkout, {"x": 21}, Limits(timeout_s=20), required_keys=["answer"])
    assert out.status == "ok", out.reason
    assert out.output["answer"] == 42
    assert out.output["cwd"] == ("/checkout" if jail in JAILS else str(checkout.resolve()))
    assert out.returncode == 0 and out.reason == ""
    assert 0 < out.duration_s < 20
    assert "debug: starting" in out.stdout_tail


def test_an_interpreter_named_through_a_parent_directory_still_starts(jail, checkout, tmp_path):
    """``../.venv/bin/python study.py`` makes ``sys.executable`` ``/cwd/../.venv/bin/python``,
    a path through a directory the jail does not show; the rollout must still start."""
    argv = program(checkout, "import json; print(json.dumps({'answer': 1}))")
    argv[0] = f"{tmp_path}/{os.path.relpath(sys.executable, tmp_path)}"
    assert ".." in argv[0] and os.path.samefile(argv[0], sys.executable)
    out = run_program(argv, checkout, {}, Limits(timeout_s=20), required_keys=["answer"])
    assert out.status == "ok", out.reason


def test_the_jail_probe_of_a_process_started_through_a_parent_directory_passes(tmp_path):
    """The same for the once-per-process check that the jail can be built: it runs the process's
    own ``sys.executable``, which then holds ``..`` through a directory the jail does not show
    (Python keeps a relative start path as ``cwd/..``; an absolute one it normalises)."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    interpreter = os.path.relpath(sys.executable, tmp_path)
    assert interpreter.startswith("..")
    done = subprocess.run(
        [interpreter, "-c", "import sys; from rsi import jail; jail.probe(None); print(sys.executable)"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert ".." in done.stdout


def test_large_task_on_stdin_is_fed_without_deadlock(checkout):
    argv = program(checkout, """
        import json, sys
        task = json.load(sys.stdin)
        print(json.dumps({"n": len(task["data"])}))
    """)
    out = run_program(argv, checkout, {"data": "x" * 3_000_000}, Limits(timeout_s=20))
    assert out.status == "ok", out.reason
    assert out.output == {"n": 3_000_000}


@pytest.mark.parametrize("body, required, why", [
    ("print('the answer is 42')", (), "not a JSON object"),
    ("print('[1, 2, 3]')", (), "JSON list"),
    ("import json; print(json.dumps({'score': 1}))", ("answer",), "lacks required keys ['answer']"),
    ("pass", (), "no output"),
])
def test_wrong_stdout_is_a_protocol_error(checkout, body, required, why):
    out = run_program(program(checkout, body), checkout, {}, Limits(timeout_s=20), required_keys=required)
    assert out.status == "protocol_error"
    assert why in out.reason
    assert out.output is None and out.returncode == 0


def test_nonzero_exit_is_an_error_naming_code_and_last_stderr_line(checkout):
    argv = program(checkout, """
        import sys
        print('{"answer": 1}')
        sys.stderr.write("warming up\\nboom: the heuristic diverged\\n")
        sys.exit(3)
    """)
    out = run_program(argv, checkout, {}, Limits(timeout_s=20))
    assert out.status == "error"
    assert out.returncode == 3
    assert out.reason == "exit code 3: boom: the heuristic diverged"
    assert out.output is None


def test_death_by_signal_is_an_error_naming_it(checkout):
    argv = program(checkout, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    out = run_program(argv, checkout, {}, Limits(timeout_s=20))
    assert out.status == "error"
    assert out.returncode == -signal.SIGSEGV
    assert out.reason.startswith("killed by SIGSEGV")


# ---- hostile programs ---------------------------------------------------------------------


def test_infinite_loop_times_out_on_the_wall_clock(checkout):
    out = run_program(program(checkout, "while True: pass"), checkout, {}, Limits(timeout_s=1))
    assert out.status == "timeout"
    assert "wall-clock" in out.reason
    assert 1.0 <= out.duration_s < 2.5


def test_cpu_limit_counts_as_timeout(jail, checkout):
    out = run_program(program(checkout, "while True: pass"), checkout, {}, Limits(timeout_s=20, cpu_s=1))
    assert out.status == "timeout"
    assert out.reason == "CPU limit of 1 s reached"
    assert out.duration_s < 10


def test_memory_limit_below_the_callers_own_size_still_starts(jail, checkout):
    ballast = bytearray(256 * 1024 * 1024)  # the caller is now larger than the child may become
    argv = program(checkout, "print('{\"answer\": 1}')")
    out = run_program(argv, checkout, {}, Limits(timeout_s=20, memory_mb=200))
    del ballast
    assert out.status == "ok", out.reason


def test_memory_hog_is_an_error(jail, checkout):
    argv = program(checkout, "x = bytearray(10 * 1024 ** 3)\nprint('{}')")
    out = run_program(argv, checkout, {}, Limits(timeout_s=20, memory_mb=300))
    assert out.status == "error"
    assert "MemoryError" in out.reason


def test_file_size_bomb_is_an_error_and_its_file_is_removed(jail, checkout):
    argv = program(checkout, """
        import os, sys
        path = os.path.join(os.environ["TMPDIR"], "big")
        sys.stderr.write(path + "\\n"); sys.stderr.flush()
        with open(path, "wb") as f:
            for _ in range(1024):  # 1 GB
                f.write(b"x" * 1024 * 1024)
        print("{}")
    """)
    out = run_program(argv, checkout, {}, Limits(timeout_s=20, file_size_mb=4))
    assert out.status == "error"
    assert "File too large" in out.reason
    big = Path(out.stderr_tail.splitlines()[0])
    if jail in JAILS:  # the jail's /tmp is its own tmpfs: the file never touched the host
        assert big == Path("/tmp/big") and not big.exists()
    else:
        assert big.name == "big" and not big.parent.exists()


def test_stdout_flood_is_cut_at_the_cap_without_buffering_it(checkout):
    argv = program(checkout, """
        import sys
        chunk = b"y" * (1024 * 1024)
        for _ in range(100):  # 100 MB
            sys.stdout.buffer.write(chunk)
    """)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    out = run_program(argv, checkout, {}, Limits(timeout_s=20, stdout_max_bytes=1024 * 1024))
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert out.status == "protocol_error"
    assert out.reason == f"stdout exceeded {1024 * 1024} bytes"
    assert grown_mb < 40, f"the caller's peak memory grew by {grown_mb:.0f} MB"
    assert 0 < len(out.stdout_tail) <= 4096
    assert out.duration_s < 10


def test_fork_loop_is_bounded_and_leaves_no_process(jail, checkout):
    mark = marker()
    out = run_program(program(checkout, FORK_TREE, mark), checkout, {}, Limits(timeout_s=2, max_procs=8))
    assert out.status in ("timeout", "error")
    assert out.duration_s < 4
    assert "fork failed" in out.stderr_tail, "RLIMIT_NPROC was not enforced"
    assert gone(mark) == []


def test_orphans_die_with_the_rollout(jail, checkout):
    mark = marker()
    argv = program(checkout, """
        import json, subprocess, sys
        sleeper = [sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]]
        subprocess.Popen(sleeper)  # stays in the rollout's process group
        if sys.argv[2] == "escape":
            subprocess.Popen(sleeper, start_new_session=True)  # leaves it
        print(json.dumps({"answer": 1}))
    """, mark, "escape" if ROOT else "stay")  # only a per-rollout uid can find the escapee
    out = run_program(argv, checkout, {}, Limits(timeout_s=20))
    assert out.status == "ok", out.reason
    assert out.duration_s < 10
    assert gone(mark) == []


def test_without_pidfd_exits_orphans_and_timeouts_are_still_handled(checkout, monkeypatch):
    """Kernels before 5.3 have no pidfd: the exit is polled and the sweep uses plain kill."""
    monkeypatch.setattr(_sandbox_slots, "_pidfd", lambda pid: None)  # the exit's and the sweep's
    mark = marker()
    argv = program(checkout, """
        import json, subprocess, sys
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]],
                         start_new_session=sys.argv[2] == "escape")
        print(json.dumps({"answer": 1}))
    """, mark, "escape" if ROOT else "stay")
    out = run_program(argv, checkout, {}, Limits(timeout_s=20))
    assert out.status == "ok", out.reason
    assert gone(mark) == []
    out = run_program(program(checkout, "while True: pass"), checkout, {}, Limits(timeout_s=1))
    assert out.status == "timeout" and out.duration_s < 2.5


def test_secrets_in_the_environment_do_not_reach_the_candidate(jail, checkout, monkeypatch):
    secrets = {"OPENAI_API_KEY": "sk-test-123", "MY_SECRET": "hunter2-value", "GITHUB_TOKEN": "ghp-test-456",
               "RAY_ADDRESS": "ray://head:10001", "AWS_SECRET_ACCESS_KEY": "aws-test-789"}
    for name, value in {**secrets, "RSI_MODEL_KEY": "passed-on-purpose"}.items():
        monkeypatch.setenv(name, value)
    argv = program(checkout, "import json, os; print(json.dumps(dict(os.environ)))")
    out = run_program(argv, checkout, {}, Limits(timeout_s=20), env_passthrough=["RSI_MODEL_KEY", "UNSET_NAME"],
                      env={"TASK_MODE": "eval"})
    assert out.status == "ok", out.reason
    seen = out.output
    assert not set(secrets) & set(seen)
    assert not any(value in out.stdout_tail for value in secrets.values())
    assert seen["RSI_MODEL_KEY"] == "passed-on-purpose" and "UNSET_NAME" not in seen
    assert seen["TASK_MODE"] == "eval"
    assert seen["OMP_NUM_THREADS"] == seen["OPENBLAS_NUM_THREADS"] == seen["MKL_NUM_THREADS"] == "1"
    assert seen["PYTHONDONTWRITEBYTECODE"] == "1"
    assert seen["HOME"] == seen["TMPDIR"] != os.environ.get("HOME")
    if jail in JAILS:
        assert seen["HOME"] == "/tmp", "the jail's private tmpfs, gone with it"
    else:
        assert not Path(seen["HOME"]).exists(), "the rollout's HOME outlived it"


def test_scrubbed_env_keeps_only_the_allowlist(monkeypatch):
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("VIRTUAL_ENV", "/some/venv")
    env = scrubbed_env(passthrough=["ANTHROPIC_API_KEY"], extra={"X": "1"})
    assert env["LC_ALL"] == "C.UTF-8" and env["X"] == "1" and env["ANTHROPIC_API_KEY"] == "sk-ant-test"
    assert "VIRTUAL_ENV" not in env and "PATH" in env
    assert "ANTHROPIC_API_KEY" not in scrubbed_env()


def test_checkout_stays_intact_and_readable(jail, checkout):
    (checkout / "data.txt").write_text("original")
    argv = program(checkout, """
        import json, os, shutil
        done = []
        for name, act in [("remove", lambda: os.remove("data.txt")),
                          ("write", lambda: open("data.txt", "w").write("changed")),
                          ("create", lambda: open("new.txt", "w").write("x")),
                          ("chmod", lambda: os.chmod(".", 0)),
                          ("rmtree", lambda: shutil.rmtree(os.getcwd()))]:
            try:
                act()
                done.append(name)
            except OSError:
                pass
        print(json.dumps({"done": done}))
    """)
    out = run_program(argv, checkout, {}, Limits(timeout_s=20))
    assert out.status == "ok", out.reason
    if jail in JAILS:  # the rollout's own copy, in its tmpfs: it may change it, the host's stays
        assert out.output["done"] == ["remove", "write", "create", "chmod"]
        assert (checkout / "data.txt").read_text() == "original"
        assert sorted(p.name for p in checkout.iterdir()) == ["data.txt", "main.py"]
        return
    if ROOT:  # under its own uid the candidate cannot change the caller's files
        assert out.output["done"] == []
        assert (checkout / "data.txt").read_text() == "original"
        assert sorted(p.name for p in checkout.iterdir()) == ["data.txt", "main.py"]
    assert (checkout / "main.py").read_text().startswith("\nimport json")


def test_a_hostile_rollout_does_not_starve_its_neighbour(checkout, tmp_path):
    """Both rollouts fork: a budget shared between them would let the fork loop take it all."""
    mark = marker()
    program(checkout, FORK_TREE)
    good = Path(tempfile.mkdtemp(prefix="rsi-test-checkout-"))
    try:
        good_argv = program(good, """
            import json, os, time
            time.sleep(0.5)  # let the fork loop fill its budget first
            kids = []
            for _ in range(4):  # four children alive at once
                pid = os.fork()
                if pid == 0:
                    time.sleep(0.2)
                    os._exit(0)
                kids.append(pid)
            for k in kids:
                os.waitpid(k, 0)
            print(json.dumps({"forked": len(kids)}))
        """)
        results = {}
        hostile = threading.Thread(target=lambda: results.setdefault("hostile", run_program(
            [sys.executable, "main.py", mark], checkout, {}, Limits(timeout_s=3, max_procs=8))))
        hostile.start()
        results["good"] = run_program(good_argv, good, {}, Limits(timeout_s=20, max_procs=8))
        hostile.join()
    finally:
        shutil.rmtree(good, ignore_errors=True)
    assert results["good"].status == "ok", results["good"].reason
    assert results["good"].output == {"forked": 4}
    assert results["hostile"].status == "timeout"
    assert gone(mark) == []


@pytest.mark.skipif(not ROOT, reason="the suite already runs the unprivileged path")
def test_unprivileged_caller_gets_a_working_nproc_limit(checkout):
    """The sandbox run from inside a rollout, whose uid is not root: the other code path."""
    mark = marker()
    (checkout / "bomb.py").write_text(FORK_TREE)
    argv = program(checkout, """
        import dataclasses, json, os, sys
        from pathlib import Path
        from rsi.sandbox import Limits, run_program
        assert os.geteuid() != 0
        inner = run_program([sys.executable, "bomb.py", sys.argv[1]], Path.cwd(), {},
                            Limits(timeout_s=2, max_procs=8, backend="process"))
        print(json.dumps(dataclasses.asdict(inner)))
    """, mark)
    # the process backend outside too: the jail would hide the project's own package from it
    out = run_program(argv, checkout, {}, Limits(timeout_s=30, backend="process"), env={"PYTHONPATH": str(REPO)})
    assert out.status == "ok", out.reason + out.stderr_tail
    inner = out.output
    assert inner["status"] in ("timeout", "error")
    assert "fork failed" in inner["stderr_tail"]
    assert gone(mark) == []


# ---- our own misuse raises -----------------------------------------------------------------


def test_misuse_raises(checkout):
    argv = program(checkout, "print('{}')")
    with pytest.raises(RsiError, match="does not exist"):
        run_program(argv, checkout / "missing", {})
    with pytest.raises(RsiError, match="JSON"):
        run_program(argv, checkout, {"x": object()})
    with pytest.raises(RsiError, match="cannot start"):
        run_program(["/nonexistent/python", "main.py"], checkout, {})
    (checkout / "python-not-installed").write_text("")  # a bare name is looked up on PATH, not in cwd
    with pytest.raises(RsiError, match="cannot start"):
        run_program(["python-not-installed", "main.py"], checkout, {})
    with pytest.raises(ConfigError, match="timeout_s"):
        Limits(timeout_s=0)


def test_candidate_script_that_cannot_start_is_its_error(checkout):
    (checkout / "run.sh").write_text("#!/bin/sh\necho '{}'\n")  # not executable
    out = run_program(["./run.sh"], checkout, {}, Limits(timeout_s=20))
    assert out.status == "error"
    assert "cannot start ./run.sh" in out.reason


def test_an_interpreter_under_tmp_runs_in_the_jail(checkout):
    """The jail's private /tmp must not hide an interpreter installed under /tmp (a venv in a
    clone there): it is bound on top of the private /tmp, read-only."""
    parent = Path(tempfile.mkdtemp(prefix="rsi-clone-", dir="/tmp"))  # 0700, like a private CI folder
    venv = parent / "venv"  # made by `python -m venv`, 0755 as usual
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        python = str(venv / "bin" / "python")
        code = "import json, sys; json.load(sys.stdin); print(json.dumps({'exe': sys.executable}))"
        out = subprocess.run([python, "-c", f"""
import sys; sys.path.insert(0, {str(REPO)!r})
from rsi.sandbox import Limits, run_program
o = run_program([sys.executable, "-c", {code!r}], {str(checkout)!r}, {{}}, Limits(timeout_s=30))
print(o.status, o.output, o.reason)
"""], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split()[0] == "ok" and python in out.stdout, out.stdout + out.stderr[-1000:]
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def test_a_container_over_its_memory_limit_is_reported_as_such(docker_host, monkeypatch, checkout):
    """Processes that each stay under the address-space limit but together pass the container's
    memory limit: the engine's out-of-memory killer ends the largest, the candidate itself, and
    the reason says so instead of a bare SIGKILL."""
    monkeypatch.setattr(sandbox, "resolve_backend", lambda name: "docker")
    argv = program(checkout, """
        import os, time
        mb = 1024 * 1024
        r, w = os.pipe()
        if os.fork() == 0:
            held = b"c" * (120 * mb)  # written, so resident
            os.write(w, b"x")
            time.sleep(60)
            os._exit(0)
        os.read(r, 1)
        held = [b"m" * mb for _ in range(250)]  # the largest process: the one the killer picks
        print("{}")
    """)
    limits = Limits(timeout_s=30, memory_mb=300, tmpfs_mb=16)
    out = run_program(argv, checkout, {}, limits)
    assert out.status == "error", out
    assert out.returncode == -signal.SIGKILL
    assert out.reason == "memory limit reached: the container's 348 MB"
