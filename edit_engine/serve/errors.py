"""Every error the server answers with, and how it maps to JSON-RPC codes and HTTP statuses (the one place)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edit_engine import protocol as rpc

# kind -> (JSON-RPC code, HTTP status, OpenAI error type)
KINDS: dict[str, tuple[int, int, str]] = {
    "parse": (rpc.PARSE_ERROR, 400, "invalid_request_error"),
    "invalid_request": (rpc.INVALID_REQUEST, 400, "invalid_request_error"),
    "method_not_found": (rpc.METHOD_NOT_FOUND, 404, "invalid_request_error"),
    "invalid_params": (rpc.INVALID_PARAMS, 400, "invalid_request_error"),
    "too_large": (rpc.SERVER_OVERLOADED, 413, "invalid_request_error"),  # request, document or maxTokens limit
    "overloaded": (rpc.SERVER_OVERLOADED, 503, "server_error"),  # queue full / too many in flight: retry
    "cancelled": (rpc.REQUEST_CANCELLED, 499, "cancelled"),
    "content_modified": (rpc.CONTENT_MODIFIED, 409, "invalid_request_error"),
    "unauthorized": (rpc.INVALID_REQUEST, 401, "authentication_error"),
    "length_required": (rpc.INVALID_REQUEST, 411, "invalid_request_error"),
    "not_found": (rpc.METHOD_NOT_FOUND, 404, "invalid_request_error"),  # an HTTP path the API does not have
    "method_not_allowed": (rpc.METHOD_NOT_FOUND, 405, "invalid_request_error"),
    "model_not_found": (rpc.INVALID_PARAMS, 404, "invalid_request_error"),  # a ``model`` this server lacks
    "forbidden": (rpc.INVALID_REQUEST, 403, "permission_error"),  # a Host or Origin a keyless server refuses
    "timeout": (rpc.INVALID_REQUEST, 408, "invalid_request_error"),  # the body did not arrive in time
    "internal": (rpc.INTERNAL_ERROR, 500, "server_error"),
}


@dataclass
class ServeError(Exception):
    """An error with a kind from ``KINDS``; ``retry_after`` (seconds) for overload answers."""

    kind: str
    message: str
    limit: str | None = None  # which limit was hit, if any
    retry_after: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown error kind {self.kind!r}")
        super().__init__(self.message)

    @property
    def rpc_code(self) -> int:
        return KINDS[self.kind][0]

    @property
    def http_status(self) -> int:
        return KINDS[self.kind][1]

    def rpc_error(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.rpc_code, "message": self.message}
        data = {k: v for k, v in (("limit", self.limit), ("retryAfter", self.retry_after)) if v is not None}
        if data:
            err["data"] = data
        return err

    def http_body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": KINDS[self.kind][2], "code": self.limit or self.kind,
                          "param": None}}

    def http_headers(self) -> dict[str, str]:
        h: dict[str, str] = {}
        if self.retry_after is not None:
            h["Retry-After"] = str(self.retry_after)
        if self.kind == "unauthorized":
            h["WWW-Authenticate"] = "Bearer"
        return h


def rpc_error_message(request_id: int | str | None, error: ServeError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.rpc_error()}
