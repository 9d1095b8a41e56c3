"""Fuzzing a real ``edit-engine serve`` (uvicorn on a loopback port, the tiny model): schemathesis generates
HTTP requests from the server's own ``/openapi.json`` (valid and invalid ones), Hypothesis generates websocket
frames (JSON-RPC messages with wrong shapes and types, and text that is not JSON). Afterwards the server still
answers a good request and its queues are back to zero: nothing stranded, nothing leaked."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)
from websockets.sync.client import ClientConnection, connect

from edit_engine import protocol as rpc
from edit_engine.engine import Engine
from edit_engine.model.network import DiffusionLM
from edit_engine.model.tokenizer import Tokenizer
from edit_engine.serve.app import BackgroundServer, create_app
from edit_engine.serve.settings import Settings

TIMEOUT = 30.0
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@pytest.fixture(scope="module")
def server(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> Iterator[BackgroundServer]:
    s = Settings(port=0, log_level="critical", max_tokens=16, max_document_chars=20_000, max_request_bytes=100_000)
    with BackgroundServer(create_app(s, engine=Engine(tiny_model, tiny_tokenizer)), s) as srv:
        yield srv


@pytest.fixture(scope="module")
def api_schema(server: BackgroundServer) -> Any:
    return schemathesis.openapi.from_url(server.url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@FUZZ
def test_http_api_holds_its_contract(case: Any) -> None:
    """No 5xx for any request, every status and body as documented, invalid data refused."""
    case.call_and_validate(timeout=TIMEOUT, checks=[not_a_server_error, status_code_conformance,
                                                    content_type_conformance, response_schema_conformance,
                                                    negative_data_rejection])


# ---------------------------------------------------------------------------------------------------- websocket
_scalars = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | \
    st.floats(allow_nan=False) | st.text(max_size=40)
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                           max_size=4), max_leaves=12)
_params = st.fixed_dictionaries({}, optional={
    "prefix": st.text(max_size=60) | _scalars, "suffix": st.text(max_size=60) | _scalars,
    "text": st.text(max_size=200) | _scalars, "offset": st.integers(-5, 2**40) | _scalars,
    "position": st.fixed_dictionaries({"line": st.integers(-2, 2**40), "character": st.integers(-2, 2**40)}) | _json,
    "range": _json, "languageId": st.sampled_from(["python", "rust", "go", "cobol", ""]) | _scalars,
    "uri": st.text(max_size=20) | _scalars, "version": st.integers(-(2**70), 2**70) | _scalars,
    "maxTokens": st.integers(-3, 2**40) | _scalars, "stream": _scalars,
    "positionEncoding": st.sampled_from(["utf-8", "utf-16", "utf-32", "utf-7"]) | _scalars,
})
_message = st.fixed_dictionaries({"jsonrpc": st.sampled_from(["2.0", "1.0"]) | _scalars}, optional={
    "id": st.integers(-(2**70), 2**70) | st.text(max_size=10) | _json,
    "method": st.sampled_from([rpc.INFILL, rpc.CANCEL, rpc.ACCEPTED, "initialize", "$/x"]) | _scalars,
    "params": _params | _json,
})
_frame = _message.map(json.dumps) | _json.map(json.dumps) | st.text(max_size=200) | \
    st.binary(max_size=64).map(lambda b: b.decode("latin-1"))


def _good(ws: ClientConnection, rid: str) -> dict[str, Any]:
    """Send a good request; skip other messages (late answers to fuzzed requests) until its answer."""
    ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.INFILL,
                        "params": {"prefix": "x = ", "suffix": "\n", "maxTokens": 2, "stream": False}}))
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        m = json.loads(ws.recv(timeout=TIMEOUT))
        if m.get("id") == rid:
            return m  # type: ignore[no-any-return]
    raise AssertionError("the good request was not answered")


def test_websocket_survives_any_frame(server: BackgroundServer) -> None:
    """Each batch of fuzzed frames is followed by a good request on the same socket, which must be answered."""
    with connect(server.ws_url, max_size=None, open_timeout=TIMEOUT) as ws:
        count = 0

        @FUZZ
        @given(st.lists(_frame, min_size=1, max_size=4))
        def run(frames: list[str]) -> None:
            nonlocal count
            for f in frames:
                ws.send(f)
            count += 1
            assert "result" in _good(ws, f"good-{count}")

        run()


def test_server_is_healthy_and_idle_after_fuzzing(server: BackgroundServer) -> None:
    """After both fuzzers: a good completion is served, and no job is left queued or running."""
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "x = ", "suffix": "\n", "max_tokens": 2},
                   timeout=TIMEOUT)
    assert r.status_code == 200 and isinstance(r.json()["choices"][0]["text"], str)
    deadline = time.monotonic() + TIMEOUT
    while True:
        metrics = httpx.get(server.url + "/metrics", timeout=TIMEOUT).text
        values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in metrics.splitlines()
                  if line.startswith(("edit_engine_queue_depth ", "edit_engine_active_jobs "))}
        if values and all(v == 0 for v in values.values()):
            break
        assert time.monotonic() < deadline, f"jobs left behind: {values}"
        time.sleep(0.02)
    assert httpx.get(server.url + "/healthz", timeout=TIMEOUT).json()["queueDepth"] == 0
