"""End-to-end tests of ``edit-engine serve``: a real uvicorn server on an ephemeral loopback port, real
``websockets`` and ``httpx`` clients. Most use the tiny random model (fast); one uses the packaged model.

Tests that need a request to stay in flight hold the scheduler with a ``Gate`` (the ``before_pass`` hook): the
scheduler waits at the gate before every forward pass until the test opens it, so cancellation races are
decided by the test.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from edit_engine import protocol as rpc
from edit_engine.engine import Engine
from edit_engine.model.network import DiffusionLM
from edit_engine.model.tokenizer import Tokenizer
from edit_engine.serve.app import BackgroundServer, create_app
from edit_engine.serve.settings import Settings

TIMEOUT = 30.0  # seconds: every wait in these tests is bounded by it
PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\nprint(add(1, 2))\n"


class Gate:
    """``before_pass`` hook: holds the scheduler before every forward pass until ``open()`` (or while ``free``)."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self.free: Callable[[], bool] = lambda: False  # passes run while this holds

    def __call__(self) -> None:
        if not self.free():
            self._open.wait(TIMEOUT)

    def open(self) -> None:
        self._open.set()

    def until_first_pass(self, server: BackgroundServer) -> None:
        """Let passes run until one has been delivered (the engine's document path holds a pass back one
        forward pass, so the count of forward passes before the first delivery depends on the path)."""
        app: Any = server.server.config.app
        metrics = app.state.service.metrics
        self.free = lambda: metrics.passes.value() < 1


class PoolGate(Gate):
    """``before_pass`` hook that holds only the scheduler's worker pool (a document request's check and repair
    rounds) until ``open()``; the batched passes run. ``held`` is set once the pool has waited at it."""

    def __init__(self) -> None:
        super().__init__()
        self.held = threading.Event()

    def __call__(self) -> None:
        if threading.current_thread().name.startswith("edit-engine-doc"):
            self.held.set()
            self._open.wait(TIMEOUT)


@pytest.fixture(scope="module")
def engine(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> Engine:
    return Engine(tiny_model, tiny_tokenizer)


@contextmanager
def serving(engine: Engine | None, gate: Gate | None = None, **kw: Any) -> Iterator[BackgroundServer]:
    settings = Settings(port=0, log_level="warning", **kw)
    app = create_app(settings, engine=engine, before_pass=gate)
    with BackgroundServer(app, settings) as server:
        try:
            yield server
        finally:
            if gate is not None:
                gate.open()


@pytest.fixture(scope="module")
def server(engine: Engine) -> Iterator[BackgroundServer]:
    with serving(engine) as s:
        yield s


# ---------------------------------------------------------------------------------------------------- helpers
def request(rid: int | str, **params: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.INFILL, "params": params})


def recv(ws: ClientConnection) -> dict[str, Any]:
    msg = json.loads(ws.recv(timeout=TIMEOUT))
    assert isinstance(msg, dict)
    return msg


