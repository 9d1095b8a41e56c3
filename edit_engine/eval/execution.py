"""Run untrusted benchmark programs, one subprocess each, so that none can harm the evaluation or the machine.

Each program runs in a fresh ``python -I`` (no user site, a scrubbed environment) in its own session, with the
scratch folder as cwd, HOME and TMPDIR (removed afterwards) and stdout/stderr going to unnamed files. A small
runner (``sandbox.py``, run inside) sets the limits and layers below, then runs the program.

Limits, everywhere: CPU seconds (``RLIMIT_CPU``: the timeout, with a wall-clock backstop for programs that
sleep or block), address space (``RLIMIT_AS``), file size (``RLIMIT_FSIZE``); the process group is killed
afterwards.

**Started as root**, with every layer up (``sandbox_layers()`` says which are; each name below in brackets):

- The program runs as uid/gid 65534 with no supplementary groups [nobody], in a user namespace of its own that
  maps that uid to itself [userns]; every capability set is empty and ``no_new_privs`` is set [no-caps], and
  every mount is nosuid [read-only]: it cannot become root again by any exec.
- New network, PID, IPC and mount namespaces [netns, pidns, ipcns, mountns]: no network interface but a
  loopback that is down; when the program ends the kernel kills everything it started.
- Every mount is read-only [read-only] except the scratch folder and a private, size-limited ``/tmp`` and
  ``/dev/shm`` [private-tmp; tmpfs, gone with the namespace]; ``/dev`` holds only null, zero, full, random and
  urandom [private-dev]; the home folder of the user running the evaluation is empty [private-home], and a
  folder on the way to the interpreter that others may not enter (``/root``) holds only the interpreter's
  folders, bound back read-only. Elsewhere the program reads what uid 65534 may read.
- ``/proc`` is a fresh one of the new PID namespace: it shows only the sandbox's processes [private-proc].
- At most ``Limits.processes`` processes and threads at once, counted in the sandbox's user namespace, so no
  other program or sandbox counts against it [nproc]: a fork bomb gets ``EAGAIN``.
- A seccomp filter makes ``socket(2)`` and ``io_uring_setup(2)`` fail with ``EACCES`` and every system call of
  another ABI fail with ``ENOSYS``, whatever the program loads [seccomp]; ``socket`` and ``_socket`` still
  import but refuse to make sockets, which gives ordinary code a clear error [socket-modules].

**Started as a normal user**: the same, except that [nobody] does not apply: the program is uid 0 of a user
namespace that maps it to the user's own uid, with no capabilities and uid 0's special treatment locked off
(securebits), so it has exactly the user's rights on files, read-only, outside its writable folders.

What the kernel here does not allow is left out: probed once per process by a trial run, logged in one warning
and missing from ``sandbox_layers()`` and ``ExecResult.sandbox``. Without a mount namespace every file-system
layer goes. Without a user namespace a normal user's program may not fork at all (its process count would be
machine-wide). With no working ``unshare`` only the limits, [no-caps], [seccomp] and [socket-modules] hold,
and a program started by root keeps uid 0 (without capabilities, but the owner of root's files) unless uid
65534 can reach the interpreter, in which case it runs as 65534 and [nproc] counts every process of that uid.
A layer that the probe found but that fails to come up for a program stops that run (status ``error``) before
it starts. ``isolate=False`` runs without any kernel layer: limits and [socket-modules] only.

Not covered: ``/sys`` is the machine's (read-only); memory and disk are bounded per process and per file, not
in total (no cgroup); and the end marker below guards against programs that stop early by accident, not
against one written to forge it.

The timeout counts CPU seconds of the program (3 s is the usual HumanEval value): on a shared, loaded machine
wall time would fail correct programs at random.

A program passes when it runs to its end: exit status 0 *and* the runner's end marker (a nonce) on stdout, so
a completion that calls ``sys.exit(0)`` or ``os._exit(0)`` before the checks ran does not pass.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import IO

from edit_engine.eval import sandbox

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """What one program may use. The defaults fit HumanEval (stdlib-only functions run in milliseconds)."""

    timeout_s: float = 3.0  # CPU seconds (rounded up to whole seconds: RLIMIT_CPU's unit)
    wall_s: float | None = None  # wall-clock backstop; None = 4 x timeout + 5 s
    memory_bytes: int = 2 << 30  # address space; Python itself needs ~30 MB
    file_bytes: int = 16 << 20  # largest file a program may write; also the size of its private /tmp and /dev/shm
    output_bytes: int = 64 << 10  # stderr kept for the report (the tail)
    processes: int = 16  # processes and threads the program may have at once, itself included

    @property
    def wall(self) -> float:
        return self.wall_s if self.wall_s is not None else 4 * self.timeout_s + 5.0


@dataclass(frozen=True)
class ExecResult:
    status: str  # passed | failed | timeout | error
    returncode: int | None
    elapsed_s: float
    stderr: str = ""  # the tail of the program's stderr
    sandbox: tuple[str, ...] = ()  # the layers that were up for this run (see the module docstring)

    @property
    def passed(self) -> bool:
        return self.status == "passed"


# Every layer, by the name results carry. "nobody" only applies when the evaluation runs as root.
ALL_LAYERS = ("netns", "pidns", "ipcns", "mountns", "userns", "private-tmp", "private-dev", "private-proc",
              "private-home", "read-only", "nobody", "no-caps", "seccomp", "nproc", "socket-modules")
_NS_FLAGS = (("--net", "netns"), ("--pid", "pidns"), ("--ipc", "ipcns"), ("--mount", "mountns"),
             ("--user", "userns"))


@dataclass(frozen=True)
class _Plan:
    """How programs run here: the ``unshare`` command line and the steps the runner takes inside it."""

    prefix: tuple[str, ...]
    steps: tuple[str, ...]
    root: bool

    def nproc(self, lim: Limits) -> int:
        """RLIMIT_NPROC for the program, or -1 for none that would hold."""
        if "--user" in self.prefix:
            return lim.processes + 1  # unshare itself counts in the sandbox's user namespace
        if "nobody" in self.steps:
            return lim.processes  # per namespace with "userns"; else all processes of uid 65534
        return -1 if self.root else 0  # a user's count is machine-wide: allow no fork at all

    @property
    def layers(self) -> tuple[str, ...]:
        names = {name for flag, name in _NS_FLAGS if flag in self.prefix} | set(self.steps) | {"socket-modules"}
        if self.nproc(Limits()) < 0:
            names.discard("nproc")
        return tuple(n for n in ALL_LAYERS if n in names)


_PROBE_PROGRAM = (
    "import collections, decimal, fractions, hashlib, itertools, json, math, re, tempfile\n"
    "with open('probe.txt', 'w') as f:\n    f.write('ok')\n"
    "with open('probe.txt') as f:\n    assert f.read() == 'ok'\n"
)
_plan_lock = threading.Lock()


def _candidates(root: bool) -> list[_Plan]:
    """Strongest first. Inside a namespace the runner reports which of its steps came up; without one it takes
    only the steps that cannot touch the machine."""
    exe = shutil.which("unshare")
    steps = ("private-home", "private-tmp", "private-dev", "read-only", "private-proc",
             "no-caps", "seccomp", "nproc")
    user = () if root else ("--user", "--map-root-user")
    ns = ("--net", "--pid", "--ipc", "--fork", "--kill-child")
    bare = ("nobody", "no-caps", "seccomp", "nproc") if root else ("no-caps", "seccomp", "nproc")
    plans = []
    if exe is not None:
        full = ("expose", *steps[:5], "nobody", "userns", *steps[5:]) if root else steps
        plans += [_Plan((exe, *user, "--mount", *ns), full, root), _Plan((exe, *user, *ns), bare, root)]
    return [*plans, _Plan((), bare, root), _Plan((), (), root)]


def _probe(root: bool) -> _Plan:
    for plan in _candidates(root):
        result, out = _execute(_PROBE_PROGRAM, Limits(timeout_s=10, wall_s=60), plan, probe=True)
        if result.passed:
            marks = [line for line in out.splitlines() if line.startswith(sandbox.PROBE_MARK)]
            up = marks[0][len(sandbox.PROBE_MARK):].strip().split(",") if marks else []
            return _Plan(plan.prefix, tuple(s for s in plan.steps if s in up), root)
        logger.debug("sandbox probe %s failed: %s", plan, result.stderr[-2000:])
    return _Plan((), (), root)


@lru_cache(maxsize=2)
def _plan_for(root: bool) -> _Plan:
    plan = _probe(root)
    missing = [n for n in ALL_LAYERS if n not in plan.layers and (root or n != "nobody")]
    if missing:
        logger.warning("evaluation sandbox: %s unavailable on this machine; programs run with only %s "
                       "(see edit_engine.eval.execution)", ", ".join(missing), ", ".join(plan.layers))
    return plan


def _plan() -> _Plan:
    with _plan_lock:  # one probe, even when the first programs start on several threads
        return _plan_for(os.geteuid() == 0)


def sandbox_layers() -> tuple[str, ...]:
    """The layers programs run under on this machine (probed once; a missing one is logged as a warning)."""
    return _plan().layers


def isolation_prefix() -> tuple[str, ...]:
    """The ``unshare`` command line programs run under here, or () if none works."""
    return _plan().prefix


@lru_cache(maxsize=1)
def _mount_ns() -> str:
    try:
        return os.readlink("/proc/self/ns/mnt")
    except OSError:
        return ""  # the runner then mounts nothing


@lru_cache(maxsize=1)
def _runner_source() -> str:
    return Path(sandbox.__file__).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _interpreter_dirs() -> tuple[str, ...]:
    """The folders the interpreter needs (a runner that is not root must still reach them)."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, os.path.dirname(sys.executable),
            os.path.dirname(os.path.realpath(sys.executable)), sysconfig.get_config_var("LIBDIR") or sys.prefix}
    dirs = {f(d) for d in dirs if os.path.isdir(d) for f in (os.path.abspath, os.path.realpath)}
    return tuple(sorted(d for d in dirs if not any(sandbox._under(d, e) and d != e for e in dirs)))


