"""The server scaled out on Ray Serve: ``edit-engine serve --ray`` and ``serve run`` (import path
``edit_engine.serve.ray_app:build_app``).

Two deployments. **Engine** replicas each run the whole single-process server (``create_app``: the
``Service``, its batched ``Scheduler``, the engine's per-document caches) and take requests through a
deployment handle: an HTTP request, or one websocket JSON-RPC request, travels to a replica as ASGI messages
and runs through the stock app there; what the app sends comes back as a stream. **Ingress** (FastAPI under
``serve.ingress``, behind Ray's HTTP proxy) terminates HTTP and websockets, applies the same ``Guard`` and the
single server's per-websocket limits, picks each request's document key and forwards it. Ray's HTTP proxy gets
the single server's deadline for request heads, idle timeout and websocket frame size (``proxy``) where
``edit-engine serve --ray`` (or a serve config) starts Serve.

Routing (``router.DocumentAffinityRouter``, Ray Serve's request-router interface): requests with a document
key (the websocket ``uri``, an ``X-Session-Id`` header, the OpenAI ``user`` field) go to the replica that
ranks first for the key by rendezvous hashing, so a document stays on one replica while it lives and only a
lost or added replica's share of documents moves; the next ranks take over when it is full. Requests without
a key go to the less loaded of two random replicas.

Modules: ``options`` (names, settings -> deployment options; no Ray import), ``router`` (the request router)
and ``registry`` (the replicas it knows), ``replica`` (the Engine deployment), ``forward`` (a request's trip to
a replica: routing key, retry, back-pressure answers), ``ingress`` (the front app) and ``socket`` (its
websocket), ``stats`` (``/healthz`` and ``/metrics`` over every replica), ``proxy`` (what runs in Ray's HTTP
proxy; no Ray import), ``launch`` (the ``serve --ray`` command). Only ``options`` is imported by ``edit-engine
serve`` without ``--ray``, and it does not import Ray.
"""

from __future__ import annotations

from typing import Any

from edit_engine.serve.ray_app.options import APP_NAME, ENGINE, INGRESS


def build_app(args: dict[str, Any] | None = None) -> Any:
    """The Ray Serve application (``serve run edit_engine.serve.ray_app:build_app``, or ``import_path`` in a
    config file). ``args``: ``Settings`` fields (``model``, ``device``, ``api_key``, ``replicas``,
    ``autoscale``, ``gpus_per_replica``, ...) over ``EDIT_ENGINE_*`` variables over the defaults."""
    from edit_engine.serve.ray_app.launch import application
    from edit_engine.serve.ray_app.options import settings_from_args

    return application(settings_from_args(args or {}))


__all__ = ["APP_NAME", "ENGINE", "INGRESS", "build_app"]
