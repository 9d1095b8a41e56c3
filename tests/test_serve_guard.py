"""What a real ``edit-engine serve`` (uvicorn on a loopback port) does with clients that are careless, slow or
hostile: foreign Host and Origin headers, slow heads and bodies, idle sockets, too many connections and too many
requests on one websocket, oversized frames, unknown models, deeply nested JSON, large documents beside small
requests; and what it documents in ``/openapi.json``.

The connection guard's tests run twice, against the single server and against ``edit-engine serve --ray`` (the
``guarded`` fixture: a one-node Ray cluster from ``ray_cluster``, started once for this module, the tiny model on
one replica), with the same limits (``GUARD``) and the same assertions."""

from __future__ import annotations

import base64
import json
import os
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from ray_cluster import Command, LocalCluster, free_port
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from edit_engine import protocol as rpc
from edit_engine.engine import Engine
from edit_engine.model.network import DiffusionLM
from edit_engine.model.tokenizer import Tokenizer
from edit_engine.serve.app import BackgroundServer, create_app
from edit_engine.serve.settings import Settings

TIMEOUT = 30.0
GOOD = {"prompt": "def add(a, b):\n    return ", "suffix": "\n", "max_tokens": 4}


@pytest.fixture(scope="module")
def engine(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> Engine:
    return Engine(tiny_model, tiny_tokenizer)


@contextmanager
def serving(engine: Engine, **kw: Any) -> Iterator[BackgroundServer]:
    settings = Settings(port=0, log_level="warning", **kw)
    with BackgroundServer(create_app(settings, engine=engine), settings) as server:
        yield server


def _infill(rid: int, **params: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.INFILL, "params": params})


def _answer(ws: Any, rid: int) -> dict[str, Any]:
    while True:
        m = json.loads(ws.recv(timeout=TIMEOUT))
        if m.get("id") == rid:
            return m  # type: ignore[no-any-return]


def _answers(ws: Any, rids: list[int]) -> dict[int, dict[str, Any]]:
    """The answers to these requests, whatever order they come in."""
    out: dict[int, dict[str, Any]] = {}
    while len(out) < len(rids):
        m = json.loads(ws.recv(timeout=TIMEOUT))
        if m.get("id") in rids:
            out[m["id"]] = m
    return out


def _b64(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


# ---------------------------------------------------------------------------------------------------- both servers
# The limits the connection guard's tests run under, on both servers (the Ray proxy's are set once, when Serve
# starts): short deadlines, two open requests, two requests in flight per websocket, frames up to 40 kB.
GUARD = {"header_timeout_s": 1.0, "body_timeout_s": 1.0, "max_connections": 2, "max_inflight_per_connection": 2,
         "max_request_bytes": 10_000}
FRAME_LIMIT = 4 * GUARD["max_request_bytes"]  # the largest websocket frame read (the single server's ws_max_size)
CLOSE_S = GUARD["header_timeout_s"] + 10.0  # a socket the guard closes is closed within this long
IDLE_SOCKETS = 100


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}/v1/stream"


@pytest.fixture(scope="module", params=["single", pytest.param("ray", marks=pytest.mark.slow)])
def guarded(request: pytest.FixtureRequest) -> Iterator[Endpoint]:
    """The single server, or ``edit-engine serve --ray`` on a one-node Ray cluster, with the limits of ``GUARD``."""
    if request.param == "single":
        with serving(request.getfixturevalue("engine"), **GUARD) as srv:
            yield Endpoint(srv.host, srv.port)
        return
    pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'edit-engine[ray]')")
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in GUARD.items()]
    with ExitStack() as stack:
        cluster = LocalCluster()
        stack.callback(cluster.stop)
        cluster.start(workers=0)
        port = free_port()
        command = Command(cluster, port, "--model", str(request.getfixturevalue("tiny_checkpoint")), *flags)
        stack.callback(command.stop)
        yield Endpoint("127.0.0.1", port)


