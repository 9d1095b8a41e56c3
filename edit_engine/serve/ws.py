"""The websocket front end: JSON-RPC 2.0 on ``/v1/stream``, the same methods as the language server.

One ``Connection`` per socket. Each ``editEngine/infill`` request becomes a task that forwards the job's passes
as ``editEngine/pass`` notifications and ends with the response (or an error); an ``editEngine/apply`` request
becomes a task that merges in a worker thread and answers once, and so does an ``editEngine/nextEdit`` request
(the engine's next edit, in a worker thread; a newer one for the same ``uri`` supersedes it). An infill request
may carry ``related`` files (searched for a copy of the fill); its final pass and its response say who wrote the
fill (``source``: model, copy or none; ``reason`` for none). Several requests may be in flight;
``$/cancelRequest``, a newer request for the same ``uri`` and closing the socket cancel them (answered with
-32800 while the socket is open). A bad frame gets a JSON-RPC error and the connection stays usable.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ValidationError

from edit_engine import protocol as rpc
from edit_engine.serve.batching import Cancelled, Job
from edit_engine.serve.errors import ServeError, rpc_error_message
from edit_engine.serve.protocol import (
    ApplyParams,
    CancelParams,
    InfillParams,
    NextEditParams,
    RpcMessage,
    apply_result,
    fill_source,
    next_edit_result,
)
from edit_engine.serve.serving import Planned, Service
from edit_engine.syntax import positions

_P = TypeVar("_P", bound=BaseModel)


@dataclass(eq=False)
class _Request:
    id: int | str
    uri: str | None
    job: Job | None = None
    cancel_reason: str | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)


def authorized(header: str | None, api_key: str | None) -> bool:
    """``Authorization: Bearer KEY`` matches (constant-time), or no key is configured."""
    if not api_key:
        return True
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].encode(), api_key.encode())


def _validation_message(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:5]:
        loc = ".".join(str(x) for x in err["loc"]) or "params"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


class Connection:
    def __init__(self, ws: WebSocket, service: Service) -> None:
        self.ws = ws
        self.service = service
        self.metrics = service.metrics
        self.settings = service.settings
        self.inflight: dict[int | str, _Request] = {}
        self.by_uri: dict[str, _Request] = {}
        self._send_lock = asyncio.Lock()
        self._open = True

    async def send(self, msg: dict[str, Any]) -> None:
        if not self._open:
            return
        data = json.dumps(msg, ensure_ascii=False)
        async with self._send_lock:
            try:
                await self.ws.send_text(data)
            except (WebSocketDisconnect, RuntimeError, OSError):
                self._open = False

    async def run(self) -> None:
        self.metrics.connections.inc()
        try:
            while True:
                msg = await self.ws.receive()
                if msg["type"] == "websocket.disconnect":
                    break
                frame = msg.get("text")
                if frame is None and msg.get("bytes") is not None:
                    frame = msg["bytes"]
                await self.on_frame(frame)
        except WebSocketDisconnect:
            pass
        finally:
            self._open = False
            self.metrics.connections.inc(-1)
            await self._cancel_all("disconnect")

    async def _cancel_all(self, reason: str) -> None:
        reqs = list(self.inflight.values())
        for r in reqs:
            self.cancel(r, reason)
        tasks = [r.task for r in reqs if r.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def cancel(self, r: _Request, reason: str) -> None:
        if r.cancel_reason is not None:
            return
        r.cancel_reason = reason
        self.metrics.cancellations.inc(reason=reason)
        if r.job is not None:
            r.job.cancel(reason)

    # ------------------------------------------------------------------ one frame
    async def on_frame(self, frame: str | bytes | None) -> None:
        if frame is None:
            return
        if len(frame) > self.settings.max_request_bytes:
            await self.send(rpc_error_message(None, ServeError(
                "too_large", f"frame of {len(frame):,} bytes exceeds the limit of "
                f"{self.settings.max_request_bytes:,}", limit="max_request_bytes")))
            return
        try:
            data = json.loads(frame)
        except (ValueError, UnicodeDecodeError) as e:
            await self.send(rpc_error_message(None, ServeError("parse", f"not valid JSON: {e}")))
            return
        except RecursionError:
            await self.send(rpc_error_message(None, ServeError("parse", "JSON nested too deeply")))
            return
        if isinstance(data, list):
            await self.send(rpc_error_message(None, ServeError("invalid_request", "batch requests are not supported")))
            return
        raw_id = data.get("id") if isinstance(data, dict) else None
        reply_id = raw_id if isinstance(raw_id, (int, str)) and not isinstance(raw_id, bool) else None
        try:
            m = RpcMessage.model_validate(data)
        except ValidationError as e:
            await self.send(rpc_error_message(reply_id, ServeError(
                "invalid_request", f"not a JSON-RPC 2.0 message: {_validation_message(e)}")))
            return
        if m.method is None:
            if m.result is None and m.error is None:
                await self.send(rpc_error_message(reply_id, ServeError("invalid_request", "no method")))
            return  # a response from the client: we send no requests, so nothing waits for it
        if m.method == rpc.INFILL:
            if m.id is None:
                return  # a notification cannot be answered
            await self.on_infill(m.id, m.params)
        elif m.method == rpc.APPLY:
            if m.id is None:
                return
            await self.on_apply(m.id, m.params)
        elif m.method == rpc.NEXT_EDIT:
            if m.id is None:
                return
            await self.on_next_edit(m.id, m.params)
        elif m.method == rpc.CANCEL:
            try:
                c = CancelParams.model_validate(m.params or {})
            except ValidationError:
                return  # a notification: nothing to answer
            r = self.inflight.get(c.id)
            if r is not None:
                self.cancel(r, "client")
        elif m.method == rpc.ACCEPTED:
            return
        elif m.id is not None:
            await self.send(rpc_error_message(m.id, ServeError("method_not_found", f"unknown method {m.method!r}")))

    def _admitted(self, rid: int | str, params: Any, model: type[_P]) -> _P:
        """What every request must pass before it is taken: its id not in flight, room on this connection, and
        ``params`` an object valid for ``model`` (raises ServeError)."""
        if rid in self.inflight:
            raise ServeError("invalid_request", f"request id {rid!r} is in flight")
        if len(self.inflight) >= self.settings.max_inflight_per_connection:
            raise ServeError("overloaded", f"{len(self.inflight)} requests in flight on this connection "
                             f"(limit {self.settings.max_inflight_per_connection})",
                             limit="max_inflight_per_connection", retry_after=self.settings.retry_after_s)
        if not isinstance(params, dict):
            raise ServeError("invalid_params", "params must be an object")
        try:
            return model.model_validate(params)
        except ValidationError as e:
            raise ServeError("invalid_params", _validation_message(e)) from e

    def _track(self, rid: int | str, uri: str | None, run: Callable[[_Request], Coroutine[Any, Any, None]]) -> None:
        """Start a taken request as a task; a newer request for the same ``uri`` supersedes the older one."""
        r = _Request(rid, uri)
        self.inflight[rid] = r
        if uri is not None:
            old = self.by_uri.get(uri)
            if old is not None:
                self.cancel(old, "superseded")
            self.by_uri[uri] = r
        r.task = asyncio.create_task(run(r))

    async def on_infill(self, rid: int | str, params: Any) -> None:
        try:
            p = self._admitted(rid, params, InfillParams)
            # Planning converts positions over the whole document: off the event loop for a large one.
            planned = await asyncio.to_thread(self.service.plan_infill, p) if p.text is not None and \
                len(p.text) > OFF_LOOP_CHARS else self.service.plan_infill(p)
        except ServeError as e:
            await self._reject(rid, e)
            return
        self._track(rid, p.uri, lambda r: self._serve(r, p, planned))

    async def on_apply(self, rid: int | str, params: Any) -> None:
        """``editEngine/apply``: checked here, merged in a worker thread (``Engine.apply`` parses both texts and
        may run the model), answered with ``{text, elapsedMs, placements}``."""
        try:
            p = self._admitted(rid, params, ApplyParams)
            self._check_sizes((("original", len(p.original)), ("update", len(p.update))))
        except ServeError as e:
            await self._reject(rid, e)
            return
        self._track(rid, None, lambda r: self._apply(r, p))

    async def _apply(self, r: _Request, p: ApplyParams) -> None:
        async def work() -> dict[str, Any]:
            res = await self.service.edit_work.run(
                lambda stop: self.service.engine.apply(p.original, p.update, p.languageId, should_stop=stop),
                lambda: r.cancel_reason is not None)
            return apply_result(res.text, res.elapsed_ms, [x.to_json() for x in res.placements])

        await self._answer_once(r, work)

    async def on_next_edit(self, rid: int | str, params: Any) -> None:
        """``editEngine/nextEdit``: checked here, run in a worker thread (``Engine.next_edit`` parses the document
        and the history and may run the model), answered with ``{edit: {range, text, uri?} | null, kind,
        elapsedMs, patterns}`` (``uri``: the edit is in that one of ``others``). A newer request for the same
        ``uri`` supersedes it (-32800), as ``$/cancelRequest`` does."""
        try:
            p = self._admitted(rid, params, NextEditParams)
            self._check_sizes((("text", len(p.text)), ("history", sum(map(len, p.history))),
                               ("related", sum(map(len, p.related or []))),
                               *((f"others[{k!r}]", len(v)) for k, v in (p.others or {}).items())))
            if p.offset is None and p.position is None:
                raise ServeError("invalid_params", "a next-edit request needs position or offset")
        except ServeError as e:
            await self._reject(rid, e)
            return
        self._track(rid, p.uri, lambda r: self._next_edit(r, p))

    async def _next_edit(self, r: _Request, p: NextEditParams) -> None:
        await self._answer_once(r, lambda: self.service.edit_work.run(
            lambda stop: _run_next_edit(self.service, p, stop), lambda: r.cancel_reason is not None))

    # ------------------------------------------------------------------ answers
    def _count(self, e: ServeError) -> None:
        outcome = {"overloaded": "overloaded", "too_large": "overloaded", "cancelled": "cancelled"}.get(e.kind, "error")
        self.metrics.requests.inc(route="ws", outcome=outcome)

    async def _reject(self, rid: int | str, e: ServeError) -> None:
        """Answer a request with the error ``e`` (counted by its kind)."""
        self._count(e)
        await self.send(rpc_error_message(rid, e))

    def _check_sizes(self, sizes: Iterable[tuple[str, int]]) -> None:
        """Raise ``too_large`` for the first named part of a request (its size in characters) over the document
        limit."""
        limit = self.settings.max_document_chars
        for what, size in sizes:
            if size > limit:
                raise ServeError("too_large", f"{what} of {size:,} characters exceeds the limit of {limit:,}",
                                 limit="max_document_chars")

    async def _end_early(self, r: _Request, e: Exception) -> None:
        """Answer a request that stopped with ``e``: cancelled (by the client, a newer request or the socket), or
        failed (answered as an internal error; the connection stays usable)."""
        if isinstance(e, Cancelled):
            self.metrics.requests.inc(route="ws", outcome="cancelled")
            await self.send(rpc_error_message(r.id, ServeError("cancelled", f"request cancelled ({e.reason})")))
        else:
            self.metrics.requests.inc(route="ws", outcome="error")
            await self.send(rpc_error_message(r.id, ServeError("internal", f"{type(e).__name__}: {e}")))

    def _forget(self, r: _Request) -> None:
        """Drop a finished request from those in flight (and from its ``uri``'s, unless a newer one took it)."""
        self.inflight.pop(r.id, None)
        if r.uri is not None and self.by_uri.get(r.uri) is r:
            del self.by_uri[r.uri]

    async def _answer_once(self, r: _Request, work: Callable[[], Awaitable[Any]]) -> None:
        """Answer a one-shot request with the result ``work`` computes, unless it was cancelled meanwhile. A
        ``ValueError`` from the work (an update that cannot be applied, a diff that does not parse, a cursor
        outside the text) is the caller's to fix: answered as invalid params."""
        try:
            result = await work()
            if r.cancel_reason is not None:
                raise Cancelled(r.cancel_reason)
            self.metrics.requests.inc(route="ws", outcome="ok")
            await self.send({"jsonrpc": "2.0", "id": r.id, "result": result})
        except ValueError as e:
            await self._reject(r.id, ServeError("invalid_params", str(e)))
        except ServeError as e:  # overloaded, or stopped because it was cancelled
            await (self._end_early(r, Cancelled(r.cancel_reason)) if r.cancel_reason is not None
                   else self._reject(r.id, e))
        except Exception as e:  # cancelled, or the work failed
            await self._end_early(r, e)
        finally:
            self._forget(r)

    async def _serve(self, r: _Request, p: InfillParams, planned: Planned) -> None:
        t0 = time.perf_counter()
        finished = False
        try:
            try:
                job = await self.service.start(planned)
            except ServeError as e:
                await self._reject(r.id, e)
                return
            r.job = job
            if r.cancel_reason is not None:  # cancelled while it was being queued
                job.cancel(r.cancel_reason)
            last = None
            range_ = None
            async for ps in job.passes():
                last = ps
                if planned.range_of is not None:
                    range_ = planned.range_of(ps.start, ps.end)
                if p.stream:
                    params = rpc.pass_params(r.id, ps.index, ps.final, ps.text, ps.masked, uri=p.uri,
                                             version=p.version, range_=range_, preview=ps.preview)
                    if ps.final:
                        params.update(fill_source(ps.source, ps.reason))
                    await self.send({"jsonrpc": "2.0", "method": rpc.PASS, "params": params})
            assert last is not None and last.final
            finished = True
            self.metrics.requests.inc(route="ws", outcome="ok")
            result = rpc.infill_response(last.text, last.index + 1, last.nfe, (time.perf_counter() - t0) * 1e3,
                                         last.stop_reason, range_=range_, version=p.version)
            await self.send({"jsonrpc": "2.0", "id": r.id, "result": {**result,
                                                                      **fill_source(last.source, last.reason)}})
        except Exception as e:  # cancelled, or the job failed: answer it, keep the connection
            await self._end_early(r, e)
        finally:
            self._forget(r)
            if r.job is not None and not finished:  # stopped early (send failed, task cancelled): stop the work
                r.job.cancel(r.cancel_reason or "aborted")


def _run_next_edit(service: Service, p: NextEditParams, should_stop: Callable[[], bool]) -> dict[str, Any]:
    """A next-edit request run (in a worker thread): positions converted once, in the request's encoding."""
    doc, enc = p.text, p.positionEncoding
    starts = positions.line_starts(doc)
    if p.offset is not None:
        if p.offset > len(doc):
            raise ValueError(f"offset {p.offset} is past the end of the text ({len(doc)})")
        cursor = p.offset
    else:
        assert p.position is not None
        cursor = positions.position_to_offset(doc, p.position.line, p.position.character, enc, starts)
    region = None
    if p.range is not None:
        first, last = p.range.start.line, p.range.end.line
        if last < first:
            raise ValueError("range ends before it starts")
        last = last + 1 if p.range.end.character > 0 or last == first else last
        region = (min(first, len(starts) - 1), min(max(last, first + 1), len(starts)))
    t0 = time.perf_counter()
    ne = service.engine.next_edit(doc, cursor, p.history, p.languageId, p.related, region, should_stop=should_stop,
                                  others=p.others, others_first=p.othersFirst)
    elapsed = (time.perf_counter() - t0) * 1e3
    if ne is None:
        return next_edit_result(None, None, elapsed, version=p.version)
    where: dict[str, Any] = {}
    if ne.document is not None and p.others is not None:  # in another document: its positions, its uri
        doc, where = p.others[ne.document], {"uri": ne.document}
        starts = positions.line_starts(doc)
    edit = {"range": rpc.lsp_range(positions.offset_to_position(doc, ne.start, enc, starts),
                                   positions.offset_to_position(doc, ne.end, enc, starts)), "text": ne.text, **where}
    return next_edit_result(edit, ne.kind, ne.elapsed_ms, list(ne.patterns), p.version)


SUBPROTOCOL = "edit-engine"
KEY_PREFIX = "bearer."  # a subprotocol carrying the key: "bearer." + base64url(key), unpadded
OFF_LOOP_CHARS = 100_000  # document requests larger than this are planned in a worker thread


def subprotocol_key(offered: list[str]) -> str | None:
    """The API key a browser sends in its subprotocol list (browsers cannot set an Authorization header on a
    websocket): ``new WebSocket(url, ["edit-engine", "bearer." + base64url(key)])``."""
    for p in offered:
        if p.startswith(KEY_PREFIX):
            raw = p[len(KEY_PREFIX) :]
            try:
                return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                return None
    return None


async def websocket_endpoint(ws: WebSocket, service: Service) -> None:
    """The key comes in the ``Authorization`` header or, from a browser, in the subprotocol list; without it the
    handshake is refused (an HTTP 403) and nothing is read."""
    offered = list(ws.scope.get("subprotocols") or [])
    key = subprotocol_key(offered)
    header = ws.headers.get("authorization") or (f"Bearer {key}" if key is not None else None)
    if not authorized(header, service.settings.api_key):
        await ws.close(code=1008, reason="missing or wrong API key")  # before accept: an HTTP 403
        return
    await ws.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered or key is not None else None)
    await Connection(ws, service).run()
