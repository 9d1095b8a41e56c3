"""Next edit and apply through ``edit-engine serve`` run apart from fills and stop when nobody waits: a request
whose client disconnects (HTTP) or cancels it (websocket ``$/cancelRequest``) has its work stopped at its next
step; requests beyond the edit threads' capacity are refused at once; a stuck edit request delays neither a
fill nor ``/healthz``.

A real uvicorn server on a loopback port serves an ``Engine`` whose apply and next edit work until their
``should_stop`` says so, as the engine's budgeted stages do between steps; each records when it began and when
it was stopped, which the tests wait for (bounded by ``TIMEOUT``).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from edit_engine import protocol as rpc
from edit_engine.engine import Engine
from edit_engine.model.network import DiffusionLM
from edit_engine.model.tokenizer import Tokenizer
from edit_engine.serve.app import BackgroundServer, create_app
from edit_engine.serve.settings import Settings

TIMEOUT = 30.0
STEP_S = 0.002  # the stand-in work's step: it looks at should_stop this often


class SlowEngine(Engine):
    """Apply and next edit that work step by step until stopped; ``started``/``stopped`` count them."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.started = threading.Semaphore(0)
        self.stopped = threading.Semaphore(0)
        self._step = threading.Event()  # never set: each step is a bounded wait

    def _work(self, should_stop: Callable[[], bool] | None) -> None:
        assert should_stop is not None, "the server must hand the work a should_stop"
        self.started.release()
        deadline = time.monotonic() + 4 * TIMEOUT
        while not should_stop():
            if time.monotonic() > deadline:
                raise AssertionError("never stopped")
            self._step.wait(STEP_S)
        self.stopped.release()

    def apply(self, original: str, update: str, language: str = "python",
              should_stop: Callable[[], bool] | None = None) -> Any:
        self._work(should_stop)
        return super().apply(original, update, language, should_stop)

    def next_edit(self, *args: Any, should_stop: Callable[[], bool] | None = None, **kw: Any) -> Any:
        self._work(should_stop)
        return None


@pytest.fixture(scope="module")
def engine(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> SlowEngine:
    return SlowEngine(tiny_model, tiny_tokenizer)


@pytest.fixture(scope="module")
def server(engine: SlowEngine) -> Iterator[BackgroundServer]:
    s = Settings(port=0, log_level="warning", max_document_chars=5_000, max_tokens=8, edit_workers=1,
                 max_edit_queue=1)
    with BackgroundServer(create_app(s, engine=engine), s) as srv:
        yield srv


PY = "def f(x):\n    return x\n"
UPDATE = "# ... existing code ...\ndef f(x):\n    return x + 1\n"
APPLY_BODY = {"messages": [{"role": "user", "content": f"<|original_code|>\n{PY}\n<|/original_code|>\n\n"
                                                          f"<|update_snippet|>\n{UPDATE}\n<|/update_snippet|>"}]}


def _raw_post(server: BackgroundServer, path: str, body: dict[str, Any]) -> socket.socket:
    data = json.dumps(body).encode()
    s = socket.create_connection((server.host, server.port), timeout=TIMEOUT)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def test_http_apply_stops_when_its_client_disconnects(server: BackgroundServer, engine: SlowEngine) -> None:
    s = _raw_post(server, "/v1/apply/completions", APPLY_BODY)
    assert engine.started.acquire(timeout=TIMEOUT)
    s.close()
    assert engine.stopped.acquire(timeout=TIMEOUT), "the abandoned request's work went on"


def test_http_next_edit_stops_when_its_client_disconnects(server: BackgroundServer, engine: SlowEngine) -> None:
    content = f"<|current_file_content|>\n{PY}<|/current_file_content|>\n<|edit_diff_history|>\n<|/edit_diff_history|>"
    s = _raw_post(server, "/v1/edit/completions", {"messages": [{"role": "user", "content": content}]})
    assert engine.started.acquire(timeout=TIMEOUT)
    s.close()
    assert engine.stopped.acquire(timeout=TIMEOUT), "the abandoned request's work went on"


@pytest.fixture()
def own_server(engine: SlowEngine) -> Iterator[BackgroundServer]:
    """A server of its own: the shared one's pool may still hold a stopped request of an earlier test (its thread
    ends just after the work says it stopped)."""
    s = Settings(port=0, log_level="warning", max_document_chars=5_000, max_tokens=8, edit_workers=1,
                 max_edit_queue=1)
    with BackgroundServer(create_app(s, engine=engine), s) as srv:
        yield srv


def test_cancelled_websocket_apply_stops_and_a_full_pool_refuses_at_once(own_server: BackgroundServer,
                                                                         engine: SlowEngine) -> None:
    server = own_server
    params = {"original": PY, "update": UPDATE, "languageId": "python"}
    with connect(server.ws_url, open_timeout=TIMEOUT) as ws:
        for rid in (1, 2):  # one edit thread and one waiting place: both admitted
            ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.APPLY, "params": params}))
        assert engine.started.acquire(timeout=TIMEOUT)
        t = time.perf_counter()
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": rpc.APPLY, "params": params}))
        m = json.loads(ws.recv(timeout=TIMEOUT))
        assert m["id"] == 3 and m["error"]["code"] == rpc.SERVER_OVERLOADED, m
        assert m["error"]["data"]["limit"] == "max_edit_queue" and time.perf_counter() - t < 5
        # A fill and /healthz are answered while both edit requests are stuck.
        t = time.perf_counter()
        assert httpx.get(server.url + "/healthz", timeout=TIMEOUT).status_code == 200
        assert time.perf_counter() - t < 0.5
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 4, "method": rpc.INFILL,
                            "params": {"prefix": "def f(x):\n    return ", "suffix": "\n", "maxTokens": 4}}))
        while (m := json.loads(ws.recv(timeout=TIMEOUT))).get("id") != 4:
            pass
        assert "result" in m, m
        for rid in (1, 2):
            ws.send(json.dumps({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": rid}}))
        answers = {}
        while len(answers) < 2:
            m = json.loads(ws.recv(timeout=TIMEOUT))
            if m.get("id") in (1, 2):
                answers[m["id"]] = m
        assert all(a["error"]["code"] == rpc.REQUEST_CANCELLED for a in answers.values()), answers
        assert engine.stopped.acquire(timeout=TIMEOUT)
        # The second one started only when the first was stopped; it was stopped too.
        assert engine.started.acquire(timeout=TIMEOUT) and engine.stopped.acquire(timeout=TIMEOUT)
