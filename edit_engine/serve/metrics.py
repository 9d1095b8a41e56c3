"""Prometheus metrics through ``prometheus_client``: one ``CollectorRegistry`` per app (no module globals, so
several apps in one process keep apart), written out by ``generate_latest`` in the text exposition format.

The server's code calls the metrics with labels as keyword arguments (``retired.inc(reason="done")``,
``latency.observe(s)``) and reads them back with ``value(**labels)``; the small wrappers below give the client
library's metrics that shape. The scheduler thread and the event loop both update them (the library locks).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import Counter as _Counter
from prometheus_client import Gauge as _Gauge
from prometheus_client import Histogram as _Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edit_engine.syntax import lru

# Latency buckets in seconds: a pass of the small model takes ~1-10 ms on CPU, a whole fill 20 ms - 2 s.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


class Counter:
    """A counter (``_total``) with keyword labels; the label names are sorted, so a sample reads
    ``name{outcome="ok",route="ws"}`` whichever order a caller gives them in."""

    kind = _Counter

    def __init__(self, registry: CollectorRegistry, name: str, doc: str, labels: Sequence[str] = ()) -> None:
        self.name, self._registry = name, registry
        self._metric = self.kind(name, doc, labelnames=sorted(labels), registry=registry)

    def _child(self, labels: dict[str, str]):  # type: ignore[no-untyped-def]
        return self._metric.labels(**labels) if labels else self._metric

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        self._child(labels).inc(amount)

    def value(self, **labels: str) -> float:
        """The current value (0 for a label set never updated)."""
        return self._registry.get_sample_value(self.name, labels) or 0.0


class Gauge(Counter):
    kind = _Gauge  # type: ignore[assignment]

    def set(self, value: float, **labels: str) -> None:
        self._child(labels).set(value)


class _IntegerBounds(Collector):
    """A histogram whose whole-number bucket bounds are written as integers (``le="1"``, not the library's
    ``le="1.0"``), as the Go client writes them: readers of /metrics match ``edit_engine_batch_size_bucket{le="1"}``
    (the batch-size buckets count requests)."""

    def __init__(self, histogram: _Histogram) -> None:
        self.histogram = histogram

    def collect(self) -> Iterator[Metric]:
        for family in self.histogram.collect():
            family.samples = [s._replace(labels={**s.labels, "le": _integer(s.labels["le"])})
                              if "le" in s.labels else s for s in family.samples]
            yield family


class _CacheBytes(Collector):
    """``edit_engine_cache_bytes{cache=...}``: the bytes each request-sized cache holds (``syntax.lru.held``: the
    entries' size estimates), read at each scrape. They grow until their byte budgets hold, then stay."""

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("edit_engine_cache_bytes", "bytes held by the request-sized caches, by cache",
                              labels=["cache"])
        for name, n in sorted(lru.held().items()):
            g.add_metric([name or "unnamed"], n)
        yield g


def _integer(bound: str) -> str:
    return bound[:-2] if bound.endswith(".0") else bound


class Histogram:
    """Cumulative buckets, sum and count, without labels."""

    def __init__(self, registry: CollectorRegistry, name: str, doc: str, buckets: Sequence[float]) -> None:
        self.name, self._registry = name, registry
        self._metric = _Histogram(name, doc, buckets=buckets, registry=None)
        registry.register(_IntegerBounds(self._metric))

    def observe(self, value: float) -> None:
        self._metric.observe(value)

    @property
    def count(self) -> int:
        return int(self._registry.get_sample_value(self.name + "_count") or 0)


class Metrics:
    """The server's metrics, one object (and one registry) per app."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(r, "edit_engine_requests_total",
                                "requests answered, by route (ws, http) and outcome (ok, cancelled, error, overloaded)",
                                ("route", "outcome"))
        self.passes = Counter(r, "edit_engine_passes_total", "denoising passes delivered to requests")
        self.forward_passes = Counter(r, "edit_engine_forward_passes_total",
                                      "batched forward passes of the model (one serves every request in the batch)")
        self.cancellations = Counter(r, "edit_engine_cancellations_total",
                                     "requests cancelled, by reason (client, superseded, disconnect)", ("reason",))
        self.retired = Counter(r, "edit_engine_jobs_retired_total",
                               "jobs the scheduler stopped working on, by reason (done, cancelled, error)", ("reason",))
        self.queue_depth = Gauge(r, "edit_engine_queue_depth", "requests waiting for a batch slot")
        self.active = Gauge(r, "edit_engine_active_jobs", "requests being denoised")
        self.connections = Gauge(r, "edit_engine_websocket_connections", "open websocket connections")
        self.latency = Histogram(r, "edit_engine_request_latency_seconds",
                                 "submit to final pass", LATENCY_BUCKETS)
        self.first_pass = Histogram(r, "edit_engine_first_pass_latency_seconds",
                                    "submit to first pass", LATENCY_BUCKETS)
        self.queue_wait = Histogram(r, "edit_engine_queue_wait_seconds",
                                    "submit to admission into the batch", LATENCY_BUCKETS)
        self.batch_size = Histogram(r, "edit_engine_batch_size", "requests per forward pass", BATCH_BUCKETS)
        r.register(_CacheBytes())

    def render(self) -> str:
        """The text exposition format (what /metrics serves)."""
        return generate_latest(self.registry).decode("utf-8")