def until_answer(ws: ClientConnection, rid: int | str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Pass notifications for ``rid`` and then its answer (other requests' messages are skipped: while another
    request is in flight on ``ws``, use ``until_answers``)."""
    return until_answers(ws, [rid])[rid]


def until_answers(ws: ClientConnection, rids: list[int | str | None]) -> dict[int | str | None, tuple[
        list[dict[str, Any]], dict[str, Any]]]:
    """Pass notifications and the answer of each of ``rids``, whichever order the server answers them in
    (requests in flight together may finish in any order, e.g. one's repair rounds on the worker pool outlast
    the next one's whole run); other requests' messages are skipped."""
    passes: dict[int | str | None, list[dict[str, Any]]] = {rid: [] for rid in rids}
    answers: dict[int | str | None, tuple[list[dict[str, Any]], dict[str, Any]]] = {}
    for _ in range(10_000):
        m = recv(ws)
        if m.get("method") == rpc.PASS:
            if m["params"]["requestId"] in passes:
                passes[m["params"]["requestId"]].append(m["params"])
        elif m.get("id") in passes and m.get("id") not in answers:
            answers[m["id"]] = (passes[m["id"]], m)
            if len(answers) == len(rids):
                return answers
    raise AssertionError(f"no answer for {sorted(map(str, set(rids) - set(answers)))}")


def wait_pass(ws: ClientConnection, rid: int | str) -> dict[str, Any]:
    m = recv(ws)
    assert m.get("method") == rpc.PASS and m["params"]["requestId"] == rid, m
    return m["params"]


def metric(server: BackgroundServer, line_start: str, headers: dict[str, str] | None = None) -> float:
    text = httpx.get(server.url + "/metrics", headers=headers, timeout=TIMEOUT).text
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def eventually(check: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    """Wait (bounded) for the server to reach a state it reports in /metrics or /healthz."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        threading.Event().wait(0.02)


def sse_events(lines: Iterator[str]) -> list[str]:
    out = []
    for line in lines:
        if line.startswith("data: "):
            out.append(line[len("data: ") :])
    return out


# ---------------------------------------------------------------------------------------------------- websocket
def test_ws_stream_ends_with_final_pass_equal_to_result(server: BackgroundServer, engine: Engine) -> None:
    with connect(server.ws_url) as ws:
        ws.send(request(1, prefix=PREFIX, suffix=SUFFIX, languageId="python", maxTokens=24))
        passes, answer = until_answer(ws, 1)
    res = answer["result"]
    assert passes, "no pass was streamed"
    assert [p["passIndex"] for p in passes] == list(range(len(passes)))
    assert passes[-1]["final"] and not any(p["final"] for p in passes[:-1])
    assert passes[-1]["text"] == res["text"]
    assert res["passes"] == len(passes) and res["nfe"] >= 1 and res["stopReason"] in ("complete", "length", "line")
    assert passes[-1]["masked"] == 0
    # The batched scheduler computes what the engine computes alone.
    assert res["text"] == engine.infill(PREFIX, SUFFIX, max_tokens=24).text


def test_ws_document_request_has_range_in_the_requested_encoding(server: BackgroundServer) -> None:
    doc = "s = '😀'\nx = \n"
    with connect(server.ws_url) as ws:
        ws.send(request("a", text=doc, position={"line": 1, "character": 4}, uri="file:///t.py", version=3))
        passes, answer = until_answer(ws, "a")
        assert answer["result"]["range"] == rpc.lsp_range((1, 4), (1, 4))
        assert answer["result"]["version"] == 3
        assert all(p["range"] == answer["result"]["range"] and p["uri"] == "file:///t.py" for p in passes)
        # the emoji is 2 UTF-16 units, 4 UTF-8 bytes; a range on line 0 after it differs per encoding
        ws.send(request("b", text=doc, range={"start": {"line": 0, "character": 9}, "end": {"line": 0, "character": 9}},
                        positionEncoding="utf-8", stream=False))
        passes, answer = until_answer(ws, "b")
        assert passes == []
        assert answer["result"]["range"]["start"] == {"line": 0, "character": 9}


def test_ws_several_requests_in_flight_on_one_connection(server: BackgroundServer) -> None:
    prompts = [(f"x{i} = {i}\ndef f{i}(", "):\n    pass\n") for i in range(6)]
    with connect(server.ws_url) as ws:
        for i, (p, s) in enumerate(prompts):
            ws.send(request(i, prefix=p, suffix=s, maxTokens=16))
        results: dict[int, str] = {}
        finals: dict[int, str] = {}
        for _ in range(10_000):
            m = recv(ws)
            if m.get("method") == rpc.PASS and m["params"]["final"]:
                finals[m["params"]["requestId"]] = m["params"]["text"]
            elif "id" in m:
                results[m["id"]] = m["result"]["text"]
                if len(results) == len(prompts):
                    break
    assert finals == results and set(results) == set(range(len(prompts)))


def test_ws_bad_frames_get_errors_and_the_connection_stays_usable(engine: Engine) -> None:
    with serving(engine, max_request_bytes=2000, max_tokens=32) as srv, connect(srv.ws_url) as ws:
        cases: list[tuple[str | bytes, int, Any]] = [
            ("{not json", rpc.PARSE_ERROR, None),
            (b"\xff\xfe", rpc.PARSE_ERROR, None),
            ("[1, 2]", rpc.INVALID_REQUEST, None),
            ('"hello"', rpc.INVALID_REQUEST, None),
            (json.dumps({"jsonrpc": "1.0", "id": 7, "method": rpc.INFILL}), rpc.INVALID_REQUEST, 7),
            (json.dumps({"jsonrpc": "2.0", "id": 8, "method": 5}), rpc.INVALID_REQUEST, 8),
            (json.dumps({"jsonrpc": "2.0", "id": 18}), rpc.INVALID_REQUEST, 18),
            (json.dumps({"jsonrpc": "2.0", "id": 19, "method": rpc.INFILL, "extra": 1}), rpc.INVALID_REQUEST, 19),
            (json.dumps({"jsonrpc": "2.0", "id": 9, "method": "nope/nope"}), rpc.METHOD_NOT_FOUND, 9),
            (request(10, prefix=5, suffix=""), rpc.INVALID_PARAMS, 10),
            (request(11, prefix="a", maxTokens="5"), rpc.INVALID_PARAMS, 11),
            (request(12, text="abc"), rpc.INVALID_PARAMS, 12),
            (request(13, text="abc", offset=99), rpc.INVALID_PARAMS, 13),
            (request(14, suffix="x"), rpc.INVALID_PARAMS, 14),
            (json.dumps({"jsonrpc": "2.0", "id": 15, "method": rpc.INFILL, "params": [1]}), rpc.INVALID_PARAMS, 15),
            (request(16, prefix="a", maxTokens=33), rpc.SERVER_OVERLOADED, 16),
            (request(17, prefix="a" * 3000), rpc.SERVER_OVERLOADED, None),
        ]
        for frame, code, rid in cases:
            ws.send(frame)
            m = recv(ws)
            assert m["jsonrpc"] == "2.0" and m["id"] == rid, (frame, m)
            assert m["error"]["code"] == code, (frame, m)
            assert m["error"]["message"]
        # notifications are never answered; the next request is
        ws.send(json.dumps({"jsonrpc": "2.0", "method": "$/unknown"}))
        ws.send(json.dumps({"jsonrpc": "2.0", "method": rpc.CANCEL, "params": {"id": 12345}}))
        ws.send(request(99, prefix=PREFIX, suffix=SUFFIX, maxTokens=8))
        _, answer = until_answer(ws, 99)
        assert "result" in answer and answer["id"] == 99
        # a frame beyond 4x the limit closes the socket (uvicorn's ws_max_size); the server keeps serving
        ws.send("x" * 9000)
        with pytest.raises(Exception):  # noqa: B017  (closed: ConnectionClosed or a timeout on recv)
            recv(ws)
    with serving(engine) as srv, connect(srv.ws_url) as ws2:
        ws2.send(request(1, prefix="a", maxTokens=4))
        assert "result" in until_answer(ws2, 1)[1]


def test_ws_cancel_request_stops_work(engine: Engine) -> None:
    gate = Gate()
    with serving(engine, gate) as srv, connect(srv.ws_url) as ws:
        gate.until_first_pass(srv)
        ws.send(request(1, prefix=PREFIX, suffix=SUFFIX, maxTokens=64, uri="file:///a.py"))
        first = wait_pass(ws, 1)
        assert not first["final"]
        ws.send(json.dumps({"jsonrpc": "2.0", "method": rpc.CANCEL, "params": {"id": 1}}))
        m = recv(ws)
        assert m["id"] == 1 and m["error"]["code"] == rpc.REQUEST_CANCELLED
        gate.open()
        eventually(lambda: metric(srv, 'edit_engine_jobs_retired_total{reason="cancelled"}') == 1, "retirement")
        assert metric(srv, 'edit_engine_cancellations_total{reason="client"}') == 1
        assert metric(srv, "edit_engine_active_jobs") == 0
        assert metric(srv, "edit_engine_passes_total") < 64  # it did not run to the end
        # the connection still serves
        ws.send(request(2, prefix=PREFIX, suffix=SUFFIX, maxTokens=8))
        assert "result" in until_answer(ws, 2)[1]


def test_ws_newer_request_for_the_same_uri_cancels_the_older(engine: Engine) -> None:
    gate = Gate()
    with serving(engine, gate) as srv, connect(srv.ws_url) as ws:
        gate.until_first_pass(srv)
        ws.send(request(1, text="x = 1\ny = ", offset=10, uri="file:///a.py", version=1, maxTokens=64))
        wait_pass(ws, 1)
        ws.send(request(2, text="x = 1\ny = 2\nz = ", offset=16, uri="file:///a.py", version=2, maxTokens=8))
        m = recv(ws)
        assert m["id"] == 1 and m["error"]["code"] == rpc.REQUEST_CANCELLED
        gate.open()
        passes, answer = until_answer(ws, 2)
        assert answer["result"]["version"] == 2 and passes[-1]["text"] == answer["result"]["text"]
        assert metric(srv, 'edit_engine_cancellations_total{reason="superseded"}') == 1


def test_ws_disconnect_cancels_its_work(engine: Engine) -> None:
    gate = Gate()
    with serving(engine, gate) as srv:
        with connect(srv.ws_url) as ws:
            gate.until_first_pass(srv)
            ws.send(request(1, prefix=PREFIX, suffix=SUFFIX, maxTokens=64))
            ws.send(request(2, prefix="import os\n", suffix="", maxTokens=64))
            assert recv(ws)["method"] == rpc.PASS  # work has started
        eventually(lambda: metric(srv, 'edit_engine_cancellations_total{reason="disconnect"}') == 2, "cancellation")
        gate.open()
        eventually(lambda: metric(srv, 'edit_engine_jobs_retired_total{reason="cancelled"}') == 2, "retirement")
        assert metric(srv, "edit_engine_websocket_connections") == 0
        assert metric(srv, 'edit_engine_jobs_retired_total{reason="done"}') == 0


def test_limits_in_flight_per_connection_and_queue_depth(engine: Engine) -> None:
    gate = Gate()
    with serving(engine, gate, max_batch=1, max_queue=1, max_inflight_per_connection=2, retry_after_s=3) as srv, \
            connect(srv.ws_url) as ws:
        ws.send(request(1, prefix="a = ", maxTokens=8))  # admitted, held by the gate
        eventually(lambda: metric(srv, "edit_engine_active_jobs") == 1, "admission")
        ws.send(request(2, prefix="b = ", maxTokens=8))  # waits in the queue
        eventually(lambda: httpx.get(srv.url + "/healthz").json()["queueDepth"] == 1, "queueing")
        ws.send(request(3, prefix="c = ", maxTokens=8))  # over the per-connection limit
        m = recv(ws)
        assert m["id"] == 3 and m["error"]["code"] == rpc.SERVER_OVERLOADED
        assert m["error"]["data"]["limit"] == "max_inflight_per_connection"
        with connect(srv.ws_url) as ws2:  # another connection: the queue is full
            ws2.send(request(1, prefix="d = ", maxTokens=8))
            m = recv(ws2)
            assert m["error"]["code"] == rpc.SERVER_OVERLOADED and m["error"]["data"]["limit"] == "queue"
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": "e = ", "max_tokens": 4}, timeout=TIMEOUT)
        assert r.status_code == 503 and r.headers["retry-after"] == "3"
        assert r.json()["error"]["code"] == "queue"
        gate.open()
        for _passes, answer in until_answers(ws, [1, 2]).values():
            assert "result" in answer
        assert metric(srv, 'edit_engine_requests_total{outcome="overloaded",route="ws"}') == 2


# ---------------------------------------------------------------------------------------------------- HTTP
def test_http_completion_shape_and_fim_alias(server: BackgroundServer, engine: Engine) -> None:
    body = {"model": engine.name, "prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 16, "temperature": 0}
    with httpx.Client(base_url=server.url, timeout=TIMEOUT) as c:
        a = c.post("/v1/completions", json=body)
        b = c.post("/v1/fim/completions", json=body)
        models = c.get("/v1/models").json()
        health = c.get("/healthz").json()
    assert a.status_code == 200 and b.status_code == 200
    ja = a.json()
    assert ja["object"] == "text_completion" and ja["id"].startswith("cmpl-") and isinstance(ja["created"], int)
    assert ja["model"] == engine.name == models["data"][0]["id"]
    ch = ja["choices"][0]
    assert ch["index"] == 0 and ch["finish_reason"] in ("stop", "length")
    assert ch["text"] == b.json()["choices"][0]["text"] == engine.infill(PREFIX, SUFFIX, max_tokens=16).text
    u = ja["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and u["prompt_tokens"] > 0
    assert health["status"] == "ok"


def test_http_completion_heals_a_partial_word(packaged_engine: Engine) -> None:
    """A prompt that ends inside a word is token-healed by the real server as by ``Engine.infill``: the
    completion continues the word (``sor`` -> ``ted(...)``), never repeats it, and an append-only stream's
    deltas add up to the same text."""
    body = {"prompt": "def f(xs):\n    ys = sor", "suffix": "\n    return ys\n", "max_tokens": 16}
    with serving(packaged_engine) as srv, httpx.Client(base_url=srv.url, timeout=TIMEOUT) as c:
        text = c.post("/v1/completions", json=body).json()["choices"][0]["text"]
        with c.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            events = sse_events(r.iter_lines())
    assert text == packaged_engine.infill(body["prompt"], body["suffix"], max_tokens=16).text
    assert text and not text.startswith(("sor", " ")) and ("sor" + text).startswith("sort")
    assert "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]) == text


@pytest.mark.parametrize("diffusing", [True, False])
def test_http_sse_stream(server: BackgroundServer, diffusing: bool) -> None:
    body = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 24, "stream": True, "diffusing": diffusing}
    with httpx.Client(base_url=server.url, timeout=TIMEOUT) as c:
        full = c.post("/v1/completions", json={**body, "stream": False}).json()["choices"][0]
        with c.stream("POST", "/v1/completions", json=body) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            events = sse_events(r.iter_lines())
    assert events[-1] == "[DONE]" and "[DONE]" not in events[:-1]
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks and all(ch["object"] == "text_completion" for ch in chunks)
    texts = [ch["choices"][0]["text"] for ch in chunks]
    assert chunks[-1]["choices"][0]["finish_reason"] == full["finish_reason"]
    assert all(ch["choices"][0]["finish_reason"] is None for ch in chunks[:-1])
    if diffusing:  # every chunk is the whole span: the last one is the result
        assert texts[-1] == full["text"]
    else:  # appended deltas add up to the result
        assert "".join(texts) == full["text"]


def test_http_errors(engine: Engine) -> None:
    with serving(engine, max_request_bytes=4000, max_tokens=32) as srv, \
            httpx.Client(base_url=srv.url, timeout=TIMEOUT) as c:
        cases = [
            ({"prompt": 5}, 400),
            ({"prompt": "a", "max_tokens": "7"}, 400),
            ({"prompt": "a", "stream": "yes"}, 400),
            ({"prompt": "a", "max_tokens": 0}, 400),
            ({"prompt": ["a", "b"]}, 400),
            ({"prompt": "a", "max_tokens": 33}, 413),
            ({"prompt": "a" * 5000}, 413),
        ]
        for body, status in cases:
            r = c.post("/v1/completions", json=body)
            assert r.status_code == status, (body, r.text)
            assert r.json()["error"]["message"]
        r = c.post("/v1/completions", content=b"{oops", headers={"content-type": "application/json"})
        assert r.status_code == 400
        ok = c.post("/v1/completions", json={"prompt": "a = ", "max_tokens": 4})
        assert ok.status_code == 200


def test_sse_disconnect_cancels_the_job(engine: Engine) -> None:
    gate = Gate()
    with serving(engine, gate) as srv, httpx.Client(base_url=srv.url, timeout=TIMEOUT) as c:
        gate.until_first_pass(srv)
        body = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 64, "stream": True, "diffusing": True}
        with c.stream("POST", "/v1/completions", json=body) as r:
            first = next(line for line in r.iter_lines() if line.startswith("data: "))
            assert json.loads(first[6:])["choices"][0]["finish_reason"] is None
        gate.open()  # the next chunk's write fails: the server sees the disconnect
        eventually(lambda: metric(srv, 'edit_engine_jobs_retired_total{reason="cancelled"}') == 1, "retirement")
        assert metric(srv, 'edit_engine_cancellations_total{reason="disconnect"}') == 1


# ---------------------------------------------------------------------------------------------------- auth, CLI
def test_api_key_is_enforced(engine: Engine) -> None:
    key = "s3cret"
    auth = {"Authorization": f"Bearer {key}"}
    with serving(engine, api_key=key) as srv, httpx.Client(base_url=srv.url, timeout=TIMEOUT) as c:
        assert c.get("/healthz").status_code == 200
        for path in ("/v1/models", "/metrics"):
            assert c.get(path).status_code == 401
            assert c.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert c.get(path, headers=auth).status_code == 200
        r = c.post("/v1/completions", json={"prompt": "a"})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert c.post("/v1/completions", json={"prompt": "a", "max_tokens": 4}, headers=auth).status_code == 200
        with pytest.raises(InvalidStatus) as e:
            connect(srv.ws_url, open_timeout=TIMEOUT)
        assert e.value.response.status_code == 403
        with connect(srv.ws_url, additional_headers=auth, open_timeout=TIMEOUT) as ws:
            ws.send(request(1, prefix="a", maxTokens=4))
            assert "result" in until_answer(ws, 1)[1]


def test_cli_refuses_a_public_address_without_a_key(capsys: pytest.CaptureFixture[str]) -> None:
    from edit_engine.cli.main import main

    assert main(["serve", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "refusing to bind '0.0.0.0' without an API key" in err and "--api-key" in err


def test_settings_flags_over_environment_over_defaults() -> None:
    from edit_engine.cli.main import build_parser

    env = {"EDIT_ENGINE_PORT": "9000", "EDIT_ENGINE_API_KEY": "k", "EDIT_ENGINE_MAX_BATCH": "4"}
    s = Settings.resolve(build_parser().parse_args(["serve", "--port", "9100"]), env)
    assert (s.port, s.api_key, s.max_batch, s.host) == (9100, "k", 4, "127.0.0.1")
    with pytest.raises(ValueError, match="EDIT_ENGINE_PORT"):
        Settings.resolve(None, {"EDIT_ENGINE_PORT": "eighty"})
    Settings(host="10.0.0.1", api_key="k").check_bind()  # a key makes a public address acceptable
    Settings(host="::1").check_bind()


@pytest.mark.parametrize("dtype", ["", "bf16"])
def test_server_loads_a_checkpoint_from_settings(tiny_checkpoint: Any, dtype: str) -> None:
    """From ``--model`` (and ``--dtype``: the batched scheduler's caches take the model's dtype)."""
    with serving(None, model=str(tiny_checkpoint), dtype=dtype) as srv, connect(srv.ws_url) as ws:
        assert httpx.get(srv.url + "/healthz").json()["dtype"] == ("bfloat16" if dtype else "float32")
        ws.send(request(1, text="def f():\n    ", offset=13, maxTokens=8))
        passes, answer = until_answer(ws, 1)
        assert passes[-1]["final"] and passes[-1]["text"] == answer["result"]["text"]
        ws.send(request(2, prefix="def f():\n    return ", suffix="\n", maxTokens=8))
        passes, answer = until_answer(ws, 2)
        assert passes[-1]["final"] and passes[-1]["text"] == answer["result"]["text"]


def test_openai_client_streams_diffusing_snapshots(server: BackgroundServer) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=TIMEOUT)
    stream = client.completions.create(model="edit-engine", prompt=PREFIX, suffix=SUFFIX, max_tokens=24,
                                       extra_body={"diffusing": True}, stream=True)
    chunks = [ch.choices[0] for ch in stream]
    whole = client.completions.create(model="edit-engine", prompt=PREFIX, suffix=SUFFIX, max_tokens=24)
    assert chunks and chunks[-1].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].text == whole.choices[0].text


@pytest.mark.slow
def test_packaged_model_end_to_end() -> None:
    from edit_engine.model import checkpoint

    if not (checkpoint.DEFAULT_DIR / "config.json").exists():
        pytest.skip("no packaged model at edit_engine/models/default yet")
    with serving(None) as srv, connect(srv.ws_url) as ws:
        ws.send(request(1, text="def square(x):\n    return \n", position={"line": 1, "character": 11}))
        passes, answer = until_answer(ws, 1)
        assert passes[-1]["final"] and passes[-1]["text"] == answer["result"]["text"]
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": "def square(x):\n    return ", "suffix": "\n",
                                                           "stream": True, "diffusing": True}, timeout=TIMEOUT)
        assert sse_events(iter(r.text.splitlines()))[-1] == "[DONE]"


