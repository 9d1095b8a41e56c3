"""Ray Serve's HTTP proxy held to the single server's connection deadlines and websocket frame size.

Ray builds its proxy's uvicorn server itself: ``serve.start(http_options=...)`` sets its address, root path,
request timeout and keep-alive timeout, and nothing more (no protocol class, no deadline for a request head, no
websocket frame size: uvicorn's default of 16 MiB). A socket whose request head never completes, or never starts,
reaches no ASGI app, so the ingress's ``Guard`` cannot close it. What Ray does offer: the function named by
``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` runs in the proxy's process when the proxy starts, before its server
is built. ``install`` is that function: it makes ``ProxyH11`` uvicorn's ``auto`` HTTP protocol in that process (the
proxy's server asks for ``auto``) and adds no middleware.

``ProxyH11`` is the single server's protocol, ``head_deadline.GuardedH11``: a connection whose request head has
not fully arrived ``header_timeout_s`` after it opened, or after its previous response, is closed; so are idle
sockets that never send anything (``head_deadline`` imports no torch, which the proxy's process need not load).
It also lowers the server's websocket frame limit to ``ws_max_size`` (4 x ``--max-request-bytes``, as the
single server's ``uvicorn_config``): a larger frame closes the socket (1009) before it is buffered.

``proxy_environment(settings)`` holds what does this: the callback's import path, ``EDIT_ENGINE_HEADER_TIMEOUT_S``
and ``EDIT_ENGINE_MAX_REQUEST_BYTES``. ``launch.start_serve`` hands it to the Serve controller
(``controller_options.runtime_env``), whose proxies inherit it, and sets the proxy's keep-alive timeout to
``KEEP_ALIVE_S`` (uvicorn's default, which the single server keeps). These belong to the Serve instance, not to one
application: they take effect when Serve starts. An application deployed where Serve already runs gets that
instance's proxy (``serve deploy`` configs set them in ``controller_options`` and ``http_options``).

Nothing here imports Ray, the app or torch.
"""

from __future__ import annotations

import os
from typing import Any

from edit_engine.serve.head_deadline import GuardedH11
from edit_engine.serve.ray_app import options
from edit_engine.serve.settings import ENV_PREFIX, Settings

CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
HEADER_TIMEOUT_ENV = ENV_PREFIX + "HEADER_TIMEOUT_S"
MAX_REQUEST_BYTES_ENV = ENV_PREFIX + "MAX_REQUEST_BYTES"
KEEP_ALIVE_S = 5  # seconds an idle keep-alive connection stays open after a response (uvicorn's default)


class ProxyH11(GuardedH11):
    """``GuardedH11`` (the single server's head deadline) with the websocket frame limit (module doc)."""

    header_timeout_s = Settings.header_timeout_s
    ws_max_size = options.ws_max_size(Settings())

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        if config.ws_max_size > self.ws_max_size:  # the proxy's one server: the same value on every connection
            config.ws_max_size = self.ws_max_size
        super().__init__(config, *args, **kwargs)


def proxy_environment(settings: Settings) -> dict[str, str]:
    """The variables that make a Serve instance's proxies run ``install`` with these settings' limits."""
    return {CALLBACK_ENV: f"{__name__}:install", HEADER_TIMEOUT_ENV: repr(settings.header_timeout_s),
            MAX_REQUEST_BYTES_ENV: str(settings.max_request_bytes)}


def install() -> list[Any]:
    """Ray's proxy callback (module doc): ``ProxyH11`` with the limits in this process's environment becomes
    uvicorn's ``auto`` HTTP protocol. No middleware."""
    from uvicorn import config

    env = os.environ
    if env.get(HEADER_TIMEOUT_ENV):
        ProxyH11.header_timeout_s = float(env[HEADER_TIMEOUT_ENV])
    if env.get(MAX_REQUEST_BYTES_ENV):
        ProxyH11.ws_max_size = options.ws_max_size(Settings(max_request_bytes=int(env[MAX_REQUEST_BYTES_ENV])))
    config.HTTP_PROTOCOLS["auto"] = f"{__name__}:ProxyH11"
    return []
