"""The language server's byte stream: LSP framing that recovers from a broken message, and a writer that treats a
closed pipe as the end of the session.

pygls reads ``Content-Length`` bytes and trusts them: one message whose length is too large swallows the next
messages (the server waits for bytes that never come, the editor waits for answers), and one too small leaves
the rest of the body in front of every later header, so no message is read again. Here the stream is cut by
``Framer``, which resynchronises on the next ``Content-Length:`` header: a JSON body never holds a raw
``\\r\\n`` (JSON strings escape it), so ``Content-Length: N\\r\\n`` inside a body always starts the next message.

- A body whose declared length runs past the next header ends at that header (its bytes are handled as a
  message if they are JSON, else answered with a parse error), so the next message is read on time.
- Bytes that are not a header block (a body after a length that was too small, noise) are skipped up to the
  next header, with one warning.
- A length over ``MAX_MESSAGE_BYTES`` is skipped the same way.

stdin is read by a daemon thread (so a client that never closes it cannot keep the process alive after
``exit``); when the client closes the connection, in either direction, the session ends without a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from edit_engine.lsp.rpc import Protocol

log = logging.getLogger("lsp.transport")

MAX_MESSAGE_BYTES = 256 * 2**20  # a 5-million-character document escaped as \uXXXX is about 30 MiB
READ_CHUNK = 1 << 16
_HEADER_BYTES = 8192  # a header block longer than this is noise
_LENGTH = re.compile(rb"Content-Length:[ \t]*(\d+)[ \t]*(?=\r\n|\Z)", re.IGNORECASE)
_NEXT = re.compile(rb"Content-Length:[ \t]*\d+[ \t]*\r\n", re.IGNORECASE)  # a header that starts a message
_STARTED = re.compile(rb"content-length:[ \t]*(?:\d+[ \t]*\r?)?")  # a header still arriving (lower case)
_HEADER_LINES = re.compile(rb"(?:[!-9;-~]+:[^\r\n]*\r\n)*")


@dataclass(frozen=True)
class Frame:
    """One message body; ``problem`` says what was wrong with its framing (None: nothing)."""

    body: bytes
    problem: str | None = None


class Framer:
    """Cuts a byte stream into message bodies (``feed`` returns the ones completed), skipping what cannot be a
    message; ``skipped`` collects a line about each skip for the log."""

    def __init__(self, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.skipped: list[str] = []
        self._buf = bytearray()
        self._length: int | None = None  # the body length once its header block is read
        self._scanned = 0  # body bytes already searched for the next header

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        while True:
            if self._length is None:
                if not self._header():
                    return frames
            else:
                frame = self._body(self._length)
                if frame is None:
                    return frames
                frames.append(frame)

    def _skip(self, n: int, why: str) -> None:
        if n:
            self.skipped.append(f"skipped {n} bytes: {why}")
        del self._buf[:n]

    def _header(self) -> bool:
        """Read one header block; False when more bytes are needed."""
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > _HEADER_BYTES:  # noise: keep only what may be the start of the next header
                last = buf.rfind(b"Content-Length", len(buf) - _HEADER_BYTES)
                self._skip(last if last >= 0 else len(buf) - 16, "no LSP header")
            return False
        block = bytes(buf[:end])
        lengths = list(_LENGTH.finditer(block))
        if not lengths:
            self._skip(end + 4, "a header block without Content-Length")
            return True
        m = lengths[-1]
        noise = 0 if _HEADER_LINES.fullmatch(block, 0, m.start()) else m.start()
        self._skip(noise, "not an LSP header")
        digits = m.group(1)
        n = int(digits) if len(digits) < 16 else self.max_bytes + 1  # (int() refuses thousands of digits)
        del buf[:end + 4 - noise]
        if n > self.max_bytes:
            self.skipped.append(f"skipped a message of {n:,} bytes: over the limit of {self.max_bytes:,}")
        else:
            self._length, self._scanned = n, 0
        return True

    def _body(self, n: int) -> Frame | None:
        """The body of ``n`` bytes, or what comes before the next header if that starts sooner."""
        buf = self._buf
        m = _NEXT.search(buf, self._scanned, min(len(buf), n + 64))
        if m is not None and m.start() < n:
            body = bytes(buf[:m.start()])
            del buf[:m.start()]
            self._length = None
            return Frame(body, f"Content-Length {n:,} but the next message starts after {len(body):,} bytes")
        if len(buf) < n or _partial_header(buf, n):  # wait: the body, or what may be the next header, is coming
            self._scanned = max(0, min(len(buf), n) - 64)
            return None
        body = bytes(buf[:n])
        del buf[:n]
        self._length = None
        return Frame(body)


def _partial_header(buf: bytearray, n: int) -> bool:
    """Whether the bytes from somewhere before ``n`` to the end of ``buf`` are the start of a header (the rest not
    read yet). A JSON body cannot end that way, so a body of the declared length never waits here."""
    for p in range(max(0, n - 40), n):
        if buf[p] in b"Cc":
            tail = bytes(buf[p:]).lower()
            if b"content-length:".startswith(tail) or _STARTED.fullmatch(tail):
                return True
    return False


class PipeWriter:
    """pygls' writer for a pipe: a write to a closed pipe ends the session instead of raising."""

    def __init__(self, stream: BinaryIO, on_lost: Callable[[], None]) -> None:
        self.stream = stream
        self.lost = False
        self._on_lost = on_lost

    def write(self, data: bytes) -> None:
        if self.lost:
            return
        try:
            self.stream.write(data)
            self.stream.flush()
        except (OSError, ValueError) as e:  # BrokenPipeError, ConnectionResetError; ValueError: closed file
            self.lost = True
            log.info("the client closed the connection (%s)", type(e).__name__)
            try:  # what is left in the buffer must not fail again when the interpreter flushes it at exit
                os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
            except (OSError, ValueError):
                pass
            self._on_lost()

    def close(self) -> None:
        try:
            self.stream.close()
        except (OSError, ValueError):
            pass


