"""The half of the evaluation sandbox that runs inside it: set up the layers, then run one program.

``execution`` hands this file's source to ``python -I -c`` inside the namespaces that ``unshare`` made, with a
JSON configuration as the one argument; the nonce comes on stdin. Only the standard library is used (the
package is not importable there). ``execution``'s docstring says what the layers guarantee.

Each step either comes up and is checked, or fails: with ``probe`` set a failed step is reported and left out
(``execution`` probes once per machine), otherwise the run stops with ``SETUP_FAILED`` before the program runs.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import resource
import signal
import sys
from collections.abc import Callable
from functools import lru_cache
from typing import Any

NOBODY = 65534  # the overflow uid/gid: what the program runs as when the sandbox is started by root
SETUP_FAILED = 125
PROBE_MARK = "edit-engine-sandbox-layers:"

_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_CLONE_NEWUSER = 0x10000000
_AT_FDCWD, _AT_RECURSIVE = -100, 0x8000
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID = 1, 2
_SYS_MOUNT_SETATTR = 442  # the same number on every architecture (added in Linux 5.12)
_PR_SET_DUMPABLE, _PR_SET_SECCOMP, _PR_CAPBSET_DROP, _PR_SET_SECUREBITS = 4, 22, 24, 28
_PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
_SECBITS_LOCKED_NOROOT = 0xEF  # NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE and the locks (KEEP_CAPS stays off)
_DEVICES = ("null", "zero", "full", "random", "urandom")
# (AUDIT_ARCH, socket(2), io_uring_setup(2)) per machine; io_uring can open sockets too
_SECCOMP_ARCH = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.unshare.argtypes = [ctypes.c_int]
    return libc


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _enc(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc().mount(_enc(source), target.encode(), _enc(fstype), flags, _enc(data)), f"mount {target}")


def _prctl(option: int, arg: int = 0, arg3: int = 0) -> None:
    _check(_libc().prctl(option, arg, arg3, 0, 0), f"prctl {option}")


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _mount_setattr(path: str, flags: int, attr_set: int, attr_clr: int) -> None:
    attr = _MountAttr(attr_set, attr_clr, 0, 0)
    ret = _libc().syscall(ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(_AT_FDCWD), path.encode(),
                          ctypes.c_uint(flags), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
    _check(ret, f"mount_setattr {path}")


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _overlay(top: str, keep: list[str], mode: str, size: int) -> None:
    """Cover ``top`` with an empty tmpfs, then bind the ``keep`` folders under it back at the same paths."""
    keep = sorted(k for k in keep if _under(k, top) and k != top)  # outer folders first
    fds = [os.open(k, os.O_PATH | os.O_DIRECTORY) for k in keep]
    try:
        _mount("tmpfs", top, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode={mode},size={size}")
        try:
            for k, fd in zip(keep, fds, strict=True):
                os.makedirs(k, mode=0o755, exist_ok=True)
                _mount(f"/proc/self/fd/{fd}", k, None, _MS_BIND | _MS_REC)
        except OSError:
            _libc().umount2(top.encode(), _MNT_DETACH)
            raise
    finally:
        for fd in fds:
            os.close(fd)


def _hidden_tops(keep: list[str], skip_tmp: bool) -> dict[str, list[str]]:
    """The outermost folder on the way to each kept path that others may not enter (``/root`` for an interpreter
    under it), with the kept paths below it: the unprivileged program could not reach them otherwise."""
    tops: dict[str, list[str]] = {}
    for k in keep:
        if skip_tmp and _under(k, "/tmp"):
            continue  # the private /tmp puts these back
        parts = k.strip("/").split("/")
        for i in range(1, len(parts)):
            d = "/" + "/".join(parts[:i])
            if not os.stat(d).st_mode & 0o001:
                tops.setdefault(d, []).append(k)
                break
    return tops


def _step_expose(cfg: dict[str, Any]) -> None:
    for top, keep in sorted(_hidden_tops(cfg["keep"], skip_tmp=True).items()):
        _overlay(top, keep, "755", 1 << 20)


def _step_home(cfg: dict[str, Any]) -> None:
    """An empty home folder for the user who started the evaluation (keys, tokens and caches live there); only
    the kept folders under it (an interpreter) are bound back."""
    home = cfg["home"]
    if home != "/" and os.path.isdir(home) and not any(_under(home, k) for k in cfg["keep"]):
        _overlay(home, cfg["keep"], "755", 1 << 20)


def _step_tmp(cfg: dict[str, Any]) -> None:
    """A private, size-limited /tmp holding only the scratch folder (bound back, writable) and, if it lives there,
    the interpreter."""
    scratch = cfg["scratch"]
    _overlay("/tmp", cfg["keep"], "1777", cfg["tmp_bytes"])
    if scratch not in _mount_points():  # not under /tmp nor under a hidden folder: bind it onto itself
        _mount(scratch, scratch, None, _MS_BIND | _MS_REC)
    os.chdir(scratch)  # the cwd must be the bound folder, not the one beneath it


def _mount_points() -> set[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return {line.split()[4] for line in f}


def _step_dev(cfg: dict[str, Any]) -> None:
    """A private /dev: the harmless character devices, the usual links and a private /dev/shm."""
    fds = {n: os.open(f"/dev/{n}", os.O_PATH) for n in _DEVICES if os.path.exists(f"/dev/{n}")}
    try:
        _mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=755,size=64k")
        for name, fd in fds.items():
            os.close(os.open(f"/dev/{name}", os.O_CREAT | os.O_WRONLY, 0o666))
            _mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, _MS_BIND)
    finally:
        for fd in fds.values():
            os.close(fd)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")
    os.mkdir("/dev/shm")
    _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,size={cfg['tmp_bytes']}")


def _step_read_only(cfg: dict[str, Any]) -> None:
    """Every mount read-only and nosuid, then the scratch folder, /tmp and /dev/shm writable again."""
    _mount_setattr("/", _AT_RECURSIVE, _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID, 0)
    mounted = _mount_points()
    for path in (cfg["scratch"], "/tmp", "/dev/shm"):
        if path in mounted:
            _mount_setattr(path, 0, 0, _MOUNT_ATTR_RDONLY)
    if not os.statvfs("/").f_flag & os.ST_RDONLY or os.statvfs(cfg["scratch"]).f_flag & os.ST_RDONLY:
        raise OSError(errno.EIO, "the read-only view did not take")


def _step_proc(cfg: dict[str, Any]) -> None:
    """A fresh /proc of the new PID namespace: only the sandbox's own processes are in it."""
    if os.getpid() != 1:
        raise OSError(errno.EINVAL, "not the first process of a new PID namespace")
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    if {p for p in os.listdir("/proc") if p.isdigit()} != {"1"}:
        raise OSError(errno.EIO, "the new /proc shows other processes")