def test_cli_serve_process_answers(tiny_checkpoint: Any) -> None:
    """``edit-engine serve`` as a real process: flags reach the server, /healthz and a completion answer."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a free loopback port for the child (released just before it binds)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = "import sys; from edit_engine.cli.main import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "EDIT_ENGINE_MAX_TOKENS": "16", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", code, "serve", "--port", str(port), "--model",
                             str(tiny_checkpoint), "--threads", "1", "--log-level", "warning"], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            assert proc.poll() is None, "the server exited"
            try:
                return httpx.get(url + "/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        eventually(up, "the server to listen", timeout=180)  # a cold start imports torch and FastAPI
        r = httpx.post(url + "/v1/completions", json={"prompt": "a = ", "max_tokens": 17}, timeout=TIMEOUT)
        assert r.status_code == 413  # the limit came from EDIT_ENGINE_MAX_TOKENS
        r = httpx.post(url + "/v1/completions", json={"prompt": "a = ", "max_tokens": 8}, timeout=TIMEOUT)
        assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    finally:
        proc.terminate()
        proc.wait(timeout=TIMEOUT)


# ---------------------------------------------------------------------------------------------------- documents
# Documents whose fills with the tiny model take the repair path (the first two, and the selection) or none
# (comment, plain text); see tests/test_serve_batching.py.
DOCS: list[dict[str, Any]] = [
    {"text": "def f(x):\n    return \n", "offset": 20},
    {"text": "x = [1, 2, \ny = 3\n", "position": {"line": 0, "character": 11}},
    {"text": "# a note: \nx = 1\n", "offset": 10},
    {"text": "some words \nmore\n", "offset": 11, "languageId": "plaintext"},
    {"text": "a = 1\nb = 2\nc = 3\n", "range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 5}}},
]


def _engine_passes(engine: Engine, params: dict[str, Any], max_tokens: int) -> list[Any]:
    """What the engine alone streams for a document request (offsets from the params, UTF-16 = code points
    for these ASCII documents)."""
    text = params["text"]
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    if "offset" in params:
        offset, selection = params["offset"], None
    elif "position" in params:
        offset, selection = starts[params["position"]["line"]] + params["position"]["character"], None
    else:
        r = params["range"]
        selection = (starts[r["start"]["line"]] + r["start"]["character"], starts[r["end"]["line"]] + r["end"]["character"])
        offset = selection[0]
    return list(engine.stream_complete(text, offset, params.get("languageId", "python"), selection, max_tokens))


def _lsp_range(text: str, start: int, end: int) -> dict[str, Any]:
    from edit_engine.syntax import positions

    return rpc.lsp_range(positions.offset_to_position(text, start, "utf-16"),
                         positions.offset_to_position(text, end, "utf-16"))


def test_concurrent_document_requests_are_batched_and_equal_the_engine(engine: Engine) -> None:
    """Document requests from several clients share forward passes (the batch-size histogram shows passes
    over more than one request), and each stream is the engine's own: every pass (text, range, masked, final)
    and the response (text, range, passes, nfe, stopReason) equal ``Engine.stream_complete``'s.

    A batched row computes its logits up to float summation order (tests/test_serve_batching.py); these fills
    came out identical in every one of 25 random mixes of batch sizes and companions tried while writing this."""
    gate = Gate()
    with serving(engine, gate) as srv, ExitStack() as stack:
        sockets = [stack.enter_context(connect(srv.ws_url, open_timeout=TIMEOUT)) for _ in DOCS]
        for i, (ws, params) in enumerate(zip(sockets, DOCS, strict=True)):
            ws.send(request(i, maxTokens=24, uri=f"file:///doc{i}.py", version=i, **params))
        # all admitted or waiting while the gate holds the first forward pass: whoever waits joins the batch at
        # the next pass boundary
        eventually(lambda: metric(srv, "edit_engine_active_jobs")
                   + httpx.get(srv.url + "/healthz").json()["queueDepth"] == len(DOCS), "queueing")
        gate.open()
        answers = [until_answer(ws, i) for i, ws in enumerate(sockets)]
        shared = metric(srv, "edit_engine_batch_size_count") - metric(srv, 'edit_engine_batch_size_bucket{le="1"}')
        assert shared > 0, "no forward pass was shared"
        assert metric(srv, 'edit_engine_jobs_retired_total{reason="done"}') == len(DOCS)
        assert metric(srv, "edit_engine_active_jobs") == 0
    repaired = 0
    for params, (passes, answer) in zip(DOCS, answers, strict=True):
        want = _engine_passes(engine, params, 24)
        text = params["text"]
        assert [(p["passIndex"], p["text"], p["masked"], p["final"], p["range"]) for p in passes] == \
               [(w.index, w.text, w.masked, w.final, _lsp_range(text, w.start, w.end)) for w in want], params
        res = answer["result"]
        last = want[-1]
        assert (res["text"], res["range"], res["passes"], res["nfe"], res["stopReason"]) == \
               (last.text, _lsp_range(text, last.start, last.end), last.index + 1, last.nfe, last.stop_reason)
        repaired += last.nfe > last.index + 1
    assert repaired >= 2  # some went through the check and the repair rounds after their batched passes


@pytest.mark.parametrize("how", ["cancel", "disconnect"])
@pytest.mark.parametrize("phase", ["batched", "repair"])
def test_document_request_cancel_and_disconnect_stop_work(engine: Engine, phase: str, how: str) -> None:
    """Cancelled (``$/cancelRequest``) or disconnected while its passes run in the batch, or while its repair
    rounds run on the worker pool: the work stops before the next forward pass, no pass follows."""
    params = DOCS[0]
    want = _engine_passes(engine, params, 24)
    # batched: held after the first pass; repair: after the first round's last pass (delivered by the check)
    held = 1 if phase == "batched" else next(i for i, w in enumerate(want) if w.masked == 0 and not w.final) + 1
    assert held < len(want) - 1
    gate = Gate()
    with serving(engine, gate) as srv:
        app: Any = srv.server.config.app
        metrics = app.state.service.metrics
        gate.free = lambda: metrics.passes.value() < held
        with connect(srv.ws_url, open_timeout=TIMEOUT) as ws:
            ws.send(request(1, maxTokens=24, uri="file:///c.py", **params))
            assert [wait_pass(ws, 1)["passIndex"] for _ in range(held)] == list(range(held))
            if how == "cancel":
                ws.send(json.dumps({"jsonrpc": "2.0", "method": rpc.CANCEL, "params": {"id": 1}}))
                m = recv(ws)
                assert m["id"] == 1 and m["error"]["code"] == rpc.REQUEST_CANCELLED
        reason = "client" if how == "cancel" else "disconnect"
        eventually(lambda: metric(srv, f'edit_engine_cancellations_total{{reason="{reason}"}}') == 1, "cancellation")
        gate.open()
        eventually(lambda: metric(srv, 'edit_engine_jobs_retired_total{reason="cancelled"}') == 1, "retirement")
        assert metric(srv, 'edit_engine_jobs_retired_total{reason="done"}') == 0
        assert metric(srv, "edit_engine_passes_total") == held  # nothing ran after the cancellation
        assert metric(srv, "edit_engine_active_jobs") == 0


def test_requests_on_one_connection_are_answered_in_any_order(engine: Engine,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A document request's check and repair rounds run on the worker pool, beside the batch, so a request sent
    after it may be answered first; ``until_answers`` takes the answers in either order. Forced here: the pool
    waits until the later request is done."""
    pool = PoolGate()
    with serving(engine, pool) as srv, connect(srv.ws_url, open_timeout=TIMEOUT) as ws:
        app: Any = srv.server.config.app
        retired = app.state.service.metrics.retired
        inc = retired.inc

        def counted(amount: float = 1.0, **labels: str) -> None:
            inc(amount, **labels)
            if labels.get("reason") == "done":  # request 2 (request 1 is held on the pool)
                pool.open()

        monkeypatch.setattr(retired, "inc", counted)
        ws.send(request(1, maxTokens=24, **DOCS[0]))  # its fill breaks the parse: repair rounds on the pool
        assert pool.held.wait(TIMEOUT), "request 1 did not reach its check on the worker pool"
        ws.send(request(2, prefix=PREFIX, suffix=SUFFIX, maxTokens=8))
        answers = until_answers(ws, [1, 2])
    assert list(answers) == [2, 1]  # in the order the server answered
    for passes, answer in answers.values():
        assert passes[-1]["final"] and passes[-1]["text"] == answer["result"]["text"]
    assert answers[1][1]["result"]["nfe"] > answers[1][1]["result"]["passes"]  # it went through a repair round


