"""The server's one settings object. It also produces the CLI flags and reads ``EDIT_ENGINE_*`` variables.

Precedence: command-line flag > environment variable > the default written here. Every field carries its help
text, so adding a setting adds its flag and its variable.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

from edit_engine.cli.args import is_loopback
from edit_engine.protocol import MAX_DOCUMENT_CHARS

ENV_PREFIX = "EDIT_ENGINE_"


def _help(text: str) -> Any:
    return {"help": text}


def _ray(default: Any, text: str) -> Any:
    """A setting of the scale-out on Ray Serve, which only ``--ray`` reads (its help says so)."""
    return field(default=default, metadata=_help("with --ray: " + text))


@dataclass(frozen=True)
class Settings:
    """How ``edit-engine serve`` runs. Limits bound memory and time per request, connection and server."""

    host: str = field(default="127.0.0.1", metadata=_help("address to bind (loopback by default)"))
    port: int = field(default=8765, metadata=_help("TCP port (0 = any free port)"))
    model: str | None = field(default=None, metadata=_help("checkpoint directory (default: the packaged model)"))
    edit_model: str | None = field(default=None, metadata=_help(
        "next edits' checkpoint (default: the edit model packaged beside the packaged model; none: the fill model)"))
    api_key: str | None = field(default=None, metadata=_help(
        "require 'Authorization: Bearer KEY' on every route but /healthz (needed to bind a non-loopback address)"))
    threads: int = field(default=0, metadata=_help("torch CPU threads (0 = torch's default)"))
    device: str = field(default="cpu", metadata=_help("torch device of the model"))
    dtype: str = field(default="", metadata=_help(
        "what the model computes in: float32, bfloat16 or int8 (CPU) (default: EDIT_ENGINE_DTYPE, else float32)"))
    compile: int = field(default=0, metadata=_help(
        "1 = torch.compile the per-pass step at start-up (about 30 s more start-up; passes about 1.4x faster)"))
    # Batching: the scheduler runs the passes of up to max_batch requests in one forward pass.
    max_batch: int = field(default=16, metadata=_help("requests denoised together in one forward pass (1 = unbatched)"))
    document_workers: int = field(default=2, metadata=_help(
        "threads running the repair rounds of document requests, and requests that are not batched "
        "(autoregressive or open checkpoints)"))
    max_queue: int = field(default=64, metadata=_help("requests waiting for a batch slot; beyond it: overloaded"))
    edit_workers: int = field(default=2, metadata=_help(
        "threads running next edit and apply requests (apart from fills)"))
    max_edit_queue: int = field(default=8, metadata=_help(
        "next edit and apply requests waiting for an edit thread; beyond it: overloaded"))
    # Limits: over any of them the request gets a clear error (-32001, HTTP 413/429/503), never a drop.
    max_request_bytes: int = field(default=1_000_000, metadata=_help("largest request body or websocket frame"))
    max_document_chars: int = field(default=MAX_DOCUMENT_CHARS, metadata=_help(
        "largest document (prefix + suffix, or text); the language server's limit too"))
    max_tokens: int = field(default=256, metadata=_help("largest maxTokens a request may ask for"))
    max_inflight_per_connection: int = field(default=8, metadata=_help("requests in flight on one websocket"))
    max_connections: int = field(default=256, metadata=_help(
        "HTTP requests and websockets open at once; beyond it: 503 with Retry-After"))
    header_timeout_s: float = field(default=10.0, metadata=_help(
        "seconds a client has to send a request's head (slow clients are disconnected)"))
    body_timeout_s: float = field(default=30.0, metadata=_help("seconds a client has to send a request's body"))
    allowed_hosts: str = field(default="", metadata=_help(
        "without --api-key, Host names accepted besides localhost and the bound address (comma-separated; '*' "
        "= any): guards against DNS rebinding"))
    allowed_origins: str = field(default="", metadata=_help(
        "without --api-key, browser origins (e.g. http://localhost:3000) that may call the server besides its "
        "own pages (comma-separated)"))
    retry_after_s: int = field(default=1, metadata=_help("Retry-After seconds sent with overload answers"))
    log_level: str = field(default="info", metadata=_help("uvicorn log level"))
    # Scale-out on Ray Serve (``edit-engine serve --ray``, ``edit_engine.serve.ray_app``); ignored without --ray.
    replicas: int = _ray(1, "model replicas (a fixed count)")
    autoscale: str = _ray("", "MIN:MAX model replicas, scaled on the requests each one runs (replaces --replicas)")
    gpus_per_replica: float = _ray(0.0, "GPUs each replica reserves (a fraction shares a GPU)")
    cpus_per_replica: float = _ray(1.0, "CPUs each replica reserves")
    address: str = _ray(
        "", "the Ray cluster to join (its head's HOST:PORT, or ray://HOST:PORT); default: start a local "
        "Ray instance on the loopback address")
    max_ongoing_requests: int = _ray(
        0, "requests one replica runs at once; more wait for a free replica (0 = 2 x --max-batch)")
    max_queued_requests: int = _ray(
        0, "requests waiting for a free replica (per ingress replica); beyond it: 503 + Retry-After, "
        "-32001 (0 = --max-queue)")
    target_ongoing_requests: float = field(default=0.0, metadata=_help(
        "with --ray --autoscale: requests per replica the autoscaler aims at (0 = --max-batch)"))
    route_timeout_s: float = _ray(30.0, "seconds a request may wait for a replica before it is answered 503 / -32001")
    affinity: int = _ray(
        1, "1 = the requests of one document (websocket uri, X-Session-Id header, 'user' field) go to "
        "one replica while it lives, so its caches keep hitting; 0 = the less loaded of two replicas")

    def __post_init__(self) -> None:
        for name in ("max_batch", "document_workers", "max_queue", "max_request_bytes", "max_document_chars", "max_tokens",
                     "max_inflight_per_connection", "max_connections"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not (self.header_timeout_s > 0 and self.body_timeout_s > 0):
            raise ValueError("header_timeout_s and body_timeout_s must be > 0")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port} is outside 0..65535")
        if self.dtype:
            from edit_engine.model.dtypes import check_dtype_name

            check_dtype_name(self.dtype)

    # ------------------------------------------------------------------ safety
    def check_bind(self) -> None:
        """Refuse to listen beyond this machine without an API key (raises ValueError with the reason)."""
        if self.api_key:
            return
        if not is_loopback(self.host):
            raise ValueError(
                f"refusing to bind {self.host!r} without an API key: anyone who can reach it could use the "
                "model. Pass --api-key KEY (or set EDIT_ENGINE_API_KEY), or bind 127.0.0.1.")

    # ------------------------------------------------------------------ flags and environment
    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """One flag per field (``max_batch`` -> ``--max-batch``); defaults are resolved later (env, then field)."""
        for f in fields(cls):
            flag = "--" + f.name.replace("_", "-")
            typ = _scalar_type(f.type)
            env = ENV_PREFIX + f.name.upper()
            parser.add_argument(flag, dest=f.name, type=typ, default=None,
                                help=f"{f.metadata.get('help', '')} [env {env}; default {f.default!r}]")

    @classmethod
    def resolve(cls, args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None) -> Settings:
        """Flags over environment over defaults. Bad environment values raise ValueError naming the variable."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            cli = getattr(args, f.name, None) if args is not None else None
            if cli is not None:
                values[f.name] = cli
                continue
            env = environ.get(ENV_PREFIX + f.name.upper())
            if env is not None and env != "":
                try:
                    values[f.name] = _scalar_type(f.type)(env)
                except ValueError as e:
                    raise ValueError(f"{ENV_PREFIX + f.name.upper()}={env!r}: {e}") from e
        return cls(**values)

    def with_(self, **kw: Any) -> Settings:
        return replace(self, **kw)


def _scalar_type(annotation: Any) -> type:
    """The constructor for a field's annotation (annotations are strings under ``from __future__``)."""
    text = str(annotation)
    if text.startswith("int"):
        return int
    if text.startswith("float"):
        return float
    return str


DEFAULTS = {f.name: f.default for f in fields(Settings) if f.default is not MISSING}