def _unclosed(socks: list[socket.socket], within: float) -> list[socket.socket]:
    """Read each socket to its end; the ones the server has not closed within ``within`` seconds."""
    left = {s.fileno(): s for s in socks}
    deadline = time.monotonic() + within
    with selectors.DefaultSelector() as sel:
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        while left and (wait := deadline - time.monotonic()) > 0:
            for key, _ in sel.select(wait):
                s = left[key.fd]
                try:
                    ended = not s.recv(65536)
                except ConnectionResetError:
                    ended = True
                if ended:
                    sel.unregister(s)
                    del left[key.fd]
    return list(left.values())


def _answer_until_closed(s: socket.socket, within: float = CLOSE_S) -> bytes:
    """Everything the server sends before it closes the socket, which must happen within ``within`` seconds."""
    data = b""
    deadline = time.monotonic() + within
    while (wait := deadline - time.monotonic()) > 0:
        s.settimeout(wait)
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"the socket is still open after {within:g} s ({data[:80]!r} received)")


def _until_free(url: str) -> httpx.Response:
    """A request answered with something else than 503 (the sockets of earlier tests are released a moment after
    their clients close them); every try is a request answered."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        r = httpx.post(url + "/v1/completions", json=GOOD, timeout=TIMEOUT)
        if r.status_code != 503 or time.monotonic() > deadline:
            return r


# ---------------------------------------------------------------------------------------------------- Host, Origin
def test_a_keyless_server_refuses_foreign_hosts_and_origins(engine: Engine) -> None:
    """DNS rebinding: a page on evil.example re-points its name at 127.0.0.1 and calls the server with
    ``Host: evil.example``: refused with 403 in the error shape. localhost, the bound address and an allowed
    name pass; a websocket from a foreign Origin is refused at the handshake, one from the server's own page or
    an allowed origin is served."""
    with serving(engine, allowed_hosts="dev.box", allowed_origins="http://localhost:3000") as srv:
        port = srv.port
        with httpx.Client(base_url=srv.url, timeout=TIMEOUT) as c:
            foreign = c.post("/v1/completions", json=GOOD, headers={"Host": f"evil.example:{port}"})
            assert foreign.status_code == 403
            assert foreign.json()["error"]["type"] == "permission_error" and "Host" in foreign.json()["error"]["message"]
            for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"dev.box:{port}"):
                assert c.get("/healthz", headers={"Host": host}).status_code == 200, host
            cross = c.post("/v1/completions", json=GOOD, headers={"Origin": "http://evil.example"})
            assert cross.status_code == 403 and "Origin" in cross.json()["error"]["message"]
        with pytest.raises(InvalidStatus) as refused:
            connect(srv.ws_url, origin="http://evil.example", open_timeout=TIMEOUT)  # type: ignore[arg-type]
        assert refused.value.response.status_code == 403
        for origin in (f"http://127.0.0.1:{port}", "http://localhost:3000"):
            with connect(srv.ws_url, origin=origin, open_timeout=TIMEOUT) as ws:  # type: ignore[arg-type]
                ws.send(_infill(1, prefix="x = ", suffix="\n", maxTokens=2))
                assert "result" in _answer(ws, 1), origin


def test_with_a_key_the_host_is_not_checked_and_a_browser_sends_the_key_as_a_subprotocol(engine: Engine) -> None:
    """With an API key the key protects the server (a proxy's Host passes). A browser cannot set a websocket's
    Authorization header: it offers ``bearer.<base64url key>`` as a subprotocol and the server answers with
    ``edit-engine``; a wrong key is refused at the handshake."""
    with serving(engine, api_key="s3cret") as srv:
        r = httpx.get(srv.url + "/v1/models", headers={"Host": "proxy.example", "Authorization": "Bearer s3cret"},
                      timeout=TIMEOUT)
        assert r.status_code == 200
        with connect(srv.ws_url, subprotocols=["edit-engine", "bearer." + _b64("s3cret")],  # type: ignore[list-item]
                     open_timeout=TIMEOUT) as ws:
            assert ws.subprotocol == "edit-engine"
            ws.send(_infill(1, prefix="x = ", suffix="\n", maxTokens=2))
            assert "result" in _answer(ws, 1)
        with pytest.raises(InvalidStatus) as refused:
            connect(srv.ws_url, subprotocols=["edit-engine", "bearer." + _b64("wrong")],  # type: ignore[list-item]
                    open_timeout=TIMEOUT)
        assert refused.value.response.status_code == 403


# ---------------------------------------------------------------------------------------------------- slow clients
def test_a_client_that_never_finishes_its_head_is_disconnected(guarded: Endpoint) -> None:
    """Slowloris: a request head that never completes holds the socket only until the header deadline."""
    with socket.create_connection((guarded.host, guarded.port), timeout=TIMEOUT) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        assert _answer_until_closed(s) == b""
    # a keep-alive connection is held to the same deadline for its next head
    with socket.create_connection((guarded.host, guarded.port), timeout=TIMEOUT) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 200")
        s.sendall(b"GET /healthz HTTP/1.1\r\n")
        _answer_until_closed(s)


def test_idle_sockets_are_closed(guarded: Endpoint) -> None:
    """Sockets that never send a byte, and a keep-alive socket idle after its answer, are closed by the header
    deadline (an idle socket holds a slot of the server for that long at most)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.create_connection((guarded.host, guarded.port), timeout=TIMEOUT))
                 for _ in range(IDLE_SOCKETS)]
        answered = socks[0]
        answered.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert answered.recv(65536).startswith(b"HTTP/1.1 200")
        still_open = _unclosed(socks, CLOSE_S)
        assert not still_open, f"{len(still_open)} of {len(socks)} idle sockets still open after {CLOSE_S:g} s"


