"""The Ingress deployment: the app Ray's HTTP proxy hands every request to. It answers ``/healthz`` and
``/metrics`` over all replicas (``stats``) and forwards everything else to an Engine replica, where the stock app
answers it: HTTP requests whole (plain, SSE), websocket frames one JSON-RPC request at a time, so that each
request of a socket goes to its own document's replica.

How a request travels and the errors the ingress answers itself: ``forward``. A replica lost while an SSE
stream was being relayed ends the stream with an error event, then ``[DONE]``, as a request that fails in the
single server does.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from ray import serve

from edit_engine.serve.errors import ServeError
from edit_engine.serve.guard import Guard, error_response
from edit_engine.serve.ray_app.forward import RETRY, Forwarder, forwarded_scope
from edit_engine.serve.ray_app.options import ENGINE
from edit_engine.serve.ray_app.socket import Socket
from edit_engine.serve.ray_app.stats import healthz_body, metrics_text
from edit_engine.serve.settings import Settings


async def forward_http(request: Request, fwd: Forwarder) -> Response:
    """One HTTP request to a replica; the answer comes back whole (plain) or as it is made (a stream)."""
    body = await request.body()
    sent = False
    agen = fwd.stream("http", fwd.http_key(request.headers, body), (forwarded_scope(request.scope), body),
                      lambda: sent)
    fwd.metrics.forwarded.inc(route="http")
    start: dict[str, Any] | None = None
    chunks: list[bytes] = []
    more = True
    try:
        while start is None or (more and not chunks):  # the head and the first part of the body
            batch = await agen.__anext__()
            if batch is RETRY:
                start, chunks, more = None, [], True
                continue
            for m in batch:
                if m["type"] == "http.response.start":
                    start = m
                elif m["type"] == "http.response.body":
                    chunks.append(m.get("body", b""))
                    more = bool(m.get("more_body"))
    except StopAsyncIteration as e:
        raise ServeError("internal", "the replica ended the request without an answer") from e
    headers = [(bytes(k), bytes(v)) for k, v in start.get("headers", []) if bytes(k).lower() != b"content-length"]
    if not more:
        await agen.aclose()
        content = b"".join(chunks)
        response = Response(content, status_code=start["status"])
        response.raw_headers = [*headers, (b"content-length", str(len(content)).encode())]
        return response
    sent = True
    event_stream = any(k.lower() == b"content-type" and v.startswith(b"text/event-stream") for k, v in headers)
    response = StreamingResponse(_rest(agen, chunks, event_stream), status_code=start["status"])
    response.raw_headers = headers
    return response


async def _rest(agen: AsyncGenerator[Any, None], chunks: list[bytes], event_stream: bool) -> AsyncIterator[bytes]:
    """The rest of a streamed body; a replica lost mid-stream ends an event stream with an error event and
    ``[DONE]``, as a request that fails in the single server does. A client that leaves closes ``agen``, which
    cancels the request on its replica."""
    try:
        yield b"".join(chunks)
        async for batch in agen:
            for m in batch:
                if m["type"] == "http.response.body" and m.get("body"):
                    yield m["body"]
    except ServeError as e:
        if event_stream:
            yield f"data: {json.dumps(e.http_body(), ensure_ascii=False)}\n\ndata: [DONE]\n\n".encode()
    finally:
        await agen.aclose()


def ingress_app(settings: Settings) -> FastAPI:
    """The front app: ``Guard`` first (as in the single server), then the routes."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ctx = serve.get_replica_context()
        app.state.fwd = Forwarder(serve.get_deployment_handle(ENGINE, app_name=ctx.app_name), settings, ctx.app_name)
        yield

    app = FastAPI(title="edit-engine", version="0.1.0", lifespan=lifespan, openapi_url=None, docs_url=None,
                  redoc_url=None)  # the replicas' app documents the API: /openapi.json is forwarded

    @app.exception_handler(ServeError)
    async def on_serve_error(request: Request, e: ServeError) -> JSONResponse:
        return error_response(e)

    @app.get("/healthz")
    async def healthz(request: Request) -> JSONResponse:
        body = healthz_body(await request.app.state.fwd.replicas())
        return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        fwd: Forwarder = request.app.state.fwd
        return PlainTextResponse(metrics_text(fwd.metrics, await fwd.replicas()),
                                 media_type="text/plain; version=0.0.4")

    @app.websocket("/v1/stream")
    async def stream(ws: WebSocket) -> None:
        await Socket(ws, ws.app.state.fwd, settings).serve()

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
                   include_in_schema=False)
    async def forward(request: Request) -> Response:
        return await forward_http(request, request.app.state.fwd)

    app.add_middleware(Guard, limit=settings.max_request_bytes, api_key=settings.api_key, bind_host=settings.host,
                       allowed_hosts=settings.allowed_hosts, allowed_origins=settings.allowed_origins,
                       max_connections=settings.max_connections, body_timeout_s=settings.body_timeout_s)
    return app


__all__ = ["forward_http", "ingress_app"]
