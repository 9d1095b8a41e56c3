"""The sandboxed runner: passing, failing, timeouts, and programs that try to harm the run or the machine."""

from __future__ import annotations

import logging
import os
import secrets
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from edit_engine.eval import execution
from edit_engine.eval.execution import Limits, run_many, run_program, sandbox_layers

FAST = Limits(timeout_s=1, wall_s=8)
REPO = Path(__file__).resolve().parent.parent


def _needs(*layers: str) -> None:
    """Skip (saying why) where this machine's kernel does not give a layer the test checks."""
    missing = [n for n in layers if n not in sandbox_layers()]
    if missing:
        pytest.skip(f"sandbox layers unavailable here: {', '.join(missing)}")


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


def test_humaneval_style_solution_passes() -> None:
    src = (
        "import hashlib, math, re\n"
        "from collections import Counter\n"
        "def digest(text: str) -> str | None:\n"
        "    return hashlib.md5(text.encode()).hexdigest() if text else None\n"
        "def most_common_word(text: str) -> str:\n"
        "    return Counter(re.findall(r'[a-z]+', text.lower())).most_common(1)[0][0]\n"
        "def check(candidate_a, candidate_b):\n"
        "    assert candidate_a('') is None\n"
        "    assert candidate_a('abc') == '900150983cd24fb0d6963f7d28e17f72'\n"
        "    assert candidate_b('The cat and the hat') == 'the'\n"
        "    assert math.isclose(math.fsum([0.1] * 10), 1.0)\n"
        "check(digest, most_common_word)\n"
    )
    r = run_program(src, FAST)
    assert r.status == "passed", r.stderr
    assert r.sandbox == sandbox_layers() and "socket-modules" in r.sandbox


def test_stdlib_modules_that_import_socket_still_import() -> None:
    src = "import asyncio, http.client, multiprocessing, ssl, unittest.mock, urllib.request\nassert asyncio.run\n"
    assert run_program(src, FAST).passed


def test_writes_outside_the_scratch_folder_do_not_reach_the_host() -> None:
    _needs("read-only", "private-tmp", "private-dev")
    token = "edit-engine-escape-" + secrets.token_hex(8)
    targets = [Path("/tmp") / token, Path("/var/tmp") / token, Path("/dev/shm") / token, REPO / token,
               REPO / "tests" / token]
    src = (
        "import os, tempfile\n"
        f"for path in {[str(t) for t in targets]!r}:\n"
        "    try:\n"
        "        with open(path, 'w') as f:\n"
        "            f.write('escaped')\n"
        "    except OSError:\n"
        "        pass\n"
        "with open('mine.txt', 'w') as f:\n"  # its own folder, /tmp (private) and tempfile still work
        "    f.write('x')\n"
        "with open('/tmp/private.txt', 'w') as f:\n"
        "    f.write('x')\n"
        "with tempfile.NamedTemporaryFile() as f:\n"
        "    f.write(b'x')\n"
    )
    try:
        r = run_program(src, FAST)
        assert r.status == "passed", r.stderr
        assert [t for t in targets if t.exists()] == []
    finally:
        for t in targets:
            t.unlink(missing_ok=True)


def test_home_folder_of_the_evaluating_user_is_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    _needs("private-home")
    if not os.access(REPO, os.W_OK):
        pytest.skip("the checkout is not writable by this user")
    home = REPO / f".edit-engine-home-{secrets.token_hex(8)}"  # outside /tmp, which is private anyway
    home.mkdir(mode=0o755)
    try:
        (home / "credentials").write_text("secret-token")
        (home / "credentials").chmod(0o644)
        monkeypatch.setenv("HOME", str(home))
        src = (
            "import os\n"
            f"home = {str(home)!r}\n"
            "assert not os.path.exists(os.path.join(home, 'credentials')), 'the home folder is visible'\n"
        )
        r = run_program(src, FAST)
        assert r.status == "passed", r.stderr
    finally:
        (home / "credentials").unlink(missing_ok=True)
        home.rmdir()