def test_a_body_that_trickles_is_answered_408(guarded: Endpoint) -> None:
    with socket.create_connection((guarded.host, guarded.port), timeout=TIMEOUT) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"prompt\": ")
        answer = _answer_until_closed(s, GUARD["body_timeout_s"] + CLOSE_S)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "body_timeout_s"


def test_connections_beyond_the_limit_get_503_and_the_limit_frees_up(guarded: Endpoint) -> None:
    assert _until_free(guarded.url).status_code == 200
    with connect(guarded.ws_url, open_timeout=TIMEOUT), connect(guarded.ws_url, open_timeout=TIMEOUT):
        full = httpx.post(guarded.url + "/v1/completions", json=GOOD, timeout=TIMEOUT)
        assert full.status_code == 503 and full.headers["Retry-After"] == "1"
        assert full.json()["error"]["code"] == "max_connections"
        with pytest.raises(InvalidStatus):
            connect(guarded.ws_url, open_timeout=TIMEOUT)
    assert _until_free(guarded.url).status_code == 200


def _next_edit(rid: int, **params: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.NEXT_EDIT, "params": params})


def test_a_websocket_runs_at_most_max_inflight_requests(guarded: Endpoint) -> None:
    """Infill, apply and next-edit requests count against ``--max-inflight-per-connection``: with two infills
    running (256 tokens each), next-edit requests are answered -32001 at once; once the infills are answered,
    the socket takes requests again."""
    limit = GUARD["max_inflight_per_connection"]
    with connect(guarded.ws_url, open_timeout=TIMEOUT) as ws:
        for i in range(limit):
            ws.send(_infill(i, prefix=GOOD["prompt"], suffix="\n", maxTokens=256, stream=False))
        edits = list(range(100, 104))
        for rid in edits:
            ws.send(_next_edit(rid, text="x = 1\n", offset=0, uri=f"file:///n{rid}.py"))
        answers = _answers(ws, [*edits, *range(limit)])
        for rid in edits:
            err = answers[rid].get("error")
            assert err and err["code"] == rpc.SERVER_OVERLOADED, answers[rid]
            assert err["data"]["limit"] == "max_inflight_per_connection", err
        assert all("result" in answers[i] for i in range(limit)), answers
        ws.send(_next_edit(200, text="x = 1\n", offset=0, uri="file:///n200.py"))
        assert "result" in _answer(ws, 200)


