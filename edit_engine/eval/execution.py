"""Run untrusted benchmark programs, one subprocess each, so that none can harm the evaluation.

Layers (each a best effort; together they keep the parent and the machine safe from what models write):

- **A fresh process** per program (``python -I``: no user site, no environment variables), started in its own
  session so the whole process group can be killed, with stdout/stderr going to files (a program that leaves a
  child holding a pipe cannot stall the parent).
- **Resource limits** set by a small runner before the program is compiled: CPU seconds (``RLIMIT_CPU``; the
  timeout), address space (``RLIMIT_AS``; a memory bomb gets ``MemoryError``), file size (``RLIMIT_FSIZE``) and,
  for non-root users, processes (``RLIMIT_NPROC`` = 0: no fork).
- **Namespaces** when ``unshare`` works here (checked once): a new network namespace (no network) and a new PID
  namespace, where the kernel kills every process the program started when the program itself ends.
- **No sockets** in any case: the runner replaces ``socket.socket`` by a class that refuses to be created.
- **A scratch directory** as cwd, HOME and TMPDIR, removed afterwards; the process group is killed afterwards.

The timeout counts CPU seconds of the program (3 s is the usual HumanEval value), with a wall-clock backstop for
programs that sleep or block: on a shared, loaded machine wall time would fail correct programs at random.

A program passes when it runs to its end: exit status 0 *and* the runner's end marker (a nonce) on stdout, so a
completion that calls ``sys.exit(0)`` or ``os._exit(0)`` before the checks ran does not pass.
"""

from __future__ import annotations

import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# The runner: set limits, block sockets, read the nonce, run the program, print the nonce at the very end.
_RUNNER = r"""
import resource, sys
def _lim(which, soft, hard):
    try:
        _, cur = resource.getrlimit(which)
        if cur != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur), min(hard, cur)
        resource.setrlimit(which, (soft, hard))
    except (ValueError, OSError):
        pass
_path, _cpu, _mem, _fsize, _nproc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
_lim(resource.RLIMIT_CPU, _cpu, _cpu + 1)
import os, signal
def _on_xcpu(signum, frame):
    os.write(2, b"\nCPU time limit reached\n")
    os._exit(124)
signal.signal(signal.SIGXCPU, _on_xcpu)
_lim(resource.RLIMIT_AS, _mem, _mem)
_lim(resource.RLIMIT_FSIZE, _fsize, _fsize)
if _nproc >= 0:
    _lim(resource.RLIMIT_NPROC, _nproc, _nproc)
import socket
class _NoSocket(socket.socket):
    def __init__(self, *a, **k):
        raise OSError("network access is disabled in the evaluation sandbox")
socket.socket = _NoSocket
_nonce = sys.stdin.readline().strip()
sys.stdin.close()
sys.stdin = open("/dev/null")
with open(_path, encoding="utf-8") as _f:
    _src = _f.read()
sys.argv = [_path]
_g = {"__name__": "__main__", "__file__": _path, "__builtins__": __builtins__}
try:
    exec(compile(_src, _path, "exec"), _g)
except SystemExit:
    sys.exit(3)
sys.stdout.flush()
sys.stdout.write("\n" + _nonce + "\n")
sys.stdout.flush()
"""


@dataclass(frozen=True)
class Limits:
    """What one program may use. The defaults fit HumanEval (stdlib-only functions run in milliseconds)."""

    timeout_s: float = 3.0  # CPU seconds (rounded up to whole seconds: RLIMIT_CPU's unit)
    wall_s: float | None = None  # wall-clock backstop; None = 4 x timeout + 5 s
    memory_bytes: int = 2 << 30  # address space; Python itself needs ~30 MB
    file_bytes: int = 16 << 20  # largest file a program may write
    output_bytes: int = 64 << 10  # stderr kept for the report (the tail)

    @property
    def wall(self) -> float:
        return self.wall_s if self.wall_s is not None else 4 * self.timeout_s + 5.0


