"""``edit-engine serve --ray``: the application, and running it on a local Ray instance or a cluster.

Without ``--address`` a local Ray instance starts on the loopback address (no dashboard) and stops with the
command. With ``--address`` the command joins that cluster as a Ray driver, deploys the application and
deletes it again when it stops (SIGINT or SIGTERM), leaving the cluster's Serve instance running. Ray Serve's
HTTP proxy listens on ``--host:--port`` (on the head node), held to the single server's connection deadlines and
websocket frame size (``proxy``) when this command starts Serve; joining a cluster whose Serve already runs keeps
that instance's proxy as it is.
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from edit_engine.serve.ray_app import options, proxy
from edit_engine.serve.ray_app.options import APP_NAME, ENGINE, INGRESS
from edit_engine.serve.settings import Settings

CONTROLLER_OPTIONS = "controller_options"  # serve.start's runtime environment of the Serve controller (Ray >= 2.60)


def application(settings: Settings, before_pass: Callable[[], None] | None = None) -> Any:
    """The bound application: the Ingress deployment in front of the Engine deployment. ``before_pass``: a
    picklable hook each replica's scheduler calls before every forward pass (tests)."""
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    from edit_engine.serve.ray_app.ingress import ingress_app
    from edit_engine.serve.ray_app.replica import EngineReplica

    def build() -> Any:  # runs in each ingress replica (the app is built there, not pickled)
        return ingress_app(settings)

    router: dict[str, Any] = {"request_router_class": options.ROUTER}
    engine: Any = serve.deployment(EngineReplica, name=ENGINE, **options.engine_options(settings),
                                   request_router_config=RequestRouterConfig(**router))
    ingress: Any = serve.deployment(serve.ingress(build)(), name=INGRESS, **options.ingress_options(settings))
    return ingress.bind(engine.bind(settings, before_pass))


def start_serve(settings: Settings, port: int) -> None:
    """Start Ray Serve with its HTTP proxy on ``settings.host:port`` (the head node), its keep-alive and head
    deadlines as the single server's and its websocket frame limit (``proxy``): the proxies inherit
    ``proxy_environment`` from the Serve controller's runtime environment (Ray >= 2.60; before, only a local
    instance's proxy gets it, from ``run``'s environment). Where Serve already runs, nothing of it changes."""
    from ray import serve

    extra: dict[str, Any] = {}
    if CONTROLLER_OPTIONS in inspect.signature(serve.start).parameters:
        extra[CONTROLLER_OPTIONS] = {"runtime_env": {"env_vars": proxy.proxy_environment(settings)}}
    elif settings.address:
        print("edit-engine serve: this Ray cannot hand its HTTP proxy the head deadline and frame limit "
              "(serve.start has no controller_options before Ray 2.60)", file=sys.stderr, flush=True)
    serve.start(proxy_location="HeadOnly", http_options={"host": settings.host, "port": port,
                                                         "keep_alive_timeout_s": proxy.KEEP_ALIVE_S}, **extra)


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def run(settings: Settings) -> int:
    """Deploy and serve until SIGINT / SIGTERM; 0 on a clean stop, 1 when the application failed to start."""
    import ray
    from ray import serve

    options.check(settings)
    port = settings.port or free_port(settings.host)
    if settings.address:
        ray.init(address=settings.address, logging_level=logging.WARNING)
    else:
        os.environ.update(proxy.proxy_environment(settings))  # the local instance's processes inherit it
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, logging_level=logging.WARNING,
                 num_cpus=options.cluster_cpus(settings, os.cpu_count() or 1))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        start_serve(settings, port)
        serve.run(application(settings), name=APP_NAME, route_prefix="/", blocking=False)
        count = f"{settings.autoscale} (autoscaled)" if settings.autoscale else str(settings.replicas)
        print(f"edit-engine serve: Ray Serve application {APP_NAME!r} running on http://{settings.host}:{port} "
              f"({count} Engine replicas)", flush=True)
        stop.wait()
        return 0
    except Exception as e:  # the application did not deploy (a replica failed to start: see the log above)
        print(f"edit-engine serve: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        _teardown(bool(settings.address))


def _teardown(joined: bool) -> None:
    """Delete the application (its replicas finish what they run, up to the grace period); a local instance is
    stopped with it."""
    import ray
    from ray import serve

    try:
        if joined:
            serve.delete(APP_NAME)
        else:
            serve.shutdown()
    finally:
        ray.shutdown()