def _status_caps() -> dict[str, int]:
    with open("/proc/self/status", encoding="ascii") as f:
        return {k: int(v, 16) for k, _, v in (line.partition(":\t") for line in f) if k.startswith("Cap")}


def _drop_bounding_set() -> None:
    if not _status_caps().get("CapBnd"):
        return
    for cap in range(64):
        if _libc().prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == errno.EINVAL:
                break  # past the last capability
            _check(-1, f"drop capability {cap}")


def _step_nobody(cfg: dict[str, Any]) -> None:
    """Root becomes uid/gid 65534 with no supplementary groups; the kernel clears its capabilities."""
    hidden = _hidden_tops(cfg["keep"], skip_tmp=False)
    if hidden:
        raise OSError(errno.EACCES, f"uid {NOBODY} could not reach {sorted(hidden.values())}")
    _drop_bounding_set()
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    if (os.getresuid(), os.getresgid()) != ((NOBODY,) * 3, (NOBODY,) * 3) or os.getgroups():
        raise OSError(errno.EIO, "still privileged after setuid")


def _step_userns(cfg: dict[str, Any]) -> None:
    """A user namespace of the sandbox's own, mapping its uid to itself: the process limit counts per namespace."""
    uid, gid = os.getuid(), os.getgid()
    _prctl(_PR_SET_DUMPABLE, 1)  # setuid made /proc/self root's; the id maps below must be writable by us
    _check(_libc().unshare(_CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as f:
            f.write(text)


def _step_caps(cfg: dict[str, Any]) -> None:
    """No capabilities in any set, none to gain by exec (no_new_privs; uid 0 is not special: securebits)."""
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    if os.getuid() == 0:
        _prctl(_PR_SET_SECUREBITS, _SECBITS_LOCKED_NOROOT)
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    _drop_bounding_set()

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; two 32-bit words each
    _check(_libc().capset(ctypes.byref(Header(0x20080522, 0)), ctypes.byref(data)), "capset")
    if any(_status_caps().values()):
        raise OSError(errno.EIO, f"capabilities left: {_status_caps()}")


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _step_seccomp(cfg: dict[str, Any]) -> None:
    """A seccomp filter: socket(2) and io_uring_setup(2) fail with EACCES, and so does every system call of
    another ABI (i386, x32), whatever the program loads (``_socket``, ctypes)."""
    machine = platform.machine()
    if machine not in _SECCOMP_ARCH:
        raise OSError(errno.ENOSYS, f"no seccomp filter for {machine}")
    arch, nr_socket, nr_uring = _SECCOMP_ARCH[machine]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, deny, foreign = 0x7FFF0000, 0x00050000 | errno.EACCES, 0x00050000 | errno.ENOSYS
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, foreign),  # seccomp_data.arch
            (ld, 0, 0, 0), (jge, 3, 0, 0x40000000),  # seccomp_data.nr; the x32 bit
            (jeq, 2, 0, nr_socket), (jeq, 1, 0, nr_uring), (ret, 0, 0, allow), (ret, 0, 0, deny)]
    filters = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), filters)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _prctl(_PR_SET_SECCOMP, 2, ctypes.addressof(fprog))  # SECCOMP_MODE_FILTER
    if _libc().socket(2, 1, 0) != -1 or ctypes.get_errno() != errno.EACCES:  # AF_INET, SOCK_STREAM
        raise OSError(errno.EIO, "socket(2) still works under the filter")


