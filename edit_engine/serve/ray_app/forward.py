"""How a request travels from the ingress to an Engine replica: ``Forwarder.stream`` (a call through the deployment
handle with the request's routing key, its retry and its errors), and the ASGI scope it carries.

Errors of its own, in the stock shapes (``errors.ServeError``: HTTP 503 + Retry-After in the OpenAI error
body, JSON-RPC -32001 with ``data.retryAfter``):

- every replica full and ``max_queued_requests`` waiting (Ray's ``BackPressureError``), or no replica took the
  request within ``--route-timeout-s``: overloaded, retry;
- the replica running a request stopped (its process died): the request is sent once more, to another
  replica, if nothing of its answer had reached the client (``started()`` is false); otherwise it ends with an
  overloaded error (retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

from ray.exceptions import NodeDiedError, ObjectLostError, RayActorError, RayTaskError, WorkerCrashedError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, ReplicaUnavailableError

from edit_engine.serve.errors import ServeError
from edit_engine.serve.ray_app import options
from edit_engine.serve.ray_app.router import document_key
from edit_engine.serve.ray_app.stats import IngressMetrics, gather, outside_request
from edit_engine.serve.settings import Settings

LOST = (RayActorError, WorkerCrashedError, NodeDiedError, ObjectLostError, ReplicaUnavailableError)
RETRY = object()  # yielded by ``Forwarder.stream`` when it sends the request again: drop what came before
SESSION_HEADER = "x-session-id"
SCOPE_KEYS = ("type", "asgi", "http_version", "method", "scheme", "path", "raw_path", "query_string", "client",
              "server", "subprotocols")


def forwarded_scope(scope: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of an ASGI scope a replica's app needs, as plain values (Ray pickles them)."""
    out = {k: scope[k] for k in SCOPE_KEYS if k in scope}
    root = scope.get("root_path") or ""
    if root and out.get("path", "").startswith(root):
        out["path"] = out["path"][len(root):] or "/"
    out["root_path"] = ""
    out["headers"] = [(bytes(k), bytes(v)) for k, v in scope.get("headers", [])]
    return out


class Forwarder:
    """The handle to the Engine replicas and how a request travels through it."""

    def __init__(self, handle: Any, settings: Settings, app_name: str) -> None:
        self.handle, self.settings, self.app_name = handle, settings, app_name
        self.metrics = IngressMetrics()

    def key(self, material: str | None) -> str:
        return document_key(material) if material and self.settings.affinity else ""

    def http_key(self, headers: Any, body: bytes) -> str:
        """An HTTP request's document: its ``X-Session-Id`` header, else the OpenAI ``user`` field."""
        session = headers.get(SESSION_HEADER)
        if not session and b'"user"' in body:
            try:
                data = json.loads(body)
            except (ValueError, RecursionError):
                data = None
            user = data.get("user") if isinstance(data, dict) else None
            session = user if isinstance(user, str) else None
        return self.key(session)

    def _overloaded(self, message: str, limit: str) -> ServeError:
        self.metrics.overloaded.inc(limit=limit)
        return ServeError("overloaded", message, limit=limit, retry_after=self.settings.retry_after_s)

    async def stream(self, method: str, key: str, args: tuple[Any, ...],
                     started: Callable[[], bool]) -> AsyncGenerator[Any, None]:
        """The batches of messages the replica sends for one call of ``method``; ``RETRY`` before the call is
        sent again (module doc). Raises ServeError. The replica's first batch (empty) says it took the call: only
        the wait for it is bounded by ``--route-timeout-s``. Leaving the iteration early cancels the call on the
        replica."""
        attempt = 0
        while True:
            call = getattr(self.handle.options(stream=True, multiplexed_model_id=key), method)
            gen, finished = None, False
            try:
                gen = outside_request(functools.partial(call.remote, *args))  # back-pressure may refuse it here
                first = True
                while True:
                    try:
                        nxt = gen.__anext__()
                        batch = await (asyncio.wait_for(nxt, self.settings.route_timeout_s) if first else nxt)
                    except StopAsyncIteration:
                        finished = True
                        return
                    first = False
                    yield batch
            except asyncio.TimeoutError as e:
                raise self._overloaded(f"no replica took the request within {self.settings.route_timeout_s:g} s; "
                                       "retry later", "route_timeout_s") from e
            except BackPressureError as e:
                raise self._overloaded(f"every replica is busy and the queue for them is full "
                                       f"({options.max_queued(self.settings)} waiting); retry later",
                                       "max_queued_requests") from e
            except DeploymentUnavailableError as e:
                raise self._overloaded(f"no replica is available ({e}); retry later", "replicas") from e
            except LOST as e:
                self.metrics.lost.inc()
                if attempt == 0 and not started():
                    attempt += 1
                    self.metrics.retries.inc()
                    yield RETRY
                    continue
                raise self._overloaded(f"the replica running this request stopped ({type(e).__name__}); retry",
                                       "replica") from e
            except RayTaskError as e:
                raise ServeError("internal", f"the replica failed: {type(e.cause).__name__}: {e.cause}") from e
            finally:
                if gen is not None and not finished:
                    with contextlib.suppress(Exception):  # a call that failed re-raises its error here
                        gen.cancel()

    async def replicas(self) -> list[dict[str, Any]]:
        return await gather(self.handle, self.app_name)
