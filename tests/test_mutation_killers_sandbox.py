"""The sandbox's decisions that run in the caller's process, tested there: ``Limits``
validation, the rlimit pairs a rollout is started under, and the verdict (status and one-line
reason) read from a finished run. The rollout tests in test_sandbox.py reach these only around a
child process; these need none, so ``perf/mutation.py`` can mutate them (target
``sandbox-limits``). Expected values are written out by hand."""

from __future__ import annotations

import os
import resource
import signal

import pytest

from rsi.errors import ConfigError
from rsi.sandbox import (
    Dialogue,
    DialogueError,
    Limits,
    _clamp,
    _clip,
    _last_line,
    _parse,
    _rlimits,
    _Run,
    _signal_name,
    _Slot,
    _user_tasks,
    _verdict,
)

MB = 1024 * 1024
INF = resource.RLIM_INFINITY


# ---- Limits ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["timeout_s", "memory_mb", "max_procs", "file_size_mb", "stdout_max_bytes",
                                  "tmpfs_mb", "open_files"])
def test_every_limit_must_be_positive_and_the_error_names_it(name):
    with pytest.raises(ConfigError) as zero:
        Limits(**{name: 0})
    assert str(zero.value) == f"sandbox limit {name} must be positive, got 0"
    with pytest.raises(ConfigError) as negative:
        Limits(**{name: -2})
    assert str(negative.value) == f"sandbox limit {name} must be positive, got -2"
    assert getattr(Limits(**{name: 1}), name) == 1, "1 is positive"


def test_cpu_s_is_optional_but_positive_when_given():
    assert Limits(cpu_s=None).cpu_s is None and Limits(cpu_s=1).cpu_s == 1
    for bad in (0, -1):
        with pytest.raises(ConfigError) as exc:
            Limits(cpu_s=bad)
        assert str(exc.value) == f"sandbox limit cpu_s must be positive, got {bad}"
    assert Limits(timeout_s=0.001).timeout_s == 0.001


def test_cpu_limit_defaults_to_the_wall_clock_rounded_up_plus_one():
    assert Limits(timeout_s=2.5).cpu_limit_s == 4
    assert Limits(timeout_s=3.0).cpu_limit_s == 4
    assert Limits(timeout_s=3.0, cpu_s=7).cpu_limit_s == 7


# ---- rlimits -----------------------------------------------------------------------------------
def hard(res: int) -> int:
    return resource.getrlimit(res)[1]


def expected(res: int, soft: int, hard_value: int) -> tuple[int, tuple[int, int]]:
    """What the caller's hard limit lets through, worked out here (never by ``_clamp``)."""
    h = hard(res)
    return res, (soft if h == INF else min(soft, h), hard_value if h == INF else min(hard_value, h))


LIMITS = Limits(timeout_s=2.5, memory_mb=100, max_procs=5, file_size_mb=3, open_files=10)
SLOT = _Slot(1_600_000_000, -1)  # a slot uid; _rlimits only asks whether there is one


def test_rlimit_pairs_of_a_rollout_with_its_own_uid():
    assert _rlimits(LIMITS, SLOT) == [
        expected(resource.RLIMIT_CPU, 4, 5),  # SIGXCPU at ceil(2.5) + 1, SIGKILL a second later
        expected(resource.RLIMIT_FSIZE, 3 * MB, 3 * MB),
        expected(resource.RLIMIT_CORE, 0, 0),
        expected(resource.RLIMIT_NOFILE, 10, 10),
        expected(resource.RLIMIT_NPROC, 6, 6),  # max_procs + the main process
        expected(resource.RLIMIT_AS, 100 * MB, 100 * MB),  # last: the child sets it after the rest
    ]


