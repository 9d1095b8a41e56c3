"""What stands between a socket and the app: ``Guard`` (an ASGI middleware) and ``GuardedH11`` (uvicorn's HTTP
protocol with a deadline for the request head).

``Guard`` answers from the request head alone, before any body is read, in this order:

1. **Host and Origin** (only when no API key is set: a keyless server trusts whoever reaches it, so it must make
   sure that is a local program and not a web page). The ``Host`` header must name this machine (``localhost``,
   a loopback address, the bound address, or ``--allowed-hosts``): a page on another site that re-points its
   own name at 127.0.0.1 (DNS rebinding) sends its own name and is refused. A browser's ``Origin``, when sent,
   must be this server's own (the playground) or one of ``--allowed-origins``.
2. **The API key**, when one is set, on every path but the public ones (``PUBLIC_PATHS``: ``/healthz``, the
   playground page and its assets; the websocket checks its key itself, as browsers cannot send the header there).
3. **Connections**: at most ``max_connections`` HTTP requests and websockets at once; beyond that a 503 with
   ``Retry-After``.
4. **The body**: a POST must declare its length and stay within ``limit`` bytes; the bytes that arrive are
   counted too, and the whole body must arrive within ``body_timeout_s`` (a client that trickles it is cut off
   with a 408).

``GuardedH11`` (``head_deadline``, shared with Ray Serve's proxy) closes a connection whose request head has not
fully arrived ``header_timeout_s`` after the connection opened (or after its previous response): a client that
sends a header a byte at a time (slowloris) holds a socket for that long at most.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edit_engine.serve import playground
from edit_engine.serve.errors import ServeError
from edit_engine.serve.head_deadline import GuardedH11
from edit_engine.serve.ws import authorized

PUBLIC_PATHS = frozenset({"/healthz"}) | playground.PUBLIC_PATHS  # answered without the API key
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def error_response(e: ServeError) -> JSONResponse:
    return JSONResponse(e.http_body(), status_code=e.http_status, headers=e.http_headers())


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS


def _host_name(value: str) -> str:
    """The name in a ``Host`` header or an origin's netloc, without its port; IPv6 brackets removed."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _is_local_name(name: str) -> bool:
    if name in LOCAL_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class Guard:
    """The checks above, for every HTTP request and websocket handshake."""

    def __init__(self, app: ASGIApp, limit: int, api_key: str | None = None, bind_host: str = "127.0.0.1",
                 allowed_hosts: str = "", allowed_origins: str = "", max_connections: int = 256,
                 body_timeout_s: float = 30.0) -> None:
        self.app, self.limit, self.api_key = app, limit, api_key
        names = {n.strip().lower() for n in allowed_hosts.split(",") if n.strip()}
        self.any_host = "*" in names
        self.hosts = names | ({bind_host.lower()} if bind_host not in ("0.0.0.0", "::", "") else set())
        self.origins = {o.strip().lower().rstrip("/") for o in allowed_origins.split(",") if o.strip()}
        self.max_connections, self.body_timeout_s = max_connections, body_timeout_s
        self.active = 0  # HTTP requests and websockets being served (the event loop's thread only)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        err = self._refusal(scope, headers)
        if err is None and self.active >= self.max_connections:
            err = ServeError("overloaded", f"{self.active} requests and streams are open (limit "
                             f"{self.max_connections})", limit="max_connections", retry_after=1)
        if err is not None:
            if scope["type"] == "websocket":  # refused before the handshake: the client sees an HTTP 403
                await send({"type": "websocket.close", "code": 1008, "reason": err.message[:120]})
            else:
                await error_response(err)(scope, receive, send)
            return
        self.active += 1
        try:
            if scope["type"] == "websocket":
                await self.app(scope, receive, send)
            else:
                await self._http(scope, receive, send)
        finally:
            self.active -= 1

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app with the body counted and timed. A body over the limit or past its deadline is answered
        here (413 / 408); the app is then told the client left, and whatever it still sends is dropped."""
        received, body_done = 0, scope["method"] not in ("POST", "PUT", "PATCH")
        started = answered = False
        deadline = time.monotonic() + self.body_timeout_s

        async def counted() -> Message:
            nonlocal received, body_done, answered
            if body_done or answered:
                return await receive() if not answered else {"type": "http.disconnect"}
            err = None
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                message = {"type": "http.disconnect"}
                err = ServeError("timeout", f"the request body did not arrive within {self.body_timeout_s:g} s",
                                 limit="body_timeout_s")
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > self.limit:
                    err = self._too_large(f"over {self.limit:,}")
            if err is not None:
                if not started:
                    await error_response(err)(scope, receive, send)
                answered = True
                return {"type": "http.disconnect"}
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if answered:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, counted, watched)

    # ------------------------------------------------------------------ the head alone
    def _refusal(self, scope: Scope, headers: dict[bytes, bytes]) -> ServeError | None:
        """The error that answers this request before its body is read, or None."""
        if not self.api_key:
            err = self._foreign(headers)
            if err is not None:
                return err
        elif not is_public(scope["path"]) and scope["type"] == "http" and not authorized(
                headers.get(b"authorization", b"").decode("latin-1") or None, self.api_key):
            return ServeError("unauthorized", "missing or wrong API key (send 'Authorization: Bearer KEY')")
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return None
        length = headers.get(b"content-length")
        if length is None:
            return ServeError("length_required", "send Content-Length (chunked bodies are not accepted)")
        if not length.isdigit() or int(length) > self.limit:
            return self._too_large(length.decode(errors="replace"))
        return None

    def _foreign(self, headers: dict[bytes, bytes]) -> ServeError | None:
        """A keyless server answers local programs only: the Host must be this machine, a browser's Origin
        this server (or an allowed one)."""
        host = headers.get(b"host", b"").decode("latin-1")
        name = _host_name(host)
        if not (self.any_host or _is_local_name(name) or name in self.hosts):
            return ServeError("forbidden", f"Host {host!r} is not this server (a keyless server answers "
                              "localhost only; see --allowed-hosts)")
        origin = headers.get(b"origin", b"").decode("latin-1").strip().lower().rstrip("/")
        if origin and urlsplit(origin).netloc != host.lower() and origin not in self.origins:
            return ServeError("forbidden", f"Origin {origin!r} may not use this server (see --allowed-origins)")
        return None

    def _too_large(self, size: str) -> ServeError:
        return ServeError("too_large", f"request body of {size} bytes exceeds the limit of {self.limit:,}",
                          limit="max_request_bytes")


def guarded_h11(header_timeout_s: float) -> type[GuardedH11]:
    """A ``GuardedH11`` with this deadline (uvicorn takes a protocol class)."""
    return type("GuardedH11", (GuardedH11,), {"header_timeout_s": header_timeout_s})
