"""The websocket ``/v1/stream`` in the ingress: one client socket, its JSON-RPC requests spread over the Engine
replicas by document.

Each request (a frame with a method and an id: ``editEngine/infill``, ``editEngine/apply``, ...) is forwarded on
its own, to the replica of its document (``params.uri``, else the socket's ``X-Session-Id``), and everything the
replica's app sends for it (pass notifications, then the answer) is relayed as it comes. What the single server
does per socket is done here with the same errors: at most ``--max-inflight-per-connection`` infill, apply and
next-edit requests in flight (-32001), a repeated id in flight (-32600), ``$/cancelRequest`` and (for infill and
next edits) a newer request for the same ``uri`` cancel a request (-32800 at once, and the cancel reaches its
replica), closing the socket cancels them all, and a frame over 4 x ``--max-request-bytes`` closes the socket
with 1009 (the single server's uvicorn does that before reading it; Ray's proxy reads frames up to its own limit,
which ``proxy`` lowers to the same size where it runs). Other frames (malformed ones, notifications) go to any
replica, whose app answers them as it would.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import WebSocket, WebSocketDisconnect

from edit_engine import protocol as rpc
from edit_engine.serve.errors import ServeError, rpc_error_message
from edit_engine.serve.ray_app import options
from edit_engine.serve.ray_app.forward import Forwarder, forwarded_scope
from edit_engine.serve.ray_app.replica import is_answer
from edit_engine.serve.settings import Settings
from edit_engine.serve.ws import SUBPROTOCOL, authorized, subprotocol_key


@dataclass(eq=False)
class _Forward:
    """One request relayed from a replica."""

    id: int | str | None  # None: a frame that gets at most an immediate answer
    frame: str
    key: str
    uri: str | None = None
    tracked: bool = False  # in ``Socket.inflight`` (cancellable by id)
    relayed: bool = False  # something of its answer reached the client
    answered: bool = False
    cancel_reason: str | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)


LIMITED = frozenset({rpc.INFILL, rpc.APPLY, rpc.NEXT_EDIT})  # requests the per-connection in-flight limit counts
SUPERSEDING = {rpc.INFILL: "infill", rpc.NEXT_EDIT: "next_edit"}  # limited; a newer one for their uri cancels them


def classify(frame: str, limit: int) -> tuple[str, Any, str | None]:
    """``("infill" | "next_edit" | "limited" | "request", id, uri)``, ``("cancel", target id, None)`` or
    ``("frame", None, uri)``. Frames are not validated here: the replica's app answers bad ones."""
    if len(frame) > limit:
        return "frame", None, None
    try:
        msg = json.loads(frame)
    except (ValueError, RecursionError):
        return "frame", None, None
    if not isinstance(msg, dict) or not isinstance(msg.get("method"), str):
        return "frame", None, None
    raw = msg.get("params")
    params: dict[str, Any] = raw if isinstance(raw, dict) else {}
    uri = params.get("uri") if isinstance(params.get("uri"), str) else None
    rid = msg.get("id")
    valid_id = isinstance(rid, (int, str)) and not isinstance(rid, bool)
    if msg["method"] == rpc.CANCEL:
        target = params.get("id")
        return ("cancel", target, None) if isinstance(target, (int, str)) and not isinstance(target, bool) \
            else ("frame", None, None)
    if not valid_id or "id" not in msg:
        return "frame", None, uri
    kind = SUPERSEDING.get(msg["method"]) or ("limited" if msg["method"] in LIMITED else "request")
    return kind, rid, uri


