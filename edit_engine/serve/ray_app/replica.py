"""The Engine deployment: one replica = the single-process server (``create_app``), driven through its ASGI
interface instead of a socket.

``http(scope, body)`` runs one HTTP request through the app; ``websocket(scope, frame, answer_id)`` opens a
websocket on the app, hands it one JSON-RPC frame and streams back what the app sends until the answer to
``answer_id`` (or, for a frame that gets no answer, until the app has handled it), then closes the socket.
Both yield lists of the ASGI messages the app sent, the first one empty as soon as the call starts (the caller
knows a replica took the request: ``--route-timeout-s`` bounds the wait for that, not the answer). The routes, the guard, the limits, the batched scheduler
and the engine's caches are the stock ones; nothing about requests is re-implemented here.

Cancellation: when the caller cancels the stream (a client's ``$/cancelRequest``, a superseded request, a
disconnect), Ray cancels this method's task; the app then sees its client disconnect and cancels the job
before its next forward pass, as it does for a socket that closes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from typing import Any

from edit_engine.serve.settings import Settings

Message = dict[str, Any]
_IDLE = object()  # the app asked for a message beyond those it was given: it has handled them
_END = object()  # the app returned
CLOSE_GRACE_S = 5.0  # a call the caller left gets this long to wind down before its task is cancelled
REPLICA_HEADER = "x-edit-engine-replica"


class AsgiCall:
    """One call of an ASGI app: ``inbound`` messages in order, then ``final`` once ``close()`` is called;
    ``batches()`` yields what the app sends (with ``_IDLE`` and ``_END`` markers) as it comes."""

    def __init__(self, app: Any, scope: Message, inbound: list[Message], final: Message) -> None:
        self.inbound = collections.deque(inbound)
        self.final = final
        self.out: asyncio.Queue[object] = asyncio.Queue()
        self.gone = asyncio.Event()
        self.task = asyncio.ensure_future(app(scope, self.receive, self.send))
        self.task.add_done_callback(lambda _: self.out.put_nowait(_END))

    async def receive(self) -> Message:
        if self.inbound:
            return self.inbound.popleft()
        self.out.put_nowait(_IDLE)
        await self.gone.wait()
        return self.final

    async def send(self, message: Message) -> None:
        if self.gone.is_set():
            raise OSError("the caller went away")
        self.out.put_nowait(message)

    async def batches(self) -> AsyncIterator[list[object]]:
        while True:
            batch = [await self.out.get()]
            while not self.out.empty():
                batch.append(self.out.get_nowait())
            yield batch
            if _END in batch:
                return

    async def close(self) -> None:
        """The caller is done (or gone): the app reads ``final``; a call still running after
        ``CLOSE_GRACE_S`` is cancelled."""
        self.gone.set()
        if not self.task.done():
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self.task), CLOSE_GRACE_S)
        if not self.task.done():
            self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task


def is_answer(text: str, answer_id: int | str) -> bool:
    """Whether a frame the app sent answers request ``answer_id`` (or is an error sent before any id was read)."""
    if '"result"' not in text and '"error"' not in text:
        return False
    try:
        msg = json.loads(text)
    except ValueError:
        return False
    if not isinstance(msg, dict) or "method" in msg or ("result" not in msg and "error" not in msg):
        return False
    return bool(msg.get("id") == answer_id or (msg.get("id") is None and "error" in msg))


class EngineReplica:
    """The deployment class (``serve.deployment(EngineReplica)`` in ``launch.application``). ``before_pass``:
    ``create_app``'s hook, called before every forward pass (instrumentation, tests)."""

    async def __init__(self, settings: Settings,  # type: ignore[misc]  # Ray awaits it
                       before_pass: Callable[[], None] | None = None) -> None:
        from ray import serve

        from edit_engine.serve.app import create_app

        self.settings = settings
        self.app = create_app(settings, before_pass=before_pass)
        # The app's lifespan loads and warms the model and starts the scheduler; it is kept (a lifespan that is
        # garbage-collected runs its exit, which closes the service).
        self._lifespan: Any = self.app.router.lifespan_context(self.app)
        await self._lifespan.__aenter__()
        self.replica_id = serve.get_replica_context().replica_id.unique_id
        self.calls = 0

    def __del__(self) -> None:
        """Ray's graceful stop (after the replica's requests finished, or the grace period): what the app's
        lifespan does on exit, closing the service; its scheduler cancels what is left ("shutdown")."""
        service = getattr(getattr(getattr(self, "app", None), "state", None), "service", None)
        if service is not None:
            service.close()

    def check_health(self) -> None:
        """Ray's periodic health check: a replica whose scheduler thread died is replaced."""
        thread = getattr(self.app.state.service.scheduler, "_thread", None)
        if thread is not None and not thread.is_alive():
            raise RuntimeError("the scheduler thread is not running")

    async def http(self, scope: Message, body: bytes) -> AsyncIterator[list[Message]]:
        """One HTTP request through the app; the response start carries this replica's id."""
        self.calls += 1
        yield []  # taken
        call = AsgiCall(self.app, scope, [{"type": "http.request", "body": body, "more_body": False}],
                        {"type": "http.disconnect"})
        try:
            async for batch in call.batches():
                msgs = [m for m in batch if isinstance(m, dict)]
                for m in msgs:
                    if m["type"] == "http.response.start":
                        m["headers"] = [*m.get("headers", []), (REPLICA_HEADER.encode(), self.replica_id.encode())]
                if msgs:
                    yield msgs
                if any(m["type"] == "http.response.body" and not m.get("more_body") for m in msgs):
                    return
        finally:
            await call.close()

    async def websocket(self, scope: Message, frame: str, answer_id: int | str | None) -> AsyncIterator[list[Message]]:
        """One JSON-RPC frame through the app's websocket endpoint (module doc). ``answer_id``: the request id
        whose answer ends the call; None for a frame that gets at most an immediate answer."""
        self.calls += 1
        yield []  # taken
        call = AsgiCall(self.app, scope, [{"type": "websocket.connect"}, {"type": "websocket.receive", "text": frame}],
                        {"type": "websocket.disconnect", "code": 1000})
        try:
            async for batch in call.batches():
                msgs = [m for m in batch if isinstance(m, dict) and m["type"] != "websocket.accept"]
                done = _END in batch or any(m["type"] == "websocket.close" for m in msgs)
                if answer_id is None:
                    done = done or _IDLE in batch
                else:
                    done = done or any(m["type"] == "websocket.send" and is_answer(m.get("text") or "", answer_id)
                                       for m in msgs)
                if msgs:
                    yield msgs
                if done:
                    return
        finally:
            await call.close()

    async def stats(self) -> dict[str, Any]:
        """This replica's state for the ingress's ``/healthz`` and ``/metrics``."""
        import ray

        service = self.app.state.service
        store = service.engine.contexts
        return {
            "replica": self.replica_id, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
            "model": service.model_name, "dtype": service.engine.dtype, "queueDepth": service.scheduler.queue_depth,
            "activeJobs": int(service.metrics.active.value()), "calls": self.calls,
            "contextCache": {**asdict(store.stats), "entries": len(store), "bytes": store.nbytes},
            "metrics": service.metrics.render(),
        }
