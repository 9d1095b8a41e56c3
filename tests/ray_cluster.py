"""A local Ray cluster for tests, and ``edit-engine serve --ray`` run against it (imported as ``ray_cluster``:
pytest puts this folder on ``sys.path``). Nothing here imports Ray: the nodes are ``ray start`` processes and the
command is a process of its own, so the test process never joins the cluster.

``LocalCluster``: a head and worker nodes as separate ``ray start --block`` processes (loopback address, their own
temp dir and ports, token authentication with a token of their own, one CPU each); ``stop`` ends them and kills any
process of the cluster left over (its temp dir in the command line, or its token in the environment) by id.
``Command``: ``edit-engine serve --ray --address CLUSTER ...``, started and stopped with SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TIMEOUT = 60.0  # every wait here is bounded by it (replicas start in ~10-20 s on two busy cores)
STOP_GRACE_S = 10.0  # the cluster's nodes get this long to stop on SIGTERM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalCluster:
    """A head and worker nodes as separate ``ray start --block`` processes on the loopback address, in a temp dir
    of their own (``--temp-dir``), on free ports, one CPU each."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ee-ray-", dir="/tmp"))  # short: Ray's socket paths are limited
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[str]] = []
        # Token authentication with a token of its own (nothing read from or written to ~/.ray).
        self.auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        self.env = {**os.environ, **self.auth, "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1",
                    "TOKENIZERS_PARALLELISM": "false"}

    def _start(self, *args: str) -> None:
        cmd = ["ray", "start", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats",
               f"--temp-dir={self.root}", f"--dashboard-agent-listen-port={free_port()}",
               "--min-worker-port=0", "--max-worker-port=0", *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env,
                                start_new_session=True)
        self.procs.append(proc)
        started, lines = threading.Event(), []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if "Ray runtime started" in line:
                    started.set()

        threading.Thread(target=read, daemon=True).start()
        if not started.wait(TIMEOUT) or proc.poll() is not None:
            raise RuntimeError("ray start failed:\n" + "".join(lines[-30:]))

    def start(self, workers: int = 1) -> LocalCluster:
        """The head, then ``workers`` worker nodes."""
        self._start("--head", f"--port={self.port}", "--include-dashboard=false",
                    f"--ray-client-server-port={free_port()}")
        for _ in range(workers):
            self._start(f"--address={self.address}")
        return self

    def stop(self) -> None:
        """SIGTERM to both nodes; a node still up after ``STOP_GRACE_S`` is killed with its process group (each
        node runs in a session of its own); then whatever of this cluster is left, by id."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(TIMEOUT)
        for pid in self.leftovers():  # processes of this cluster that outlived their node
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    def leftovers(self) -> list[int]:
        """Processes of this cluster: its temp dir in their command line, or its token in their environment
        (Ray's workers rename themselves, ``ray::...``, and inherit the nodes' environment)."""
        marks = (str(self.root).encode(), self.auth["RAY_AUTH_TOKEN"].encode())
        out = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if marks[0] in (entry / "cmdline").read_bytes() or marks[1] in (entry / "environ").read_bytes():
                        out.append(int(entry.name))
                except OSError:
                    pass
        return out


class Command:
    """``edit-engine serve --ray --address CLUSTER ...`` as a process of its own."""

    def __init__(self, cluster: LocalCluster, port: int, *flags: str) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edit_engine.cli.main", "serve", "--ray", "--address", cluster.address,
             "--port", str(port), "--threads", "1", "--log-level", "warning", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cluster.env, start_new_session=True)
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line)
                if "running on http://" in line:
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(2 * TIMEOUT) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("edit-engine serve --ray did not start:\n" + "".join(self.lines[-40:]))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(TIMEOUT)