async def pump(protocol: Protocol, read: Callable[[], Awaitable[bytes]]) -> int:
    """Feed the protocol until ``exit`` or the end of the stream; returns the process exit code."""
    framer = Framer()
    while protocol.exit_code is None:
        data = await read()
        if not data:
            log.info("the client closed the connection")
            break
        for frame in framer.feed(data):
            _report(framer)
            if frame.problem:
                log.warning("broken message framing: %s", frame.problem)
            protocol.receive(frame.body)
            if protocol.exit_code is not None:
                break
        _report(framer)
    return protocol.exit_code or 0


def _report(framer: Framer) -> None:
    for line in framer.skipped:
        log.warning("broken message framing: %s", line)
    framer.skipped.clear()


def _reader(stream: BinaryIO) -> Callable[[int], bytes]:
    """A read of what is there (up to n bytes). On the file descriptor, not the buffered stream: a daemon thread
    blocked inside the buffered reader holds its lock, and the interpreter aborts when it needs that lock at
    exit."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return getattr(stream, "read1", stream.read)
    return lambda n: os.read(fd, n)


class _StdinReader:
    """Reads stdin on a daemon thread, a few chunks ahead of the event loop at most."""

    def __init__(self, stream: BinaryIO, loop: asyncio.AbstractEventLoop) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._slots = threading.Semaphore(4)
        self._read = _reader(stream)
        self._loop = loop
        threading.Thread(target=self._run, name="edit-engine-stdin", daemon=True).start()

    def _run(self) -> None:
        while True:
            self._slots.acquire()
            try:
                data = self._read(READ_CHUNK)
            except (OSError, ValueError):
                data = b""
            try:
                self._loop.call_soon_threadsafe(self.queue.put_nowait, data)
            except RuntimeError:  # the loop is closed
                return
            if not data:
                return

    async def read(self) -> bytes:
        data = await self.queue.get()
        self._slots.release()
        return data

    def end(self) -> None:
        """Make the next ``read`` return the end of the stream."""
        self.queue.put_nowait(b"")


def run_stdio(protocol: Protocol, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
    """Serve one client over stdin/stdout; returns the exit code."""

    async def main() -> int:
        reader = _StdinReader(stdin or sys.stdin.buffer, asyncio.get_running_loop())
        protocol.set_writer(PipeWriter(stdout or sys.stdout.buffer, reader.end))
        return await pump(protocol, reader.read)

    return asyncio.run(main())


def run_tcp(protocol: Protocol, host: str, port: int) -> int:
    """Serve the first client that connects to ``host:port``; returns the exit code."""

    async def main() -> int:
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        connected = False

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connected
            if connected:  # one client per server, as over stdio
                writer.close()
                return
            connected = True
            protocol.set_writer(_SocketWriter(writer))
            code = await pump(protocol, lambda: _read_socket(reader))
            if not done.done():
                done.set_result(code)

        server = await asyncio.start_server(connection, host, port)
        log.info("listening on %s", ", ".join(str(s.getsockname()) for s in server.sockets))
        async with server:
            return await done

    return asyncio.run(main())


async def _read_socket(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.read(READ_CHUNK)
    except OSError:
        return b""


class _SocketWriter:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    def write(self, data: bytes) -> None:
        if not self._writer.is_closing():
            self._writer.write(data)

    def close(self) -> Any:
        self._writer.close()
