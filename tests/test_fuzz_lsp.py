"""Fuzzing the language server over its real stdio: Hypothesis writes batches of JSON-RPC messages, well and badly
framed (lengths too large or too small, truncated bodies, headers without a length, noise), with params of the
wrong types, unknown methods and huge or odd ids. After each batch the same server process must still fill a small
document, and nothing may stay in flight (``editEngine/status``: fills, model-thread jobs, pygls requests).

One server serves every example (starting one costs seconds); lifecycle methods (``initialize``, ``shutdown``,
``exit``) are left out of the batches so that it stays usable. About 15 s on one core.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from test_lsp_stdio import DEADLINE, DOC, RawServer

PROBE = "file:///probe.py"
URIS = st.sampled_from([PROBE, "file:///other.py", "file:///never-opened.py", "untitled:1", ""])
INTS = st.one_of(st.integers(-3, 40), st.integers(-2**70, 2**70))
JSON = st.recursive(st.none() | st.booleans() | INTS | st.floats() | st.text(max_size=12),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=10), c, max_size=3),
                    max_leaves=10)
IDS = st.one_of(INTS, st.text(max_size=8), st.none(), st.floats(), st.booleans(), st.lists(INTS, max_size=2))


def _maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the well-typed value, sometimes any JSON in its place."""
    return st.one_of(value, value, value, JSON)


def _params(ints: st.SearchStrategy[int], wrap: Any) -> dict[str, st.SearchStrategy[Any]]:
    """Params per method: well-typed with ``wrap = lambda s: s`` (positions from ``ints``), or with any JSON in
    places (``wrap = _maybe``)."""
    position = wrap(st.fixed_dictionaries({"line": wrap(ints), "character": wrap(ints)}))
    range_ = wrap(st.fixed_dictionaries({"start": position, "end": position}))
    document = st.fixed_dictionaries({"uri": wrap(URIS)}, optional={"version": wrap(INTS)})
    opened = st.fixed_dictionaries({"uri": URIS, "languageId": st.sampled_from(["python", "rust", "tsx", "cobol"]),
                                    "version": INTS, "text": st.text(max_size=60)})
    changes = st.lists(st.fixed_dictionaries({"text": wrap(st.text(max_size=20))}, optional={"range": range_}),
                       max_size=3)
    return {
        "textDocument/didOpen": st.fixed_dictionaries({"textDocument": wrap(opened)}),
        "textDocument/didChange": st.fixed_dictionaries({"textDocument": document, "contentChanges": wrap(changes)}),
        "textDocument/didClose": st.fixed_dictionaries({"textDocument": document}),
        "textDocument/inlineCompletion": st.fixed_dictionaries({"textDocument": document, "position": position,
                                                                "context": wrap(st.just({"triggerKind": 1}))}),
        "textDocument/completion": st.fixed_dictionaries({"textDocument": document, "position": position}),
        "editEngine/infill": wrap(st.fixed_dictionaries({"textDocument": document}, optional={
            "position": position, "range": range_, "maxTokens": wrap(st.integers(0, 12))})),
        "editEngine/accepted": JSON,
        "editEngine/status": JSON,
        "$/cancelRequest": st.fixed_dictionaries({"id": wrap(IDS)}),
        "workspace/didChangeConfiguration": st.fixed_dictionaries({"settings": JSON}),
    }


GOOD = _params(st.integers(0, 12), lambda strategy: strategy)
PARAMS = _params(INTS, _maybe)
REQUESTS = ("textDocument/inlineCompletion", "textDocument/completion", "editEngine/infill", "editEngine/status")
KNOWN = st.sampled_from(sorted(PARAMS))
METHODS = st.one_of(KNOWN, KNOWN, KNOWN, KNOWN, st.text(max_size=16), st.just("$/unknownNotification"))


@st.composite
def wellformed(draw: st.DrawFn) -> dict[str, Any]:
    """A message that reaches a handler: a known method, an id exactly for requests, params of the right types."""
    method = draw(KNOWN)
    msg = {"jsonrpc": "2.0", "method": method, "params": draw(GOOD[method])}
    if method in REQUESTS:
        msg["id"] = draw(INTS | st.text(max_size=8))
    return msg