def test_document_requests_answer_limit_errors(engine: Engine) -> None:
    gate = Gate()
    with serving(engine, gate, max_batch=1, max_queue=1, max_document_chars=200, max_tokens=32) as srv, \
            connect(srv.ws_url, open_timeout=TIMEOUT) as ws:
        cases: list[tuple[int, dict[str, Any], int, str | None]] = [
            (1, {"text": "x" * 201, "offset": 0}, rpc.SERVER_OVERLOADED, "max_document_chars"),
            (2, {"text": "a = ", "offset": 4, "maxTokens": 33}, rpc.SERVER_OVERLOADED, "max_tokens"),
            (3, {"text": "a = ", "offset": 5}, rpc.INVALID_PARAMS, None),
            (4, {"text": "a = ", "languageId": "python"}, rpc.INVALID_PARAMS, None),  # no position
        ]
        for rid, params, code, limit in cases:
            ws.send(request(rid, **params))
            m = recv(ws)
            assert m["id"] == rid and m["error"]["code"] == code, m
            assert (m["error"].get("data") or {}).get("limit") == limit, m
        ws.send(request(5, text="a = ", position={"line": 0, "character": 4}, maxTokens=8))  # admitted, held
        eventually(lambda: metric(srv, "edit_engine_active_jobs") == 1, "admission")
        ws.send(request(6, text="b = ", offset=4, maxTokens=8))  # waits for the batch slot
        eventually(lambda: httpx.get(srv.url + "/healthz").json()["queueDepth"] == 1, "queueing")
        ws.send(request(7, text="c = ", offset=4, maxTokens=8))  # the queue is full
        m = recv(ws)
        assert m["id"] == 7 and m["error"]["code"] == rpc.SERVER_OVERLOADED and m["error"]["data"]["limit"] == "queue"
        gate.open()
        # 5 and 6 may be answered in either order: 5's check and repair rounds run on the worker pool beside
        # 6's batched passes
        for passes, answer in until_answers(ws, [5, 6]).values():
            assert passes[-1]["final"] and passes[-1]["text"] == answer["result"]["text"]


