"""JSON-RPC method names, error codes and message shapes shared by the language server and the websocket server.

One place for the wire format so the two front ends cannot drift apart. Keys are camelCase; none is a Python
keyword (a pass is ``passIndex``, never ``pass``).
"""

from __future__ import annotations

from typing import Any

# Methods
INFILL = "editEngine/infill"  # request: fill at a position / range; answered with an InfillResponse
APPLY = "editEngine/apply"  # request: merge an update snippet with ``... existing code ...`` markers into a file
NEXT_EDIT = "editEngine/nextEdit"  # request: the change that follows the user's recent edits (one edit, or none)
PASS = "editEngine/pass"  # notification: one refinement pass of a request in flight
CANCEL = "$/cancelRequest"  # notification: {id}
ACCEPTED = "editEngine/accepted"  # notification from the client: telemetry (accept / partial accept)
INDEXED = "editEngine/indexed"  # notification: the memory's workspace index ended its walk or counted a changed file
SILENT = "editEngine/silent"  # notification, once per document: why its language gets no suggestions ({uri, reason})
# workspace/executeCommand: apply a proposed next edit (the server sends it back as workspace/applyEdit)
APPLY_NEXT_EDIT_COMMAND = "editEngine.applyNextEdit"

# JSON-RPC error codes (JSON-RPC 2.0 and LSP)
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_OVERLOADED = -32001  # a limit was hit (queue, in-flight, size); retry later
REQUEST_CANCELLED = -32800  # LSP RequestCancelled
CONTENT_MODIFIED = -32801  # LSP ContentModified: the request's document version is stale

# Limits
MAX_DOCUMENT_CHARS = 500_000  # largest document either front end sends to the model (prefix + suffix, or text)

STOP_REASONS = ("complete", "length", "line", "cancelled")  # line: a single-line fill ended at its newline


def pass_params(
    request_id: int | str,
    pass_index: int,
    final: bool,
    text: str,
    masked: int,
    *,
    uri: str | None = None,
    version: int | None = None,
    range_: dict[str, Any] | None = None,
    preview: str = "",
    timings: dict[str, float] | None = None,
    nfe: int | None = None,
) -> dict[str, Any]:
    """Params of an ``editEngine/pass`` notification. ``text`` replaces the whole range (a snapshot);
    ``preview``, sent while slots of the canvas are masked, is the same span with ``\u2591`` where each sits
    (for showing the pass; never to insert). ``timings``, on the final pass: milliseconds per stage (the
    engine's, then ``server``: the request so far, and ``json``: writing its earlier notifications) and ``nfe``,
    the forward passes it took (0: answered without the model)."""
    out: dict[str, Any] = {"requestId": request_id, "passIndex": pass_index, "final": final, "text": text,
                           "masked": masked}
    if preview:
        out["preview"] = preview
    if uri is not None:
        out["uri"] = uri
    if version is not None:
        out["version"] = version
    if range_ is not None:
        out["range"] = range_
    if timings is not None:
        out["timings"] = {k: round(v, 2) for k, v in timings.items()}
    if nfe is not None:
        out["nfe"] = nfe
    return out


def infill_response(
    text: str, passes: int, nfe: int, elapsed_ms: float, stop_reason: str, *,
    range_: dict[str, Any] | None = None, version: int | None = None,
) -> dict[str, Any]:
    """Result of an ``editEngine/infill`` request."""
    out: dict[str, Any] = {"text": text, "passes": passes, "nfe": nfe, "elapsedMs": round(elapsed_ms, 2),
                           "stopReason": stop_reason}
    if range_ is not None:
        out["range"] = range_
    if version is not None:
        out["version"] = version
    return out


def next_edit_response(
    range_: dict[str, Any], new_text: str, uri: str, version: int, kind: str, patterns: list[str],
    elapsed_ms: float, asked_version: int | None = None,
) -> dict[str, Any]:
    """Result of the language server's ``editEngine/nextEdit`` (null when there is no proposal): ``newText``
    replaces ``range`` of ``textDocument`` (``uri`` at ``version``: the document asked about, or another open
    one); ``version`` is the asked document's version (``asked_version``, default ``version``), which a client
    checks against its own; ``command`` applies it (``workspace/executeCommand``)."""
    edit = {"range": range_, "newText": new_text}
    document = {"uri": uri, "version": version}
    return {**edit, "textDocument": document, "version": version if asked_version is None else asked_version,
            "kind": kind, "patterns": patterns, "elapsedMs": round(elapsed_ms, 2),
            "command": {"title": "Apply next edit", "command": APPLY_NEXT_EDIT_COMMAND,
                        "arguments": [{"textDocument": document, **edit}]}}


def lsp_range(start: tuple[int, int], end: tuple[int, int]) -> dict[str, Any]:
    return {"start": {"line": start[0], "character": start[1]}, "end": {"line": end[0], "character": end[1]}}