def test_a_frame_over_the_limit_closes_the_websocket_1009(guarded: Endpoint) -> None:
    """A frame over ``--max-request-bytes`` gets a JSON-RPC error and the socket stays open; one over four times
    that closes the socket with 1009 (message too big) before it is read whole."""
    with connect(guarded.ws_url, max_size=None, open_timeout=TIMEOUT) as ws:
        ws.send(_infill(1, prefix="x" * (2 * GUARD["max_request_bytes"]), suffix="\n", maxTokens=2))
        err = json.loads(ws.recv(timeout=TIMEOUT))["error"]
        assert err["code"] == rpc.SERVER_OVERLOADED and err["data"]["limit"] == "max_request_bytes", err
        with pytest.raises(ConnectionClosed) as closed:
            ws.send("x" * (FRAME_LIMIT + 1))
            ws.recv(timeout=TIMEOUT)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009, closed.value


# ---------------------------------------------------------------------------------------------------- contract
def test_an_unknown_model_is_404_like_openai(engine: Engine) -> None:
    with serving(engine) as srv, httpx.Client(base_url=srv.url, timeout=TIMEOUT) as c:
        listed = c.get("/v1/models").json()["data"][0]["id"]
        missing = c.post("/v1/completions", json={**GOOD, "model": "gpt-4o"})
        named = c.post("/v1/completions", json={**GOOD, "model": listed})
        omitted = c.post("/v1/fim/completions", json=GOOD)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    assert listed in missing.json()["error"]["message"]
    assert named.status_code == 200 and omitted.status_code == 200


def test_json_nested_too_deep_on_the_websocket_is_a_parse_error(engine: Engine) -> None:
    """100k nested arrays used to raise RecursionError and drop the socket without a close frame."""
    with serving(engine) as srv, connect(srv.ws_url, max_size=None, open_timeout=TIMEOUT) as ws:
        ws.send("[" * 100_000 + "]" * 100_000)
        err = json.loads(ws.recv(timeout=TIMEOUT))
        assert err["error"]["code"] == rpc.PARSE_ERROR and err["id"] is None
        ws.send(_infill(2, prefix="x = ", suffix="\n", maxTokens=2))
        assert "result" in _answer(ws, 2)
        deep_http = httpx.post(srv.url + "/v1/completions", content="[" * 100_000 + "]" * 100_000,
                               headers={"Content-Type": "application/json"}, timeout=TIMEOUT)
        assert deep_http.status_code == 400 and "error" in deep_http.json()


def test_openapi_documents_errors_and_the_event_stream(engine: Engine) -> None:
    with serving(engine) as srv:
        spec = httpx.get(srv.url + "/openapi.json", timeout=TIMEOUT).json()
    op = spec["paths"]["/v1/completions"]["post"]
    for status in ("400", "401", "403", "404", "408", "411", "413", "500", "503"):
        schema = op["responses"][status]["content"]["application/json"]["schema"]
        assert schema["$ref"].endswith("/ErrorBody"), status
    ok = op["responses"]["200"]["content"]
    assert ok["application/json"]["schema"]["$ref"].endswith("/CompletionBody")
    assert "[DONE]" in ok["text/event-stream"]["description"]
    assert "ErrorDetail" in spec["components"]["schemas"]