# ---------------------------------------------------------------------------------------------------- failures
def _post_together(url: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    """POST every body to /v1/completions at once (one thread each); each answer waits at most TIMEOUT."""
    out: list[httpx.Response | BaseException | None] = [None] * len(bodies)

    def post(i: int) -> None:
        try:
            out[i] = httpx.post(url + "/v1/completions", json=bodies[i], timeout=TIMEOUT)
        except BaseException as e:  # a request the server never answers times out here
            out[i] = e

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(r, httpx.Response) for r in out), out
    return out  # type: ignore[return-value]


def test_a_seed_out_of_range_is_refused_and_strands_nobody(engine: Engine) -> None:
    """A seed no generator takes (>= 2**64) with sampling on is a 400 in the OpenAI error shape, before it is
    queued; a request sent with it is answered as if it were alone, and the server then shuts down at once."""
    good = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 8, "temperature": 0.5, "seed": 3}
    with serving(engine) as srv:
        bad, ok = _post_together(srv.url, [{**good, "seed": 2**64}, good])
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
        assert "seed" in bad.json()["error"]["message"]
        assert ok.status_code == 200 and ok.json()["choices"][0]["text"] is not None
        assert httpx.get(srv.url + "/healthz", timeout=TIMEOUT).json()["status"] == "ok"
        t0 = time.monotonic()
    assert time.monotonic() - t0 < TIMEOUT  # nothing left waiting: shutdown did not hang


