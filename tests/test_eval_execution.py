"""The sandboxed runner: passing, failing, timeouts, and programs that try to harm the run."""

from __future__ import annotations

import os
import select
import tempfile
import time
from pathlib import Path

import pytest

from edit_engine.eval.execution import Limits, run_many, run_program

FAST = Limits(timeout_s=1, wall_s=8)


def _scratch_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("edit-engine-eval-*")}


def test_clean_exit_passes_and_assert_fails() -> None:
    assert run_program("assert 1 + 1 == 2\n", FAST).status == "passed"
    r = run_program("assert 1 + 1 == 3\n", FAST)
    assert r.status == "failed" and "AssertionError" in r.stderr


def test_syntax_error_fails() -> None:
    assert run_program("def f(:\n", FAST).status == "failed"


def test_infinite_loop_times_out_without_hanging() -> None:
    t0 = time.perf_counter()
    r = run_program("while True:\n    pass\n", FAST)
    assert r.status == "timeout" and not r.passed
    assert time.perf_counter() - t0 < FAST.wall + 2


def test_blocking_program_hits_the_wall_clock_backstop() -> None:
    t0 = time.perf_counter()
    r = run_program("import time\ntime.sleep(600)\n", Limits(timeout_s=1, wall_s=1.5))
    assert r.status == "timeout"
    assert time.perf_counter() - t0 < 5


def test_early_exit_does_not_count_as_pass() -> None:
    # A completion that exits before check() ran must not pass, whatever its exit status.
    for src in ("import sys\nsys.exit(0)\nassert False\n", "import os\nos._exit(0)\n"):
        assert run_program(src, FAST).status == "failed", src


def test_memory_exhaustion_fails_and_parent_survives() -> None:
    r = run_program("x = bytearray(1 << 40)\n", FAST)
    assert r.status == "failed" and "MemoryError" in r.stderr
    r = run_program("xs = []\nwhile True:\n    xs.append(bytearray(1 << 26))\n", Limits(timeout_s=2, wall_s=10,
                                                                                     memory_bytes=512 << 20))
    assert not r.passed
    assert run_program("assert True\n", FAST).passed  # the parent still runs programs


def test_file_writes_stay_in_a_scratch_dir_that_is_removed(tmp_path: Path) -> None:
    before = _scratch_dirs()
    src = (
        "import os\n"
        "open('junk.txt', 'w').write('x' * 1000)\n"
        "assert os.path.exists(os.path.join(os.getcwd(), 'junk.txt'))\n"
        "print(os.getcwd())\n"
    )
    cwd = os.getcwd()
    assert run_program(src, FAST).passed
    assert not (Path(cwd) / "junk.txt").exists()
    assert _scratch_dirs() <= before  # removed afterwards
    # A file larger than the limit is refused (RLIMIT_FSIZE) and the scratch dir still goes.
    big = "open('big.bin', 'wb').write(b'x' * (64 << 20))\n"
    assert not run_program(big, Limits(timeout_s=2, wall_s=10, file_bytes=1 << 20)).passed
    assert _scratch_dirs() <= before


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state  # a zombie is dead


def _exits_within(pid: int, seconds: float) -> bool:
    """Wait on the process's exit (a pidfd becomes readable when it terminates), not on a timer."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return True  # already gone
    try:
        ready, _, _ = select.select([fd], [], [], seconds)
        return bool(ready)
    finally:
        os.close(fd)


def test_forked_children_are_killed() -> None:
    src = (
        "import os, sys, time\n"
        "kids = []\n"
        "for _ in range(3):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        time.sleep(120)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "with open(sys.argv[0] + '.kids', 'w') as f:\n"
        "    f.write('ok')\n"
    )
    before = {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}
    r = run_program(src, FAST)
    assert r.status == "passed"
    after = {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}
    leftovers = []
    for pid in after - before:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"edit-engine-eval-" in cmd and _alive(pid) and not _exits_within(pid, 5.0):
            leftovers.append(pid)
    assert leftovers == []


def test_network_is_blocked() -> None:
    src = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
        "except OSError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('connected')\n"
        "try:\n"
        "    socket.socket()\n"
        "except OSError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('socket created')\n"
    )
    assert run_program(src, FAST).passed


def test_environment_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDIT_ENGINE_SECRET_FOR_TEST", "x")
    assert run_program("import os\nassert 'EDIT_ENGINE_SECRET_FOR_TEST' not in os.environ\n", FAST).passed


def test_run_many_keeps_order() -> None:
    srcs = ["assert True\n", "assert False\n", "assert True\n", "raise ValueError\n"]
    assert [r.passed for r in run_many(srcs, FAST, workers=2)] == [True, False, True, False]