@st.composite
def anything(draw: st.DrawFn) -> Any:
    """Mostly what its method expects (a request with an id, a notification without), sometimes not."""
    method = draw(METHODS)
    msg: dict[str, Any] = {"jsonrpc": "2.0" if draw(st.integers(0, 11)) else draw(JSON), "method": method}
    request = method in REQUESTS if draw(st.integers(0, 4)) else draw(st.booleans())
    if request:
        msg["id"] = draw(INTS | st.text(max_size=8) if draw(st.integers(0, 4)) else IDS)
    params = draw(PARAMS[method] if method in PARAMS else JSON)
    if draw(st.integers(0, 9)):
        msg["params"] = params
    if not draw(st.integers(0, 15)):  # a response, a batch (JSON-RPC batches are not LSP), or a bare value
        return draw(st.sampled_from([{"jsonrpc": "2.0", "id": 1, "result": params}, [msg], params]))
    return msg


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """One message on the wire, framed right or wrong."""
    body = json.dumps(draw(wellformed() | anything())).encode()
    kind = draw(st.sampled_from(["ok"] * 12 + ["long", "short", "truncated", "not-json", "no-length", "bad-length",
                                               "huge", "noise", "header-only"]))
    if kind == "long":
        return b"Content-Length: %d\r\n\r\n" % (len(body) + draw(st.integers(1, 200))) + body
    if kind == "short":
        return b"Content-Length: %d\r\n\r\n" % draw(st.integers(0, len(body) - 1)) + body
    if kind == "truncated":
        return b"Content-Length: %d\r\n\r\n" % len(body) + body[:draw(st.integers(0, len(body) - 1))]
    if kind == "not-json":
        junk = draw(st.binary(max_size=40))
        return b"Content-Length: %d\r\n\r\n" % len(junk) + junk
    if kind == "no-length":
        return b"Content-Type: application/vscode-jsonrpc\r\n\r\n" + body
    if kind == "bad-length":
        return b"Content-Length: " + draw(st.sampled_from([b"-5", b"abc", b"1e3", b"", b"0x10"])) + b"\r\n\r\n" + body
    if kind == "huge":
        return b"Content-Length: %d\r\n\r\n" % draw(st.integers(2**28, 2**64)) + body
    if kind == "noise":
        return draw(st.binary(max_size=60))
    if kind == "header-only":
        return b"Content-Length: %d\r\n" % len(body)
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


@pytest.fixture(scope="module")
def fuzzed(tiny_checkpoint: Path) -> Iterator[RawServer]:
    s = RawServer()
    s.initialize({"modelPath": str(tiny_checkpoint)})
    yield s
    s.kill()


def probe(s: RawServer, tiny_checkpoint: Path) -> None:
    """Reset what a batch may have changed (settings, the probe document), then ask for a fill and wait until
    nothing is in flight."""
    good = {"modelPath": str(tiny_checkpoint), "maxTokens": None, "threshold": None, "minCommit": None,
            "spread": None, "floorRamp": None, "streamPasses": False}
    s.notify("workspace/didChangeConfiguration", {"settings": good})
    s.open(PROBE, DOC)
    answer = s.response(s.request("editEngine/infill", {"textDocument": {"uri": PROBE}, "position": {
        "line": 4, "character": 11}, "maxTokens": 3}, f"probe-{uuid.uuid4()}"))
    assert answer.get("result", {}).get("stopReason") in ("complete", "length", "line"), answer
    deadline = time.monotonic() + DEADLINE
    while True:
        status = s.call("editEngine/status")["result"]
        if status["inflight"] == status["modelJobs"] == status["requests"] == 0:
            return
        assert time.monotonic() < deadline, status  # work that never ends, or a count that leaks


# No shrinking: each step of it talks to the server, and a failing batch is readable as it is.
@settings(max_examples=150, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(frames(), min_size=1, max_size=6))
def test_the_server_survives_any_batch_of_messages(fuzzed: RawServer, tiny_checkpoint: Path,
                                                   batch: list[bytes]) -> None:
    fuzzed.write(b"".join(batch))
    probe(fuzzed, tiny_checkpoint)
    assert fuzzed.proc.poll() is None
    log = fuzzed.log_text()
    assert "Traceback" not in log, log[-4000:]