@dataclass(frozen=True)
class ExecResult:
    status: str  # passed | failed | timeout | error
    returncode: int | None
    elapsed_s: float
    stderr: str = ""  # the tail of the program's stderr

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@lru_cache(maxsize=1)
def isolation_prefix() -> tuple[str, ...]:
    """The ``unshare`` command line that works on this machine (net + pid namespaces), or () if none does."""
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    options: list[tuple[str, ...]] = [
        (exe, "--net", "--pid", "--fork", "--kill-child"),
        (exe, "--map-root-user", "--net", "--pid", "--fork", "--kill-child"),
        (exe, "--net"),
        (exe, "--map-root-user", "--net"),
    ]
    for cmd in options:
        try:
            r = subprocess.run([*cmd, sys.executable, "-c", "pass"], capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        if r.returncode == 0:
            return cmd
    return ()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait(proc: subprocess.Popen[bytes], wall: float) -> tuple[int | None, float]:
    """Wait up to ``wall`` seconds; (exit status or None on timeout, CPU seconds the process tree used).

    ``os.wait4`` gives the CPU time of the child and the descendants it reaped (unshare reaps the program), which
    tells a CPU-limit kill apart from a crash however ``unshare`` reports the signal."""
    deadline = time.monotonic() + wall
    delay = 0.002
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            rc = os.waitstatus_to_exitcode(status)
            proc.returncode = rc
            return rc, ru.ru_utime + ru.ru_stime
        left = deadline - time.monotonic()
        if left <= 0:
            return None, 0.0
        time.sleep(min(delay, left))  # Popen.wait(timeout) polls the same way
        delay = min(delay * 2, 0.05)


def _tail(path: Path, n: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def run_program(source: str, limits: Limits | None = None, isolate: bool = True) -> ExecResult:
    """Run one Python program in a sandboxed subprocess; ``passed`` when it runs to its end."""
    lim = limits or Limits()
    cpu = max(1, math.ceil(lim.timeout_s))
    nproc = 0 if os.geteuid() != 0 else -1  # root ignores RLIMIT_NPROC; the PID namespace covers it
    nonce = secrets.token_hex(16)
    scratch = Path(tempfile.mkdtemp(prefix="edit-engine-eval-"))
    t0 = time.perf_counter()
    try:
        prog = scratch / "program.py"
        prog.write_text(source, encoding="utf-8")
        env = {"PATH": os.defpath, "HOME": str(scratch), "TMPDIR": str(scratch), "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        cmd = [*(isolation_prefix() if isolate else ()), sys.executable, "-I", "-c", _RUNNER, str(prog),
               str(cpu), str(lim.memory_bytes), str(lim.file_bytes), str(nproc)]
        out_path, err_path = scratch / ".stdout", scratch / ".stderr"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=scratch,
                                        env=env, start_new_session=True, close_fds=True)
            except OSError as e:
                return ExecResult("error", None, time.perf_counter() - t0, f"cannot start: {e}")
            try:
                assert proc.stdin is not None
                try:
                    proc.stdin.write((nonce + "\n").encode())
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
                rc, cpu_used = _wait(proc, lim.wall)
            finally:
                _kill_group(proc.pid)  # the program and anything it left behind
                if proc.returncode is None:
                    proc.wait()
        elapsed = time.perf_counter() - t0
        stderr = _tail(err_path, lim.output_bytes)
        if rc is None or rc == 124 or cpu_used >= cpu - 0.05:
            return ExecResult("timeout", rc, elapsed, stderr)
        ended = _tail(out_path, 256).rstrip("\n").rsplit("\n", 1)[-1] == nonce
        return ExecResult("passed" if rc == 0 and ended else "failed", rc, elapsed, stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_many(sources: Iterable[str], limits: Limits | None = None, workers: int = 2,
             isolate: bool = True) -> Iterator[ExecResult]:
    """Results of ``run_program`` in input order, ``workers`` programs at a time."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        yield from pool.map(lambda s: run_program(s, limits, isolate), sources)