def test_program_runs_without_privileges() -> None:
    _needs("no-caps", *(("nobody", "userns") if os.geteuid() == 0 else ()))
    src = (
        "import os\n"
        "with open('/proc/self/status') as f:\n"
        "    status = dict(line.rstrip('\\n').split(':\\t', 1) for line in f)\n"
        "for key in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'):\n"
        "    assert int(status[key], 16) == 0, (key, status[key])\n"
        "assert status['NoNewPrivs'].strip() == '1'\n"
        "uid = os.getuid()\n"  # the uid the machine sees, through the user namespace's map
        "with open('/proc/self/uid_map') as f:\n"
        "    outer = [o + uid - i for i, o, n in (map(int, line.split()) for line in f) if i <= uid < i + n]\n"
        "assert outer and outer[0] != 0, outer\n"
    )
    r = run_program(src, FAST)
    assert r.status == "passed", r.stderr


def test_fork_bomb_is_capped_by_the_process_limit() -> None:
    _needs("nproc", "pidns")
    src = (
        "import os, sys\n"
        "r, w = os.pipe()\n"
        "n = 0\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except BlockingIOError:\n"  # EAGAIN: the limit
        "        break\n"
        "    if pid == 0:\n"
        "        os.read(r, 1)\n"  # blocks until the sandbox goes
        "        os._exit(0)\n"
        "    n += 1\n"
        "sys.stderr.write(f'forked {n}\\n')\n"
        "assert n < 200, 'no limit'\n"
    )
    r = run_program(src, FAST)
    assert r.status == "passed", r.stderr
    forked = int(r.stderr.split("forked ")[1].split()[0])
    assert 1 <= forked <= FAST.processes - 1  # the program itself counts


def test_proc_shows_only_the_sandbox() -> None:
    _needs("private-proc")
    token = "edit-engine-secret-" + secrets.token_hex(8)
    # A process on the machine with a secret on its command line (as an API key passed as an option would be).
    helper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", token], stdin=subprocess.PIPE)
    try:
        src = (
            "import os\n"
            "seen = []\n"
            "for pid in (p for p in os.listdir('/proc') if p.isdigit()):\n"
            "    try:\n"
            "        with open(f'/proc/{pid}/cmdline', 'rb') as f:\n"
            "            seen.append(f.read())\n"
            "    except OSError:\n"
            "        pass\n"
            f"assert not any({token.encode()!r} in c for c in seen), 'a host command line is visible'\n"
            "with open('/proc/1/cmdline', 'rb') as f:\n"
            "    assert b'edit-engine-eval-' in f.read()\n"  # pid 1 is the sandbox's own runner
            "assert len(seen) <= 4, seen\n"
        )
        r = run_program(src, FAST)
        assert r.status == "passed", r.stderr
    finally:
        assert helper.stdin is not None
        helper.stdin.close()
        helper.wait(timeout=30)


def test_raw_socket_module_is_blocked() -> None:
    kernel = "seccomp" in sandbox_layers()
    src = (
        "import _socket, socket\n"
        "def refused(make):\n"
        "    try:\n"
        "        s = make()\n"
        "    except OSError:\n"
        "        return True\n"
        "    s.close()\n"
        "    return False\n"
        "assert refused(lambda: _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)), '_socket.socket'\n"
        "assert refused(lambda: socket._socket.socket()), 'socket._socket.socket'\n"
        "assert refused(lambda: _socket.socketpair()), '_socket.socketpair'\n"
        f"if {kernel}:\n"  # the real type, dug out past the module block: the kernel refuses
        "    real = [c for c in object.__subclasses__() if c.__module__ == '_socket']\n"
        "    assert real and all(refused(c) for c in real), real\n"
    )
    r = run_program(src, FAST)
    assert r.status == "passed", r.stderr


def test_a_missing_layer_is_logged_once_and_recorded(monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(execution.shutil, "which", lambda name: None)  # a machine without unshare
    execution._plan_for.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="edit_engine.eval.execution"):
            results = list(run_many(["assert True\n"] * 3, FAST, workers=2))
        warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
        assert len(warnings) == 1 and "netns" in warnings[0] and "private-proc" in warnings[0]
        assert all(r.passed and "netns" not in r.sandbox and "socket-modules" in r.sandbox for r in results)
    finally:
        execution._plan_for.cache_clear()  # the next test probes the real machine again


def test_a_layer_that_does_not_come_up_stops_the_run() -> None:
    # Mount steps outside a mount namespace of the sandbox's own must refuse, not touch the machine's mounts.
    plan = execution._Plan((), ("private-proc",), os.geteuid() == 0)
    r, _ = execution._execute("open('ran.txt', 'w').write('x')\n", FAST, plan)
    assert r.status == "error" and "sandbox setup failed" in r.stderr, r