class Socket:
    """One client websocket (module doc)."""

    def __init__(self, ws: WebSocket, fwd: Forwarder, settings: Settings) -> None:
        self.ws, self.fwd, self.settings = ws, fwd, settings
        self.max_frame = options.ws_max_size(settings)
        self.scope = forwarded_scope(ws.scope)
        self.session = ws.headers.get("x-session-id")
        self.inflight: dict[int | str, _Forward] = {}
        self.by_uri: dict[str, _Forward] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._open = True

    async def serve(self) -> None:
        """The handshake (the key in the header or, from a browser, the subprotocol), then the frames."""
        offered = list(self.ws.scope.get("subprotocols") or [])
        key = subprotocol_key(offered)
        header = self.ws.headers.get("authorization") or (f"Bearer {key}" if key is not None else None)
        if not authorized(header, self.settings.api_key):
            await self.ws.close(code=1008, reason="missing or wrong API key")  # before accept: an HTTP 403
            return
        await self.ws.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered or key is not None else None)
        self.fwd.metrics.sockets.inc()
        try:
            while True:
                try:
                    msg = await self.ws.receive()
                except Exception:  # WebSocketDisconnect, or the proxy holding the client's socket stopped
                    break
                if msg["type"] == "websocket.disconnect":
                    break
                size = self.frame_size(msg)
                if size > self.max_frame:
                    await self.ws.close(code=1009, reason=f"frame of {size:,} bytes exceeds the limit of "
                                                          f"{self.max_frame:,}")
                    break
                frame = msg.get("text")
                if frame is None and msg.get("bytes") is not None:
                    frame = msg["bytes"].decode("utf-8", "replace")
                if frame is not None:
                    await self.on_frame(frame)
        finally:
            self._open = False
            self.fwd.metrics.sockets.inc(-1)
            for f in list(self.inflight.values()):
                self.cancel(f, "disconnect")
            for t in list(self.tasks):
                t.cancel()
            if self.tasks:
                await asyncio.gather(*self.tasks, return_exceptions=True)

    def frame_size(self, msg: Mapping[str, Any]) -> int:
        """A received frame's size in bytes (a text frame is encoded only when its characters might exceed the
        limit)."""
        if msg.get("bytes") is not None:
            return len(msg["bytes"])
        text = msg.get("text") or ""
        return len(text.encode("utf-8")) if 4 * len(text) > self.max_frame else len(text)

    async def send(self, text: str) -> None:
        if not self._open:
            return
        async with self._lock:
            try:
                await self.ws.send_text(text)
            except (WebSocketDisconnect, RuntimeError, OSError):
                self._open = False

    async def answer(self, f: _Forward, e: ServeError) -> None:
        if not f.answered:
            f.answered = True
            await self.send(json.dumps(rpc_error_message(f.id, e), ensure_ascii=False))

    # ------------------------------------------------------------------ frames
    async def on_frame(self, frame: str) -> None:
        kind, rid, uri = classify(frame, self.settings.max_request_bytes)
        if kind == "cancel":
            f = self.inflight.get(rid)
            if f is not None:
                self.cancel(f, "client")
            return
        superseding = kind in SUPERSEDING.values()
        f = _Forward(rid, frame, self.fwd.key(uri or self.session), uri if superseding else None)
        if superseding or kind == "limited":
            err = None
            if rid in self.inflight:
                err = ServeError("invalid_request", f"request id {rid!r} is in flight")
            elif len(self.inflight) >= self.settings.max_inflight_per_connection:
                err = ServeError("overloaded", f"{len(self.inflight)} requests in flight on this connection "
                                 f"(limit {self.settings.max_inflight_per_connection})",
                                 limit="max_inflight_per_connection", retry_after=self.settings.retry_after_s)
            if err is not None:
                await self.answer(f, err)
                return
        if f.uri is not None:  # a newer infill or next edit for a document supersedes the one in flight
            old = self.by_uri.get(f.uri)
            if old is not None:
                self.cancel(old, "superseded")
            self.by_uri[f.uri] = f
        if kind != "frame" and rid not in self.inflight:
            f.tracked = True
            self.inflight[rid] = f
        f.task = asyncio.create_task(self.relay(f))
        self.tasks.add(f.task)
        f.task.add_done_callback(self.tasks.discard)

    def cancel(self, f: _Forward, reason: str) -> None:
        """Answer -32800 at once (while the socket is open) and cancel the call on its replica."""
        if f.cancel_reason is not None or f.answered:
            return
        f.cancel_reason = reason
        self.fwd.metrics.cancellations.inc(reason=reason)
        if f.task is not None:
            f.task.cancel()

    async def relay(self, f: _Forward) -> None:
        self.fwd.metrics.forwarded.inc(route="ws")
        try:
            async for batch in self.fwd.stream("websocket", f.key, (self.scope, f.frame, f.id), lambda: f.relayed):
                if not isinstance(batch, list):  # RETRY: sent again; nothing had been relayed
                    continue
                for m in batch:
                    if m["type"] == "websocket.send" and not f.answered:
                        text = m.get("text") or ""
                        f.relayed = True
                        if f.id is not None and is_answer(text, f.id):
                            f.answered = True
                        await self.send(text)
                    elif m["type"] == "websocket.close" and f.id is not None:  # refused by the replica's app
                        await self.answer(f, ServeError("internal", f"the replica refused the request: "
                                                        f"{m.get('reason') or m.get('code')}"))
            if f.id is not None and not f.answered:
                await self.answer(f, ServeError("internal", "the replica ended the request without an answer"))
        except asyncio.CancelledError:
            if f.cancel_reason not in (None, "disconnect"):
                await self.answer(f, ServeError("cancelled", f"request cancelled ({f.cancel_reason})"))
        except ServeError as e:
            await self.answer(f, e)
        finally:
            if f.tracked and self.inflight.get(f.id) is f:  # type: ignore[arg-type]
                del self.inflight[f.id]  # type: ignore[arg-type]
            if f.uri is not None and self.by_uri.get(f.uri) is f:
                del self.by_uri[f.uri]