def _step_nproc(cfg: dict[str, Any]) -> None:
    n = cfg["nproc"]
    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if hard != resource.RLIM_INFINITY:
        n = min(n, hard)
    resource.setrlimit(resource.RLIMIT_NPROC, (n, n))


# In order. A step runs only when the ones it needs came up (a private /tmp binds the scratch folder back, which
# the read-only view needs; the uid map needs the new /proc).
STEPS: dict[str, tuple[Callable[[dict[str, Any]], None], tuple[str, ...]]] = {
    "expose": (_step_expose, ()),
    "private-home": (_step_home, ()),
    "private-tmp": (_step_tmp, ()),
    "private-dev": (_step_dev, ()),
    "read-only": (_step_read_only, ("private-tmp",)),
    "private-proc": (_step_proc, ()),
    "nobody": (_step_nobody, ()),
    "userns": (_step_userns, ("nobody", "private-proc")),
    "no-caps": (_step_caps, ()),
    "seccomp": (_step_seccomp, ()),
    "nproc": (_step_nproc, ()),
}


_MOUNT_STEPS = {"expose", "private-home", "private-tmp", "private-dev", "read-only", "private-proc"}


def set_up(cfg: dict[str, Any]) -> list[str]:
    """Run the configured steps in order; the ones that came up. Without ``probe`` a failure ends the process."""
    done: list[str] = []
    wanted = set(cfg["steps"])
    if wanted & _MOUNT_STEPS:
        try:  # nothing mounted below may reach the parent's mount namespace
            if not cfg["parent_mnt_ns"] or os.readlink("/proc/self/ns/mnt") == cfg["parent_mnt_ns"]:
                raise OSError(errno.EPERM, "still in the parent's mount namespace")
            _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
        except OSError as e:
            _give_up(cfg, "mount propagation", e)
            wanted -= _MOUNT_STEPS
    for name, (step, needs) in STEPS.items():
        if name not in wanted or not all(n in done or n not in cfg["steps"] for n in needs):
            continue
        try:
            step(cfg)
        except OSError as e:
            _give_up(cfg, name, e)
            continue
        done.append(name)
    return done


def _give_up(cfg: dict[str, Any], what: str, e: OSError) -> None:
    if not cfg["probe"]:
        os.write(2, f"sandbox setup failed: {what}: {e}\n".encode())
        os._exit(SETUP_FAILED)


def _refuse(*args: object, **kwargs: object) -> Any:
    raise OSError(errno.EACCES, "network access is disabled in the evaluation sandbox")


class _RefusedSocket:
    def __new__(cls, *args: object, **kwargs: object) -> _RefusedSocket:
        return _refuse()  # type: ignore[no-any-return]


def block_socket_modules() -> None:
    """``socket`` and ``_socket`` import as usual, but nothing in them makes a socket (the seccomp filter is what
    holds against code that digs the real type out; this gives ordinary code a clear error)."""
    import _socket
    import socket

    for mod in (socket, _socket):
        for name in ("socket", "SocketType"):
            setattr(mod, name, _RefusedSocket)
        for name in ("socketpair", "fromfd", "fromshare", "create_connection", "create_server"):
            if hasattr(mod, name):
                setattr(mod, name, _refuse)


def _limit(which: int, soft: int, hard: int) -> None:
    try:
        _, cur = resource.getrlimit(which)
        if cur != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur), min(hard, cur)
        resource.setrlimit(which, (soft, hard))
    except (ValueError, OSError):
        pass


def _on_xcpu(signum: int, frame: object) -> None:
    os.write(2, b"\nCPU time limit reached\n")
    os._exit(124)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    _limit(resource.RLIMIT_CPU, cfg["cpu"], cfg["cpu"] + 1)
    signal.signal(signal.SIGXCPU, _on_xcpu)
    nonce = sys.stdin.readline().strip()
    sys.stdin.close()
    sys.stdin = open(os.devnull)  # the program's stdin
    layers = set_up(cfg)
    if cfg["probe"]:
        print(PROBE_MARK, ",".join(layers), flush=True)
    _limit(resource.RLIMIT_AS, cfg["mem"], cfg["mem"])
    _limit(resource.RLIMIT_FSIZE, cfg["fsize"], cfg["fsize"])
    block_socket_modules()
    path = cfg["program"]
    with open(path, encoding="utf-8") as f:
        src = f.read()
    sys.argv = [path]
    glob = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
    try:
        exec(compile(src, path, "exec"), glob)
    except SystemExit:
        sys.exit(3)
    sys.stdout.flush()
    sys.stdout.write("\n" + nonce + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
