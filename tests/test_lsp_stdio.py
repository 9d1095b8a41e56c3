"""The language server process over raw stdio: framing, lifecycle, logging and large documents.

``RawServer`` speaks bytes to ``python -m edit_engine.lsp`` (no LSP client library in between), so tests can
send what a client library refuses to: wrong ``Content-Length`` headers, noise, requests before ``initialize``,
and pipes closed in the middle of a request. ``tests/test_fuzz_lsp.py`` drives the server with it too. Nothing
sleeps: every wait is for a message, a log line or the process's exit, with a deadline.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edit_engine import protocol
from edit_engine.engine import Engine

ROOT = Path(__file__).resolve().parents[1]
DEADLINE = 60.0  # seconds for any single wait (start-up on a loaded 2-core machine included)
DOC = "import os\n\n\ndef add(a, b):\n    return \n\n\nprint(add(1, 2))\n"
AT = {"line": 4, "character": 11}  # after "return " in DOC


def frame(obj: Any) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class RawServer:
    """``python -m edit_engine.lsp`` as a subprocess, spoken to in bytes; what it sends is collected by threads."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "edit_engine.lsp", "--threads", "1", *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stderr: list[str] = []
        self.notifications: list[dict[str, Any]] = []
        self.responses: dict[Any, dict[str, Any]] = {}
        self._ids = 0
        self._stderr_done = threading.Event()
        self._stderr_line = threading.Condition()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        out = self.proc.stdout
        assert out is not None
        try:
            while True:
                length = None
                while (line := out.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if not line or length is None:
                    break
                self.inbox.put(json.loads(out.read(length)))
        except (OSError, ValueError):  # the test closed the pipe
            pass
        self.inbox.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._stderr_line:
                self.stderr.append(line.decode(errors="replace"))
                self._stderr_line.notify_all()
        self._stderr_done.set()
        with self._stderr_line:
            self._stderr_line.notify_all()

    def log_line(self, text: str, timeout: float = DEADLINE) -> str:
        """The first stderr line holding ``text``, once the server has written it."""
        with self._stderr_line:
            found = self._stderr_line.wait_for(
                lambda: any(text in line for line in self.stderr) or self._stderr_done.is_set(), timeout)
            lines = [line for line in self.stderr if text in line]
        assert found and lines, f"no {text!r} on stderr:\n{self.log_text()}"
        return lines[0]

    # ------------------------------------------------------------------ sending
    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def notify(self, method: str, params: Any = None) -> None:
        self.write(frame({"jsonrpc": "2.0", "method": method, "params": params}))

    def request(self, method: str, params: Any = None, msg_id: Any = None) -> Any:
        """Send a request; returns its id (``response(id)`` waits for the answer)."""
        if msg_id is None:
            self._ids += 1
            msg_id = f"raw-{self._ids}"
        self.write(frame({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}))
        return msg_id

    def call(self, method: str, params: Any = None, timeout: float = DEADLINE) -> dict[str, Any]:
        return self.response(self.request(method, params), timeout)

    # ------------------------------------------------------------------ receiving
    def _next(self, deadline: float) -> dict[str, Any]:
        try:
            msg = self.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError("the server did not answer in time") from None
        if msg is None:
            self.inbox.put(None)
            raise EOFError(f"the server closed stdout; stderr:\n{''.join(self.stderr)[-3000:]}")
        if "method" in msg:
            self.notifications.append(msg)
        else:
            self.responses[msg.get("id")] = msg
        return msg

    def response(self, msg_id: Any, timeout: float = DEADLINE) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while msg_id not in self.responses:
            self._next(deadline)
        return self.responses.pop(msg_id)

    def notification(self, method: str, timeout: float = DEADLINE) -> dict[str, Any]:
        """The first notification of ``method`` not yet taken."""
        deadline = time.monotonic() + timeout
        while True:
            for i, n in enumerate(self.notifications):
                if n["method"] == method:
                    return self.notifications.pop(i)
            self._next(deadline)

    def passes(self, request_id: Any, timeout: float = DEADLINE) -> dict[str, Any]:
        """The next ``editEngine/pass`` of ``request_id``."""
        deadline = time.monotonic() + timeout
        while True:
            for i, n in enumerate(self.notifications):
                if n["method"] == protocol.PASS and n["params"]["requestId"] == request_id:
                    return self.notifications.pop(i)["params"]
            self._next(deadline)

    # ------------------------------------------------------------------ lifecycle
    def initialize(self, options: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = self.call("initialize", {"processId": None, "rootUri": None, "capabilities": {},
                                          "initializationOptions": options})
        self.notify("initialized", {})
        return answer

    def open(self, uri: str, text: str, version: int = 1) -> None:
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python",
                                                              "version": version, "text": text}})

    def wait(self, timeout: float = DEADLINE) -> int:
        """The exit code, once the process has ended and its stderr is read."""
        code = self.proc.wait(timeout)
        self._stderr_done.wait(timeout)
        return code

    def stop(self) -> int:
        assert "result" in self.call("shutdown")
        self.notify("exit")
        return self.wait()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(DEADLINE)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()

    def log_text(self) -> str:
        return "".join(self.stderr)