def test_a_job_that_fails_at_admission_fails_alone(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever breaks while the scheduler admits a job (here: its denoising state refuses to start) answers
    that request with a 500 in the OpenAI error shape; the requests admitted with it and after it are served."""
    from edit_engine.serve import batching

    real = batching.DenoiseState

    def state(*a: Any, **kw: Any) -> Any:
        if kw.get("seed") == 7:
            raise RuntimeError("refused at admission")
        return real(*a, **kw)

    monkeypatch.setattr(batching, "DenoiseState", state)
    body = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 8, "seed": 1}
    with serving(engine) as srv:
        answers = _post_together(srv.url, [{**body, "seed": 7}, body, {**body, "seed": 2}])
        after = httpx.post(srv.url + "/v1/completions", json=body, timeout=TIMEOUT)
    failed, *served = answers
    assert failed.status_code == 500 and "refused at admission" in failed.json()["error"]["message"]
    assert failed.json()["error"]["type"] == "server_error"
    assert all(r.status_code == 200 for r in [*served, after])


def test_bad_text_and_unknown_paths_answer_in_the_error_shape(server: BackgroundServer) -> None:
    """A prompt holding a lone surrogate is a 400, not a plain-text 500; an unknown path is a 404 and a wrong
    method a 405, each in the OpenAI error shape ({"error": {"message", "type", ...}}), not {"detail": ...}."""
    with httpx.Client(base_url=server.url, timeout=TIMEOUT) as c:
        raw = '{"prompt": "x = \\ud800", "suffix": "\\n", "max_tokens": 4}'
        bad = c.post("/v1/completions", content=raw, headers={"Content-Type": "application/json"})
        missing = c.get("/v1/nothing-here")
        method = c.get("/v1/completions")
        ok = c.post("/v1/completions", json={"prompt": "x = ", "suffix": "\n", "max_tokens": 4})
    assert bad.status_code == 400 and "surrogate" in bad.json()["error"]["message"]
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "invalid_request_error"
    assert method.status_code == 405 and "GET /v1/completions" in method.json()["error"]["message"]
    assert "detail" not in missing.json() and "detail" not in method.json()
    assert ok.status_code == 200


def _raw_http(srv: BackgroundServer, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send raw bytes to the server; return the answer's status code and its bytes (read until it closes or
    TIMEOUT passes)."""
    import socket

    with socket.create_connection((srv.host, srv.port), timeout=TIMEOUT) as s:
        s.sendall(head + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < data.find(b"\r\n\r\n") + 4 + 1:
            try:
                chunk = s.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1]), data


