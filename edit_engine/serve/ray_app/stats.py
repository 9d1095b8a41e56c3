"""``/healthz`` and ``/metrics`` of the Ray application: every Engine replica is asked for its state (a call
pinned to it by the router), and the ingress adds its own counters.

``/metrics`` holds each replica's single-server metrics with a ``replica`` label, its context-cache counters
(``edit_engine_context_cache_lookups_total{outcome=hits|partial|misses}``,
``edit_engine_context_cache_tokens_total{kind=reused|encoded}``), ``edit_engine_replica_info{pid, node}``, and
the ingress's ``edit_engine_ray_*`` counters (per ingress replica). A replica that does not answer within
``STATS_TIMEOUT_S`` (all its slots busy, or gone) is listed without figures.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from ray.exceptions import RayError
from ray.serve.exceptions import RayServeException

from edit_engine.serve.metrics import Counter, Gauge
from edit_engine.serve.ray_app.registry import live_replicas
from edit_engine.serve.ray_app.router import PIN

STATS_TIMEOUT_S = 2.0
T = TypeVar("T")


class IngressMetrics:
    """The ingress's own counters (one registry per ingress replica)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.forwarded = Counter(r, "edit_engine_ray_forwarded_total",
                                 "requests sent to an Engine replica, by route (http, ws)", ("route",))
        self.retries = Counter(r, "edit_engine_ray_retries_total",
                               "requests sent again to another replica after theirs stopped before answering")
        self.lost = Counter(r, "edit_engine_ray_replica_lost_total",
                            "calls whose replica stopped while they ran (retried or answered 503 / -32001)")
        self.overloaded = Counter(r, "edit_engine_ray_overloaded_total",
                                  "requests answered 503 / -32001 here, by limit (max_queued_requests, "
                                  "route_timeout_s, replica, replicas)", ("limit",))
        self.cancellations = Counter(r, "edit_engine_ray_cancellations_total",
                                     "websocket requests cancelled, by reason (client, superseded, disconnect)",
                                     ("reason",))
        self.sockets = Gauge(r, "edit_engine_ray_websocket_connections", "open client websockets")


def outside_request(call: Callable[[], T]) -> T:
    """Run ``call`` (a handle's ``remote()``) outside the current request's Ray context: the call gets a request
    id of its own. Calls made while serving one request inherit its id, and Ray's router tells concurrent
    pending calls apart by it, so the calls of one websocket (one request to the ingress) must not share it."""
    return contextvars.Context().run(call)


async def _stats(handle: Any, key: str) -> dict[str, Any] | None:
    h = handle.options(multiplexed_model_id=key)
    response = outside_request(lambda: h.stats.remote())

    async def wait() -> Any:
        return await response

    try:
        return dict(await asyncio.wait_for(wait(), STATS_TIMEOUT_S))
    except (asyncio.TimeoutError, RayError, RayServeException):
        response.cancel()
        return None


async def gather(handle: Any, app_name: str) -> list[dict[str, Any]]:
    """The state of every Engine replica (``{"replica": id}`` alone for one that did not answer): a broadcast
    where Ray has it (it reaches full replicas too), else one call pinned to each replica the router knows."""
    if hasattr(handle, "broadcast"):
        try:
            response = outside_request(lambda: handle.broadcast("stats"))
            answers = await response.results_async(timeout_s=STATS_TIMEOUT_S, return_exceptions=True)
        except (TimeoutError, RayError, RayServeException):
            answers = []
        out = [dict(a) for a in answers if isinstance(a, dict)]
        seen = {a["replica"] for a in out}
        out += [{"replica": i} for i in live_replicas(app_name) if i not in seen]
        if out:
            return sorted(out, key=lambda r: r["replica"])
    ids = live_replicas(app_name)
    first: dict[str, Any] | None = None
    if not ids:  # the router has not heard of the replicas yet: any one answers, and the router starts
        first = await _stats(handle, "")
        ids = live_replicas(app_name) or ((first["replica"],) if first else ())
    rest = [i for i in ids if first is None or i != first["replica"]]
    answers = await asyncio.gather(*(_stats(handle, PIN + i) for i in rest))
    out = ([first] if first else []) + [a if a is not None else {"replica": i} for i, a in zip(rest, answers, strict=True)]
    return sorted(out, key=lambda r: r["replica"])


def healthz_body(replicas: list[dict[str, Any]]) -> dict[str, Any]:
    """The single server's ``/healthz`` fields (``queueDepth`` summed), and one entry per replica."""
    alive = [r for r in replicas if "model" in r]
    rows = [{"replica": r["replica"], **({"queueDepth": r["queueDepth"], "activeJobs": r["activeJobs"],
                                           "contextCache": r["contextCache"]} if "model" in r else {"status": "no answer"})}
            for r in replicas]
    if not alive:
        return {"status": "unavailable", "replicas": rows}
    return {"status": "ok", "model": alive[0]["model"], "dtype": alive[0]["dtype"],
            "queueDepth": sum(r["queueDepth"] for r in alive), "replicas": rows}


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def _replica_families(replicas: list[dict[str, Any]]) -> list[Metric]:
    """Every replica's metrics, merged by family, each sample labelled with its replica."""
    merged: dict[tuple[str, str], Metric] = {}
    for r in replicas:
        for fam in text_string_to_metric_families(r.get("metrics", "")):
            if fam.name.endswith("_created"):
                continue
            out = merged.setdefault((fam.name, fam.type), Metric(fam.name, fam.documentation, fam.type))
            out.samples += [s._replace(labels={**s.labels, "replica": r["replica"]}) for s in fam.samples]
    info = GaugeMetricFamily("edit_engine_replica_info", "an Engine replica answering: its process and node",
                             labels=["replica", "pid", "node"])
    lookups = CounterMetricFamily("edit_engine_context_cache_lookups", "per-document context-cache lookups, by "
                                  "outcome (hits, partial, misses)", labels=["replica", "outcome"])
    tokens = CounterMetricFamily("edit_engine_context_cache_tokens", "context tokens reused from the cache or "
                                 "encoded", labels=["replica", "kind"])
    for r in replicas:
        if "model" not in r:
            continue
        info.add_metric([r["replica"], str(r["pid"]), r["node"]], 1)
        cc = r["contextCache"]
        for outcome in ("hits", "partial", "misses"):
            lookups.add_metric([r["replica"], outcome], cc[outcome])
        tokens.add_metric([r["replica"], "reused"], cc["tokens_reused"])
        tokens.add_metric([r["replica"], "encoded"], cc["tokens_encoded"])
    return [*merged.values(), info, lookups, tokens]


def metrics_text(ingress: IngressMetrics, replicas: list[dict[str, Any]]) -> str:
    registry = CollectorRegistry()
    registry.register(_Families(_replica_families([r for r in replicas if "model" in r])))
    return generate_latest(ingress.registry).decode() + generate_latest(registry).decode()