def infill(uri: str, position: dict[str, int] = AT, max_tokens: int = 4, **extra: Any) -> dict[str, Any]:
    return {"textDocument": {"uri": uri, **extra}, "position": position, "maxTokens": max_tokens}


@pytest.fixture()
def server(tiny_checkpoint: Path) -> Iterator[RawServer]:
    s = RawServer()
    yield s
    s.kill()


def change(uri: str, version: int, start: tuple[int, int], end: tuple[int, int], text: str) -> dict[str, Any]:
    return {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{
        "range": {"start": {"line": start[0], "character": start[1]}, "end": {"line": end[0], "character": end[1]}},
        "text": text}]}


# ---------------------------------------------------------------------------------------------- large documents
LINE = "value = compute(alpha, beta) + gamma  # ok\n"


def _keystrokes(s: RawServer, uri: str, lines: int, version: int, n: int = 30) -> float:
    """Send ``n`` edits to ``uri`` (bottom-up, one per line; every third a line break), then time an infill on
    the small document: the server handles messages in order, so the answer waits for every edit."""
    for k in range(n):
        line = lines - 1 - k * (lines // n)
        s.notify("textDocument/didChange", change(uri, version + k, (line, 4), (line, 4), "\n" if k % 3 else "z"))
    t = time.perf_counter()
    answer = s.call("editEngine/infill", infill("file:///small.py"))
    assert "result" in answer, answer
    return time.perf_counter() - t


def test_keystrokes_in_a_huge_document_cost_about_what_they_cost_in_a_small_one(server: RawServer,
                                                                                tiny_checkpoint: Path) -> None:
    """Editing a 5-million-character document must not hold up the answers to other requests; the document is
    over the size limit, so it gets a message and no fill until it shrinks under the limit, and the edits land
    where they should (the fill after shrinking is the engine's fill of the text edited here)."""
    s = server
    s.initialize({"modelPath": str(tiny_checkpoint)})
    s.open("file:///small.py", DOC)
    s.open("file:///base.py", LINE * 2000)
    assert "result" in s.call("editEngine/infill", infill("file:///small.py"))  # the model is loaded and warm
    baseline = min(_keystrokes(s, "file:///base.py", 2000, 2) for _ in range(2))
    big = LINE * (5_000_000 // len(LINE))
    s.open("file:///big.py", big)
    s.call("editEngine/status")  # answered once the document is in (the timing below is the edits' only)
    lines = big.count("\n")
    elapsed = _keystrokes(s, "file:///big.py", lines, 2)
    assert elapsed < 3 * baseline + 1.0, (elapsed, baseline)  # before the line index was incremental: ~25 s
    shown = s.notification("window/showMessage", timeout=1)["params"]  # sent before the answer above
    assert "over the limit of 500,000" in shown["message"] and "file:///big.py" in shown["message"]

    # Over the limit: no fill (a clear error for editEngine/infill, an empty list for inline completion).
    version = 2 + 29
    too_large = s.call("editEngine/infill", infill("file:///big.py", version=version))
    assert too_large["error"]["code"] == protocol.SERVER_OVERLOADED, too_large
    inline = s.call("textDocument/inlineCompletion", {"textDocument": {"uri": "file:///big.py"},
                                                      "position": AT, "context": {"triggerKind": 1}})
    assert inline["result"]["items"] == []
    # The same edits here, then cut all but the first and last lines: the rest fits and fills.
    expected = big.split("\n")
    for k in range(30):
        line = lines - 1 - k * (lines // 30)
        text = expected[line]
        expected[line:line + 1] = [text[:4], text[4:]] if k % 3 else [text[:4] + "z" + text[4:]]
    edited = len(expected) - 1
    s.notify("textDocument/didChange", change("file:///big.py", version + 1, (1, 0), (edited - 4, 0), ""))
    expected_text = "\n".join(expected[:1] + expected[edited - 4:])
    cursor = {"line": 2, "character": 8}
    answer = s.call("editEngine/infill", infill("file:///big.py", cursor, version=version + 1))["result"]
    offset = len(expected[0]) + 1 + len(expected[edited - 4]) + 1 + 8
    want = Engine.load(tiny_checkpoint).complete(expected_text, offset, max_tokens=4)
    assert answer["text"] == want.text
    assert s.stop() == 0
    assert "Traceback" not in s.log_text()


# ---------------------------------------------------------------------------------------------- framing
def test_a_wrong_content_length_costs_one_message_not_the_session(server: RawServer, tiny_checkpoint: Path) -> None:
    """The server resynchronises on the next ``Content-Length`` header after a length that is too large (the
    message is still handled: its bytes up to the next header are JSON), too small (answered -32700, id null),
    a header block without a length or with a length that is not a number, noise, and a length over the limit;
    every request after one of those is answered."""
    s = server
    s.initialize({"modelPath": str(tiny_checkpoint)})
    s.open("file:///a.py", DOC)
    status = json.dumps({"jsonrpc": "2.0", "id": "long", "method": "editEngine/status"}).encode()
    s.write(b"Content-Length: %d\r\n\r\n" % (len(status) + 40) + status)  # 40 bytes too long
    assert "result" in s.call("editEngine/status", timeout=20)
    assert "result" in s.response("long", timeout=1)  # already answered: its body ended at the next header
    s.write(b"Content-Length: %d\r\n\r\n" % (len(status) - 9) + status)  # too short: the rest is noise
    assert "result" in s.call("editEngine/status", timeout=20)
    assert s.response(None, timeout=1)["error"]["code"] == protocol.PARSE_ERROR
    for noise in (b"Content-Length: many\r\n\r\n" + status, b"X-Junk: 1\r\n\r\n{}", b"\x00\xff garbage \r\n",
                  b"Content-Length: 99999999999999\r\n\r\n" + status, b"Content-Length: 2\r\n\r\n" + status):
        s.write(noise)
        answer = s.call("editEngine/status", timeout=20)
        assert answer["result"]["documents"] == 1, (noise, answer)
    assert "result" in s.call("editEngine/infill", infill("file:///a.py"))
    assert s.stop() == 0
    log = s.log_text()
    assert "broken message framing" in log and "Traceback" not in log


# ---------------------------------------------------------------------------------------------- lifecycle
def test_requests_before_initialize_and_exit_without_shutdown(server: RawServer, tiny_checkpoint: Path) -> None:
    """LSP: a request before ``initialize`` is answered -32002 and a notification dropped; a change to a
    document that is not open is ignored (no error, no message to the user); ``exit`` without ``shutdown``
    ends the process with 1."""
    s = server
    early = s.call("textDocument/inlineCompletion", {"textDocument": {"uri": "file:///a.py"}, "position": AT,
                                                     "context": {"triggerKind": 1}})
    assert early["error"]["code"] == -32002, early
    s.open("file:///a.py", DOC)  # dropped: not initialized yet
    s.initialize({"modelPath": str(tiny_checkpoint)})
    assert s.call("editEngine/status")["result"]["documents"] == 0
    s.notify("textDocument/didChange", change("file:///never-opened.py", 2, (0, 0), (0, 0), "x"))
    assert s.call("initialize", {"processId": None, "rootUri": None, "capabilities": {}})["error"]["code"] == \
        protocol.INVALID_REQUEST
    assert "result" in s.call("editEngine/status")  # handled after the change: anything it caused came before
    assert not [n for n in s.notifications if n["method"] == "window/showMessage"], s.notifications
    s.notify("exit")
    assert s.wait() == 1
    assert "didChange for file:///never-opened.py, which is not open" in s.log_text()
    assert "Traceback" not in s.log_text()


def test_requests_after_shutdown_are_refused_and_exit_is_0(server: RawServer, tiny_checkpoint: Path) -> None:
    s = server
    s.initialize({"modelPath": str(tiny_checkpoint)})
    assert "result" in s.call("shutdown")
    assert s.call("editEngine/status")["error"]["code"] == protocol.INVALID_REQUEST
    s.notify("exit")
    assert s.wait() == 0


# ---------------------------------------------------------------------------------------------- logging
def test_stderr_stays_quiet_through_cancelled_requests_and_an_abrupt_close(slow_checkpoint: Path) -> None:
    """Editors show every stderr line as an error: by default the server writes only warnings and errors there.
    A superseded request (-32800), a request for a document that changed (-32801), a cancel for a request already
    answered, and a client that closes both pipes in the middle of a request leave no line on stderr at all."""
    s = RawServer()
    try:
        s.initialize({"modelPath": str(slow_checkpoint), "streamPasses": True, "threshold": 2.0, "maxTokens": 256,
                      "memory": False})
        s.open("file:///a.py", DOC)
        first = s.request("editEngine/infill", infill("file:///a.py", max_tokens=256))
        s.passes(first)
        second = s.request("editEngine/infill", infill("file:///a.py", max_tokens=256))
        assert s.response(first)["error"]["code"] == protocol.REQUEST_CANCELLED
        s.passes(second)
        s.notify("textDocument/didChange", change("file:///a.py", 2, (0, 0), (0, 0), "# edited\n"))
        assert s.response(second)["error"]["code"] == protocol.CONTENT_MODIFIED
        s.notify("$/cancelRequest", {"id": second})
        third = s.request("editEngine/infill", infill("file:///a.py", {"line": 5, "character": 11}, 256))
        s.passes(third)
        assert s.proc.stdin is not None and s.proc.stdout is not None
        s.proc.stdout.close()  # what an editor that quits does: both pipes close, a request still running
        s.proc.stdin.close()
        s.wait()
    finally:
        s.kill()
    assert s.stderr == [], "".join(s.stderr)


def test_tcp_serves_one_client_with_the_same_framing(tiny_checkpoint: Path) -> None:
    """``--tcp``: the same message loop as stdio (framing recovery, exit codes) on a socket."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    s = RawServer("--tcp", str(port), "--log-level", "INFO")
    try:
        s.log_line("listening on")
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as conn, conn.makefile("rb") as out:

            def read() -> dict[str, Any]:
                length = None
                while (line := out.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                assert length is not None, "the server closed the connection"
                return json.loads(out.read(length))  # type: ignore[no-any-return]

            init = {"processId": None, "rootUri": None, "capabilities": {},
                    "initializationOptions": {"modelPath": str(tiny_checkpoint)}}
            # A header whose body never comes, then initialize: the first is answered -32700, the second as usual.
            conn.sendall(b"Content-Length: 500\r\n\r\n" +
                         frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}))
            assert read()["error"]["code"] == protocol.PARSE_ERROR
            assert "capabilities" in read()["result"]
            conn.sendall(frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
            assert read()["id"] == 2
            conn.sendall(frame({"jsonrpc": "2.0", "method": "exit"}))
        assert s.wait() == 0
    finally:
        s.kill()
    assert "broken message framing" in s.log_text() and "Traceback" not in s.log_text()


def test_the_stdio_flag_clients_add_is_taken() -> None:
    """vscode-languageclient starts a stdio server with ``--stdio`` appended: the server must take it (it is
    the default) and refuse it beside ``--tcp``."""
    import subprocess
    import sys

    ok = subprocess.run([sys.executable, "-m", "edit_engine.cli", "lsp", "--stdio", "--help"], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0 and "--stdio" in ok.stdout
    both = subprocess.run([sys.executable, "-m", "edit_engine.cli", "lsp", "--stdio", "--tcp", "1"],
                          capture_output=True, text=True, timeout=60)
    assert both.returncode == 2 and "not allowed with" in both.stderr