def test_rlimit_pairs_in_the_jail_count_bubblewrap_and_init_and_take_cpu_s():
    pairs = dict(_rlimits(Limits(timeout_s=2.5, cpu_s=9, max_procs=5), SLOT, jailed=True))
    assert pairs[resource.RLIMIT_NPROC] == expected(resource.RLIMIT_NPROC, 8, 8)[1]  # 5 + main + bwrap + init
    assert pairs[resource.RLIMIT_CPU] == expected(resource.RLIMIT_CPU, 9, 10)[1]
    assert pairs[resource.RLIMIT_AS] == expected(resource.RLIMIT_AS, 2048 * MB, 2048 * MB)[1]  # the default


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
def test_without_a_slot_nproc_is_the_users_task_count_plus_the_budget():
    # The user's task count moves with everything else the user runs (root: the whole machine).
    # Count on both sides of the call until one call saw a count that held still and matched.
    for jailed, own in ((False, 1), (True, 3)):
        seen = []
        for _ in range(500):
            before = _user_tasks(os.getuid())
            nproc = dict(_rlimits(LIMITS, None, jailed=jailed))[resource.RLIMIT_NPROC]
            after = _user_tasks(os.getuid())
            if nproc == expected(resource.RLIMIT_NPROC, before + 5 + own, before + 5 + own)[1] and before == after:
                break
            seen.append((before, nproc, after))
        else:
            pytest.fail(f"NPROC never equalled a steady task count + 5 + {own}: last (count, nproc, count) {seen[-5:]}")


def test_clamp_lowers_to_a_finite_hard_limit_only():
    assert _clamp((5, 10), 7) == (5, 7)
    assert _clamp((8, 10), 7) == (7, 7)
    assert _clamp((5, 10), 10) == (5, 10)
    assert _clamp((5, 10), INF) == (5, 10)


# ---- verdicts ----------------------------------------------------------------------------------
def run(**kw) -> _Run:
    r = _Run(**{k: v for k, v in kw.items() if k not in ("stdout", "stderr")})
    r.stdout += kw.get("stdout", b"")
    r.stderr += kw.get("stderr", b"")
    return r


V = Limits(timeout_s=2.5, stdout_max_bytes=1000)


def test_a_broken_dialogue_comes_first_and_is_clipped():
    assert _verdict(run(broken="x" * 300, overflow=True, timed_out=True, returncode=1), V, []) == \
        ("protocol_error", None, "x" * 197 + "...")


def test_overflow_then_wall_clock_in_that_order():
    assert _verdict(run(overflow=True, timed_out=True, returncode=0), V, []) == \
        ("protocol_error", None, "stdout exceeded 1000 bytes")
    assert _verdict(run(timed_out=True, returncode=-signal.SIGKILL), V, []) == \
        ("timeout", None, "wall-clock limit of 2.5 s reached")
    assert _verdict(run(timed_out=True, returncode=0), Limits(timeout_s=30.0), [])[2] == \
        "wall-clock limit of 30 s reached"


def test_cpu_limit_is_a_timeout_by_sigxcpu_or_by_sigkill_at_the_limit():
    assert _verdict(run(returncode=-signal.SIGXCPU), V, []) == ("timeout", None, "CPU limit of 4 s reached")
    assert _verdict(run(returncode=-signal.SIGKILL, cpu_s=4.0), V, []) == ("timeout", None, "CPU limit of 4 s reached")
    assert _verdict(run(returncode=-signal.SIGKILL, cpu_s=3.99, stderr=b"oom\n"), V, []) == \
        ("error", None, "killed by SIGKILL: oom")
    # a CPU-heavy program that exits with an error code under the limit is an error, not a timeout
    assert _verdict(run(returncode=1, cpu_s=4.0), V, [])[0] == "error"


def test_a_nonzero_exit_names_the_code_or_signal_and_the_last_stderr_line():
    assert _verdict(run(returncode=3, stderr=b"Traceback\n  ...\nValueError: bad\n\n"), V, []) == \
        ("error", None, "exit code 3: ValueError: bad")
    assert _verdict(run(returncode=3), V, []) == ("error", None, "exit code 3")
    assert _verdict(run(returncode=-signal.SIGSEGV), V, []) == ("error", None, "killed by SIGSEGV")
    assert _verdict(run(returncode=-1, stdout=b'{"a": 1}'), V, ["a"]) == ("error", None, "killed by SIGHUP")


class Finished(Dialogue):
    def __init__(self, answer=None, error: str = ""):
        self.answer, self.error = answer, error

    def result(self) -> dict:
        if self.error:
            raise DialogueError(self.error)
        return self.answer