# ---------------------------------------------------------------------------------------------------- large documents
# The health checker and the load of the test below, each a client process of its own: their HTTP parsing, JSON
# encoding and websocket framing then do not compete for this process's interpreter lock with the server
# being measured. The limit: with the fixes 0.4-0.65 s on two busy cores; with long texts tokenized holding
# the lock again (one of the causes fixed), 2.8-3.6 s.
STALL_LIMIT_S = 1.5
PINGER = """
import http.client, statistics, sys, threading, time, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
def ping():
    t0 = time.perf_counter()
    conn.request("GET", "/healthz")
    r = conn.getresponse()
    r.read()
    assert r.status == 200, r.status
    return time.perf_counter() - t0
print(statistics.median(ping() for _ in range(20)), flush=True)
sys.stdin.readline()
stopped = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stopped.set()), daemon=True).start()
worst, pings = 0.0, 0
while not stopped.is_set():
    worst, pings = max(worst, ping()), pings + 1
print(worst, pings, flush=True)
"""

BIG_LOAD = """
import json, sys, threading, httpx
from websockets.sync.client import connect
url, ws_url, method = sys.argv[1:4]
big = "x = 1\\n" * 80_000
def document(i):
    with connect(ws_url, max_size=None, open_timeout=30) as ws:
        ws.send(json.dumps({"jsonrpc": "2.0", "id": i, "method": method,
                            "params": {"text": big, "offset": len(big) // 2, "maxTokens": 8, "uri": f"file:///big{i}.py"}}))
        while True:
            m = json.loads(ws.recv(timeout=120))
            if m.get("id") == i:
                assert "result" in m, m
                return
def prompt(i):
    r = httpx.post(url + "/v1/completions", json={"prompt": big, "suffix": "\\n", "max_tokens": 8}, timeout=120)
    assert r.status_code == 200, r.text
errors = []
def run(f, i):
    try:
        f(i)
    except BaseException as e:
        errors.append(repr(e))
threads = [threading.Thread(target=run, args=(f, i)) for i in range(3) for f in (document, prompt)]
print("sending", flush=True)
for t in threads:
    t.start()
for t in threads:
    t.join()
sys.exit("; ".join(errors) if errors else 0)
"""


@pytest.mark.slow
def test_large_documents_do_not_stall_the_event_loop(packaged_engine: Engine) -> None:
    """Three 480 k-character document requests and three 480 k-character prompts at once (from a client
    process): /healthz, asked from another process as a health checker asks, keeps being answered. Parsing,
    tokenizing and Python's compile check used to hold the interpreter lock (or the event loop) for a second or
    more each; now a large source is parsed in chunks with the lock released between them, long texts are
    tokenized with it released, line starts are found by a regular expression, the compile check looks only
    around the fill, and planning and token counting run off the loop. (A pinger inside the server's process
    would also measure its own waits for the lock.)"""
    with serving(packaged_engine) as srv:
        pinger = subprocess.Popen([sys.executable, "-c", PINGER, srv.url], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        load: subprocess.Popen[str] | None = None
        try:
            assert pinger.stdin is not None and pinger.stdout is not None
            alone = float(pinger.stdout.readline())
            load = subprocess.Popen([sys.executable, "-c", BIG_LOAD, srv.url, srv.ws_url, rpc.INFILL],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            assert load.stdout is not None
            assert load.stdout.readline().strip() == "sending"
            pinger.stdin.write("start\n")
            pinger.stdin.flush()
            assert load.wait() == 0, load.stdout.read()
            pinger.stdin.write("stop\n")
            pinger.stdin.flush()
            worst, pings = (float(x) for x in pinger.stdout.readline().split())
            assert pinger.wait() == 0
        finally:  # a failed step leaves no client process behind
            for proc in (pinger, load):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
    assert pings >= 3, f"only {pings:.0f} pings while the load ran"
    assert worst < STALL_LIMIT_S, (f"/healthz took {worst * 1e3:.0f} ms under load ({alone * 1e3:.1f} ms alone; "
                                   f"load average {os.getloadavg()[0]:.1f})")
