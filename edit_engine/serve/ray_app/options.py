"""From ``Settings`` to the options of the two deployments (pure: no Ray import, so the checks run anywhere).

Defaults, each overridable by its flag: a replica runs ``2 x --max-batch`` requests at once (a full batch and
as many waiting in its own queue), more wait for a free replica in the ingress (``--max-queue`` of them per
ingress replica, then 503 / -32001), and the autoscaler aims at ``--max-batch`` requests per replica (a full
batch).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from edit_engine.serve.settings import Settings, _scalar_type

APP_NAME = "edit-engine"  # the Serve application
ENGINE = "Engine"  # the model replicas
INGRESS = "Ingress"  # the front deployment
ROUTER = "edit_engine.serve.ray_app.router.DocumentAffinityRouter"
SHUTDOWN_GRACE_S = 10.0  # a replica being stopped finishes its requests for this long (as the single server)


def settings_from_args(args: Mapping[str, Any]) -> Settings:
    """``Settings`` from a ``serve run`` config's ``args`` (field names), over ``EDIT_ENGINE_*`` variables.
    Raises ValueError naming an unknown key or a bad value."""
    names = {f.name for f in fields(Settings)}
    unknown = sorted(set(args) - names)
    if unknown:
        raise ValueError(f"unknown settings {unknown}; known: {sorted(names)}")
    types = {f.name: _scalar_type(f.type) for f in fields(Settings)}
    typed = {k: None if v is None else types[k](v) for k, v in args.items()}
    settings = Settings.resolve(argparse.Namespace(**typed))
    check(settings)
    return settings


def parse_autoscale(text: str) -> tuple[int, int]:
    """``"MIN:MAX"`` -> (MIN, MAX); ValueError unless 0 <= MIN <= MAX and MAX >= 1."""
    parts = text.split(":")
    try:
        lo, hi = (int(p) for p in parts) if len(parts) == 2 else (None, None)
    except ValueError:
        lo = hi = None
    if lo is None or hi is None or not 0 <= lo <= hi or hi < 1:
        raise ValueError(f"--autoscale {text!r}: give MIN:MAX replicas with 0 <= MIN <= MAX and MAX >= 1 (e.g. 1:4)")
    return lo, hi


def check(s: Settings) -> None:
    """ValueError for Ray settings that cannot work."""
    if s.autoscale:
        parse_autoscale(s.autoscale)
    elif s.replicas < 1:
        raise ValueError("--replicas must be >= 1")
    for name in ("gpus_per_replica", "cpus_per_replica", "max_ongoing_requests", "max_queued_requests",
                 "target_ongoing_requests"):
        if getattr(s, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
    if not s.route_timeout_s > 0:
        raise ValueError("--route-timeout-s must be > 0")
    if s.affinity not in (0, 1):
        raise ValueError("--affinity is 0 or 1")


def max_ongoing(s: Settings) -> int:
    return s.max_ongoing_requests or 2 * s.max_batch


def max_queued(s: Settings) -> int:
    return s.max_queued_requests or s.max_queue


def engine_options(s: Settings) -> dict[str, Any]:
    """``serve.deployment`` options of the model replicas (the request router is added where Ray is imported)."""
    opts: dict[str, Any] = {
        "max_ongoing_requests": max_ongoing(s),
        "max_queued_requests": max_queued(s),
        "ray_actor_options": {"num_cpus": s.cpus_per_replica, "num_gpus": s.gpus_per_replica},
        "graceful_shutdown_timeout_s": SHUTDOWN_GRACE_S,
        "graceful_shutdown_wait_loop_s": 0.5,
        "health_check_period_s": 5.0,
        "health_check_timeout_s": 30.0,
    }
    if s.autoscale:
        lo, hi = parse_autoscale(s.autoscale)
        opts["autoscaling_config"] = {
            "min_replicas": lo, "max_replicas": hi, "initial_replicas": max(lo, 1),
            "target_ongoing_requests": s.target_ongoing_requests or float(s.max_batch),
            "upscale_delay_s": 10.0, "downscale_delay_s": 120.0,
        }
    else:
        opts["num_replicas"] = s.replicas
    return opts


def ingress_options(s: Settings) -> dict[str, Any]:
    """The front deployment: I/O only (no CPU reserved); every open websocket is one ongoing request there, so
    it takes as many as ``--max-connections`` (its ``Guard`` answers 503 beyond them)."""
    return {"num_replicas": 1, "max_ongoing_requests": s.max_connections + 8,
            "ray_actor_options": {"num_cpus": 0}, "graceful_shutdown_timeout_s": SHUTDOWN_GRACE_S}


def cluster_cpus(s: Settings, available: int) -> int:
    """CPUs a local Ray instance declares: what this machine has, or what the replicas reserve if more (Ray
    counts CPUs as slots; it does not pin threads to them)."""
    most = parse_autoscale(s.autoscale)[1] if s.autoscale else s.replicas
    return max(available, math.ceil(most * s.cpus_per_replica))


def ws_max_size(s: Settings) -> int:
    """The largest websocket frame read (as the single server's ``uvicorn_config``): 4x the request limit, so
    frames up to that get a JSON-RPC error from the app and larger ones close the socket (1009)."""
    return 4 * s.max_request_bytes