def test_the_key_is_checked_before_the_body_is_read(engine: Engine) -> None:
    """With an API key, a request without it is answered 401 from its headers alone: a chunked body that never
    comes, or bad JSON, gets 401 (never 400 or a wait for the body)."""
    with serving(engine, api_key="k") as srv:
        status, _ = _raw_http(srv, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                   b"Transfer-Encoding: chunked\r\n\r\n")
        assert status == 401
        bad_json = httpx.post(srv.url + "/v1/completions", content=b"{not json", timeout=TIMEOUT)
        assert bad_json.status_code == 401


def test_a_body_longer_than_its_headers_said_is_cut_off() -> None:
    """The body guard counts the bytes that arrive, whatever Content-Length claimed (a framing the HTTP parser
    let through): past the limit the request is answered 413 and the app never gets more than the limit."""
    import asyncio

    from edit_engine.serve.guard import Guard

    seen: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        total = 0
        while True:
            m = await receive()
            total += len(m.get("body", b""))
            seen.append(total)
            if not m.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"read"})

    chunks = [{"type": "http.request", "body": b"a" * 600, "more_body": i < 4} for i in range(5)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return chunks.pop(0)

    async def send(m: dict[str, Any]) -> None:
        sent.append(m)

    scope = {"type": "http", "method": "POST", "path": "/v1/completions",
             "headers": [(b"content-length", b"100"), (b"host", b"127.0.0.1:8765")]}
    asyncio.run(Guard(app, limit=1000)(scope, receive, send))
    assert sent[0]["status"] == 413 and max(seen) <= 1000
