"""What the request routers of this process know about the Engine replicas, for the ingress's statistics.

Kept apart from ``router``: Ray ships a custom router's module to the processes that route by value (a copy
with its own globals), so state the ingress reads must live in a module imported the ordinary way.
"""

from __future__ import annotations

from collections.abc import Iterable

_LIVE: dict[str, tuple[str, ...]] = {}  # app name -> replica ids


def publish(app_name: str, replica_ids: Iterable[str]) -> None:
    _LIVE[app_name] = tuple(sorted(replica_ids))


def live_replicas(app_name: str) -> tuple[str, ...]:
    """Ids of the Engine replicas of ``app_name`` as this process's router last heard of them."""
    return _LIVE.get(app_name, ())