def test_a_dialogue_gives_the_result_on_exit_zero_and_its_error_otherwise():
    assert _verdict(run(returncode=0, stdout=b"ignored"), V, ["x"], Finished({"score": 1.0})) == \
        ("ok", {"score": 1.0}, "")
    assert _verdict(run(returncode=0), V, [], Finished(error="y" * 250)) == ("protocol_error", None, "y" * 197 + "...")
    assert _verdict(run(returncode=2, stderr=b"boom"), V, [], Finished({"score": 1.0})) == \
        ("error", None, "exit code 2: boom")


def test_without_a_dialogue_exit_zero_parses_stdout():
    assert _verdict(run(returncode=0, stdout=b'log\n{"a": 1, "b": 2}\n'), V, ["a"]) == ("ok", {"a": 1, "b": 2}, "")
    assert _verdict(run(returncode=0, stdout=b"{}"), V, ["a"]) == \
        ("protocol_error", None, "output lacks required keys ['a']")


# ---- parsing stdout ----------------------------------------------------------------------------
@pytest.mark.parametrize("stdout, required, verdict", [
    (b"", [], ("protocol_error", None, "no output on stdout")),
    (b"  \n\n", [], ("protocol_error", None, "no output on stdout")),
    (b'  {"a": 1}  \n\n', ["a"], ("ok", {"a": 1}, "")),
    (b'debug\n{"a": 1}', ["a"], ("ok", {"a": 1}, "")),
    (b'a\nb\n{"a": 1}\n', ["a"], ("ok", {"a": 1}, "")),  # the last line, not all after the first
    (b'{"a": 1}\nmore debug', ["a"], ("protocol_error", None, "stdout is not a JSON object (last line: more debug)")),
    (b"not json", [], ("protocol_error", None, "stdout is not a JSON object (last line: not json)")),
    (b"[1, 2]", [], ("protocol_error", None, "stdout is a JSON list, not an object")),
    (b"1\n2", [], ("protocol_error", None, "stdout is a JSON int, not an object")),
    (b'{"a": NaN}', ["a"], ("protocol_error", None, "stdout: non-finite number NaN in JSON")),
    (b'debug\n{"a": NaN}', ["a"], ("protocol_error", None, "stdout: non-finite number NaN in JSON")),
    (b"[" * 70 + b"]" * 70, [], ("protocol_error", None, "stdout: JSON nested deeper than 64 levels")),
    (b'{"a": 1}', ["a", "b", "c"], ("protocol_error", None, "output lacks required keys ['b', 'c']")),
    (b'{"a": 1, "b": 2}', [], ("ok", {"a": 1, "b": 2}, "")),
    (b'\xff{"a": 1}', [], ("protocol_error", None, 'stdout is not a JSON object (last line: \ufffd{"a": 1})')),
])
def test_parse(stdout, required, verdict):
    assert _parse(stdout, required) == verdict


def test_parse_clips_the_quoted_last_line():
    assert _parse(b"z" * 500, []) == \
        ("protocol_error", None, f"stdout is not a JSON object (last line: {'z' * 197}...)")


# ---- small helpers -----------------------------------------------------------------------------
def test_signal_names():
    assert _signal_name(signal.SIGKILL) == "SIGKILL" and _signal_name(signal.SIGXCPU) == "SIGXCPU"
    assert _signal_name(999) == "signal 999"


def test_last_line_of_stderr_is_stripped_clipped_and_from_the_tail():
    assert _last_line(bytearray(b"first\n  second  \n\n")) == "second"
    assert _last_line(bytearray(b"")) == "" and _last_line(bytearray(b"\n \n")) == ""
    assert _last_line(bytearray(b"w" * 300)) == "w" * 197 + "..."
    # only the last 4096 bytes are read: a line that starts before them is cut at their start
    assert _last_line(bytearray(b"a" * 5000 + b"\n" + b"b" * 50)) == "b" * 50
    assert _last_line(bytearray(b"x" * 10 + b"y" * 4096)) == "y" * 197 + "..."
    assert _last_line(bytearray(b"\xffend")) == "\ufffdend"


def test_clip_keeps_200_characters_and_marks_a_cut():
    assert _clip("a" * 200) == "a" * 200
    assert _clip("a" * 201) == "a" * 197 + "..."
    assert _clip("abcdef", limit=5) == "ab..."
    assert _clip("abcde", limit=5) == "abcde"
