"""Prometheus metrics, written out in the text exposition format (version 0.0.4) without a client library.

Three kinds: counters (monotonic, with labels), gauges (set / add) and histograms (cumulative buckets, sum,
count). Every update takes one lock; the scheduler thread and the event loop both update them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

LabelKey = tuple[tuple[str, str], ...]

# Latency buckets in seconds: a pass of the small model takes ~1-10 ms on CPU, a whole fill 20 ms - 2 s.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


def _key(labels: dict[str, str] | None) -> LabelKey:
    return tuple(sorted((labels or {}).items()))


def _fmt_labels(key: LabelKey, extra: tuple[tuple[str, str], ...] = ()) -> str:
    items = key + extra
    if not items:
        return ""
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in items)
    return "{" + body + "}"


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(x: float) -> str:
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x)) if not float(x).is_integer() else str(int(x))


class _Metric:
    kind = ""

    def __init__(self, registry: Registry, name: str, doc: str) -> None:
        self.name, self.doc = name, doc
        self._lock = registry.lock
        registry.metrics.append(self)

    def samples(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    kind = "counter"

    def __init__(self, registry: Registry, name: str, doc: str) -> None:
        super().__init__(registry, name, doc)
        self._values: dict[LabelKey, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        k = _key(labels)
        with self._lock:
            self._values[k] = self._values.get(k, 0.0) + amount

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(_key(labels), 0.0)

    def samples(self) -> list[str]:
        items = sorted(self._values.items()) or [((), 0.0)]
        return [f"{self.name}{_fmt_labels(k)} {_num(v)}" for k, v in items]


class Gauge(Counter):
    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        with self._lock:
            self._values[_key(labels)] = value


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, registry: Registry, name: str, doc: str, buckets: Sequence[float]) -> None:
        super().__init__(registry, name, doc)
        self.buckets = tuple(buckets)
        self._counts = [0] * (len(self.buckets) + 1)  # the last is +Inf
        self._sum = 0.0

    def observe(self, value: float) -> None:
        with self._lock:
            i = 0
            while i < len(self.buckets) and value > self.buckets[i]:
                i += 1
            self._counts[i] += 1
            self._sum += value

    @property
    def count(self) -> int:
        with self._lock:
            return sum(self._counts)

    def samples(self) -> list[str]:
        out, acc = [], 0
        for le, c in zip((*self.buckets, math.inf), self._counts, strict=True):
            acc += c
            out.append(f"{self.name}_bucket{_fmt_labels((), (('le', _num(le)),))} {acc}")
        out.append(f"{self.name}_sum {_num(self._sum)}")
        out.append(f"{self.name}_count {acc}")
        return out


class Registry:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.metrics: list[_Metric] = []

    def render(self) -> str:
        lines: list[str] = []
        with self.lock:
            for m in self.metrics:
                lines.append(f"# HELP {m.name} {m.doc}")
                lines.append(f"# TYPE {m.name} {m.kind}")
                lines.extend(m.samples())
        return "\n".join(lines) + "\n"


class Metrics:
    """The server's metrics, one object per app (no module globals)."""

    def __init__(self) -> None:
        r = self.registry = Registry()
        self.requests = Counter(r, "edit_engine_requests_total",
                                "requests answered, by route (ws, http) and outcome (ok, cancelled, error, overloaded)")
        self.passes = Counter(r, "edit_engine_passes_total", "denoising passes delivered to requests")
        self.forward_passes = Counter(r, "edit_engine_forward_passes_total",
                                      "batched forward passes of the model (one serves every request in the batch)")
        self.cancellations = Counter(r, "edit_engine_cancellations_total",
                                     "requests cancelled, by reason (client, superseded, disconnect)")
        self.retired = Counter(r, "edit_engine_jobs_retired_total",
                               "jobs the scheduler stopped working on, by reason (done, cancelled, error)")
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

    def render(self) -> str:
        return self.registry.render()
