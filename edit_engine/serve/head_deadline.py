"""A deadline for each request head: uvicorn's h11 protocol that closes a connection whose request head has not
fully arrived ``header_timeout_s`` after the connection opened (or after its previous response), so a client that
sends a header a byte at a time (slowloris), or never sends one, holds a socket for that long at most.

Its own module, importing only uvicorn and h11: the single server's ``guard`` uses it, and so does Ray Serve's
HTTP proxy process (``ray_app.proxy``), which need not load the app, torch among it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head (see the module doc)."""

    header_timeout_s = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # a whole request head arrived
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timeout)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()
