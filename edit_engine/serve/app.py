"""``create_app(settings)``: the FastAPI app, its lifespan (load the model, start the scheduler), the one error
handler, the guard in front of it (``guard.py``); and ``BackgroundServer``, which runs it under uvicorn in a thread (tests,
scripts)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from edit_engine.engine import Engine
from edit_engine.serve import playground
from edit_engine.serve.errors import ServeError
from edit_engine.serve.guard import Guard, error_response, guarded_h11
from edit_engine.serve.metrics import Metrics
from edit_engine.serve.routes import protected, public
from edit_engine.serve.serving import Service
from edit_engine.serve.settings import Settings

log = logging.getLogger("edit_engine.serve")

def create_app(settings: Settings, engine: Engine | None = None,
               before_pass: Callable[[], None] | None = None) -> FastAPI:
    """The server. ``engine``: use this one instead of loading ``settings.model``; ``before_pass``: a hook the
    scheduler calls before every forward pass (instrumentation, tests)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        edit = False if settings.edit_model == "none" else settings.edit_model
        eng = engine or Engine.load(settings.model, device=settings.device, threads=settings.threads or None,
                                    dtype=settings.dtype or None, edit_model=edit)
        if engine is None:  # a server we loaded: warm it before the socket opens, so no user waits for it
            if settings.compile:
                try:
                    log.info("compiled the per-pass step in %.0f s", eng.compile())
                except RuntimeError as e:
                    log.warning("%s", e)
            log.info("warm-up took %.0f ms", eng.warm_up())
        service = Service(settings, eng, Metrics(), before_pass)
        app.state.service = service
        try:
            yield
        finally:
            service.close()

    app = FastAPI(title="edit-engine", version="0.1.0", lifespan=lifespan)

    @app.exception_handler(ServeError)
    async def on_serve_error(request: Request, e: ServeError) -> JSONResponse:
        return error_response(e)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, e: StarletteHTTPException) -> JSONResponse:
        """Routing errors (no such path, wrong method) in the API's error shape, not the framework's."""
        kind = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code)
        if kind is None:
            err = ServeError("invalid_request", str(e.detail))
            return JSONResponse(err.http_body(), status_code=e.status_code, headers=e.headers)
        return error_response(ServeError(kind, f"{request.method} {request.url.path}: {e.detail}"))

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        parts = [f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors()[:5]]
        return error_response(ServeError("invalid_params", "; ".join(parts) or "invalid request"))

    app.include_router(public)
    app.include_router(protected)
    app.include_router(playground.router)
    app.openapi = _without_422(app.openapi)  # type: ignore[method-assign]
    app.add_middleware(Guard, limit=settings.max_request_bytes, api_key=settings.api_key, bind_host=settings.host,
                       allowed_hosts=settings.allowed_hosts, allowed_origins=settings.allowed_origins,
                       max_connections=settings.max_connections, body_timeout_s=settings.body_timeout_s)
    return app


def _without_422(openapi: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """FastAPI documents a 422 for every route with parameters; this server answers bad parameters with a 400
    in the OpenAI error shape (``ErrorBody``), so the 422 and its schemas are taken out of ``/openapi.json``."""
    def schema() -> dict[str, Any]:
        spec = openapi()
        for path in spec.get("paths", {}).values():
            for op in path.values():
                op.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            spec.get("components", {}).get("schemas", {}).pop(name, None)
        return spec

    return schema


SHUTDOWN_GRACE_S = 10  # on SIGTERM, requests still open after this long are cut off and the server exits


def uvicorn_config(app: FastAPI, settings: Settings, **kw: Any) -> Any:
    """uvicorn settings: frames up to 4x the request limit reach the handler (and get a JSON-RPC error);
    larger ones close the socket (1009) before they are buffered; a request head must arrive within
    ``header_timeout_s`` (``guard.GuardedH11``)."""
    import uvicorn

    return uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                          ws_max_size=4 * settings.max_request_bytes, lifespan="on",
                          timeout_graceful_shutdown=SHUTDOWN_GRACE_S, http=guarded_h11(settings.header_timeout_s),
                          **kw)


class BackgroundServer:
    """Run the app under uvicorn in a thread; ``with BackgroundServer(app, settings) as s: s.url``."""

    def __init__(self, app: FastAPI, settings: Settings, startup_timeout: float = 60.0) -> None:
        import uvicorn

        self.server = uvicorn.Server(uvicorn_config(app, settings, log_config=None))
        # uvicorn installs signal handlers only in the main thread, so none are touched here.
        self.host = settings.host
        self.timeout = startup_timeout
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)
        self.port = 0

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        deadline = time.monotonic() + self.timeout
        # uvicorn sets ``started`` once the socket is bound and the lifespan has run; the join doubles as the wait
        # and notices a server that failed to start.
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("uvicorn exited before it started (see the log)")
            if time.monotonic() > deadline:
                raise TimeoutError(f"uvicorn did not start within {self.timeout} s")
            self.thread.join(timeout=0.01)
        sock = self.server.servers[0].sockets[0]
        self.port = int(sock.getsockname()[1])
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}/v1/stream"

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