def _home() -> str:
    try:
        return os.path.realpath(Path.home())
    except (RuntimeError, KeyError):
        return "/"  # none known: nothing to hide


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


def _read(f: IO[bytes], n: int, tail: bool = True) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - n) if tail else 0)
    return f.read(n).decode("utf-8", "replace")


def _spawn(cmd: list[str], scratch: Path, nonce: str, out: IO[bytes], err: IO[bytes],
           wall: float) -> tuple[int | None, float] | str:
    """Start the runner, hand it the nonce, wait; (exit status, CPU seconds) or why it could not start."""
    env = {"PATH": os.defpath, "HOME": str(scratch), "TMPDIR": str(scratch), "LANG": "C.UTF-8",
           "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=scratch, env=env,
                                start_new_session=True, close_fds=True)
    except OSError as e:
        return f"cannot start: {e}"
    try:
        assert proc.stdin is not None
        try:
            proc.stdin.write((nonce + "\n").encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        return _wait(proc, wall)
    finally:
        _kill_group(proc.pid)  # the program and anything it left behind
        if proc.returncode is None:
            proc.wait()


def _execute(source: str, lim: Limits, plan: _Plan, probe: bool = False) -> tuple[ExecResult, str]:
    """Run one program under ``plan``; its result and the head of its stdout."""
    cpu = max(1, math.ceil(lim.timeout_s))
    nonce = secrets.token_hex(16)
    # realpath: the runner binds the folder back at this very path
    scratch = Path(os.path.realpath(tempfile.mkdtemp(prefix="edit-engine-eval-")))
    nproc = plan.nproc(lim)
    t0 = time.perf_counter()
    try:
        prog = scratch / "program.py"
        prog.write_text(source, encoding="utf-8")
        if "nobody" in plan.steps:
            os.chown(scratch, sandbox.NOBODY, sandbox.NOBODY)  # the program's only writable folder
        cfg = {"program": str(prog), "scratch": str(scratch), "cpu": cpu, "mem": lim.memory_bytes,
               "fsize": lim.file_bytes, "nproc": nproc, "tmp_bytes": lim.file_bytes, "probe": probe,
               "keep": [*_interpreter_dirs(), str(scratch)], "parent_mnt_ns": _mount_ns(),
               "home": _home(),
               "steps": [s for s in plan.steps if s != "nproc" or nproc >= 0]}
        cmd = [*plan.prefix, sys.executable, "-I", "-c", _runner_source(), json.dumps(cfg)]
        # Output goes to unnamed files: nothing the program does in its folder can redirect what is read back.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            waited = _spawn(cmd, scratch, nonce, out, err, lim.wall)
            elapsed = time.perf_counter() - t0
            if isinstance(waited, str):
                return ExecResult("error", None, elapsed, waited, plan.layers), ""
            rc, cpu_used = waited
            stderr, head = _read(err, lim.output_bytes), _read(out, 4096, tail=False) if probe else ""
            ended = _read(out, 256).rstrip("\n").rsplit("\n", 1)[-1] == nonce
        if rc is None or rc == 124 or cpu_used >= cpu - 0.05:
            status = "timeout"
        elif rc == sandbox.SETUP_FAILED and "sandbox setup failed" in stderr:
            status = "error"
        else:
            status = "passed" if rc == 0 and ended else "failed"
        return ExecResult(status, rc, elapsed, stderr, plan.layers), head
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_program(source: str, limits: Limits | None = None, isolate: bool = True) -> ExecResult:
    """Run one Python program in a sandboxed subprocess; ``passed`` when it runs to its end.

    ``isolate=False`` skips every kernel layer (resource limits and the socket-module block stay)."""
    root = os.geteuid() == 0
    plan = _plan() if isolate else _Plan((), () if root else ("nproc",), root)
    return _execute(source, limits or Limits(), plan)[0]


def run_many(sources: Iterable[str], limits: Limits | None = None, workers: int = 2,
             isolate: bool = True) -> Iterator[ExecResult]:
    """Results of ``run_program`` in input order, ``workers`` programs at a time."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        yield from pool.map(lambda s: run_program(s, limits, isolate), sources)
