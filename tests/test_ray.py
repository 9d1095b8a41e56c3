"""The server scaled out on Ray Serve (``edit_engine.serve.ray_app``, ``edit-engine serve --ray``).

Fast tests check the pieces without a cluster: options, the routing ranks, the websocket frame classes, and the
ASGI tunnel a replica runs the stock app through. The slow ones run a real local Ray cluster (``ray_cluster``): a
head and a worker node started as separate processes (``ray start --block``, loopback address, their own temp dir
and ports, token authentication with a token of their own, one CPU each), the tiny random model, real HTTP and
websocket clients through Ray's HTTP proxy. A driver process starts Serve as ``edit-engine serve --ray`` does and
deploys the two-replica application with ``serve.run`` (with a pass hook that makes the model slower, so requests
stay in flight long enough to be cancelled or killed); the back-pressure, autoscaling and shutdown tests run
``edit-engine serve --ray --address ...`` as a process of its own. This test process never joins the cluster. The
nodes are stopped at the end, and any process of the cluster left over (its temp dir in the command line, or its
token in the environment) is killed by id.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from ray_cluster import Command, LocalCluster, free_port
from websockets.sync.client import ClientConnection, connect

pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'edit-engine[ray]')")

from edit_engine import protocol as rpc  # noqa: E402
from edit_engine.serve.ray_app import options  # noqa: E402
from edit_engine.serve.ray_app.replica import REPLICA_HEADER, EngineReplica, is_answer  # noqa: E402
from edit_engine.serve.ray_app.router import DOC, PIN, document_key, ranks  # noqa: E402
from edit_engine.serve.ray_app.socket import classify  # noqa: E402
from edit_engine.serve.settings import Settings  # noqa: E402

TIMEOUT = 60.0  # every wait here is bounded by it (replicas start in ~10-20 s on two busy cores)
PASS_S = 0.005  # the deployed model's slowest pass: requests of 128 tokens stay in flight for ~1 s
PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\nprint(add(1, 2))\n"


def eventually(check: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    """Wait (bounded) for a state the application reports."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        threading.Event().wait(0.05)


# ---------------------------------------------------------------------------------------------------- no cluster
def test_options_follow_the_settings() -> None:
    s = Settings(max_batch=8, max_queue=20, replicas=3, gpus_per_replica=0.5)
    opts = options.engine_options(s)
    assert (opts["num_replicas"], opts["max_ongoing_requests"], opts["max_queued_requests"]) == (3, 16, 20)
    assert opts["ray_actor_options"] == {"num_cpus": 1.0, "num_gpus": 0.5} and "autoscaling_config" not in opts
    auto = options.engine_options(s.with_(autoscale="1:4", max_ongoing_requests=5, target_ongoing_requests=3))
    assert "num_replicas" not in auto and auto["max_ongoing_requests"] == 5
    assert {k: auto["autoscaling_config"][k] for k in ("min_replicas", "max_replicas", "target_ongoing_requests")} \
        == {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 3}
    assert options.ingress_options(s)["ray_actor_options"] == {"num_cpus": 0}
    assert options.cluster_cpus(s.with_(autoscale="0:6"), 2) == 6 and options.cluster_cpus(s, 16) == 16


@pytest.mark.parametrize("bad", ["4", "4:1", "a:b", "0:0", "-1:2", "1:2:3"])
def test_autoscale_needs_min_colon_max(bad: str) -> None:
    with pytest.raises(ValueError, match="MIN:MAX"):
        options.check(Settings(autoscale=bad))


def test_serve_config_args_are_settings() -> None:
    """``build_app(args)``: ``serve run`` config values (YAML types) become ``Settings``; an unknown key is named."""
    s = options.settings_from_args({"model": "/m", "replicas": "2", "gpus_per_replica": 1, "api_key": "k"})
    assert (s.model, s.replicas, s.gpus_per_replica, s.api_key) == ("/m", 2, 1.0, "k")
    with pytest.raises(ValueError, match="unknown settings \\['replica'\\]"):
        options.settings_from_args({"replica": 2})


@pytest.mark.parametrize("name", ["serve_config.yaml", "rayservice.yaml"])
def test_example_configs_deploy_the_application(name: str) -> None:
    """The shipped ``serve`` config (and the RayService's copy) passes Ray's schema and builds the application."""
    import yaml
    from ray.serve.schema import ServeDeploySchema

    from edit_engine.serve.ray_app import build_app

    doc = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples" / "ray" / name).read_text())
    config = yaml.safe_load(doc["spec"]["serveConfigV2"]) if doc.get("kind") == "RayService" else doc
    (app,) = ServeDeploySchema.model_validate(config).applications
    assert app.import_path == "edit_engine.serve.ray_app:build_app"
    assert type(build_app(config["applications"][0]["args"])).__name__ == "Application"


def test_ranks_keep_a_document_on_one_replica() -> None:
    """Rendezvous ranks: the same key ranks replicas the same way wherever it is computed; removing a replica
    moves only the keys it ranked first; a pin names one replica; no key: two replicas to compare."""
    ids = [f"r{i}" for i in range(4)]
    keys = [document_key(f"file:///doc{i}.py") for i in range(200)]
    first = {k: ids[ranks(k, ids)[0][0]] for k in keys}
    assert all(k.startswith(DOC) for k in keys) and len(set(first.values())) == 4
    assert ranks(keys[0], ids) == ranks(keys[0], list(ids)) and len(ranks(keys[0], ids)) == 3
    rest = [i for i in ids if i != "r2"]
    moved = [k for k in keys if rest[ranks(k, rest)[0][0]] != first[k]]
    assert moved and all(first[k] == "r2" for k in moved)
    assert ranks(PIN + "r3", ids) == [[3]] and ranks(PIN + "gone", ids) == []
    pair = ranks("", ids)
    assert len(pair) == 1 and len(set(pair[0])) == 2 and ranks("", ids[:1]) == [[0]]


def test_frames_are_classified_for_forwarding() -> None:
    req = json.dumps({"jsonrpc": "2.0", "id": 7, "method": rpc.INFILL, "params": {"prefix": "a", "uri": "file:///x"}})
    assert classify(req, 10_000) == ("infill", 7, "file:///x")
    assert classify(req, 10) == ("frame", None, None)  # over the limit: the replica answers it
    cancel = json.dumps({"jsonrpc": "2.0", "method": rpc.CANCEL, "params": {"id": "a"}})
    assert classify(cancel, 10_000) == ("cancel", "a", None)
    other = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "nope"})
    assert classify(other, 10_000) == ("request", 1, None)
    apply = json.dumps({"jsonrpc": "2.0", "id": 2, "method": rpc.APPLY, "params": {"original": "", "update": ""}})
    assert classify(apply, 10_000) == ("limited", 2, None)
    edit = json.dumps({"jsonrpc": "2.0", "id": 3, "method": rpc.NEXT_EDIT, "params": {"text": "", "uri": "file:///y"}})
    assert classify(edit, 10_000) == ("next_edit", 3, "file:///y")  # limited, and superseded by a newer one
    for frame in ("not json", "[1]", json.dumps({"jsonrpc": "2.0", "method": rpc.INFILL, "params": {}}),
                  json.dumps({"jsonrpc": "2.0", "id": True, "method": rpc.INFILL})):
        assert classify(frame, 10_000)[0] == "frame", frame
    assert is_answer('{"jsonrpc": "2.0", "id": 7, "result": {}}', 7)
    assert is_answer('{"jsonrpc": "2.0", "id": null, "error": {"code": -32700}}', 7)
    assert not is_answer('{"jsonrpc": "2.0", "method": "editEngine/pass", "params": {"result": 1}}', 7)
    assert not is_answer('{"jsonrpc": "2.0", "id": 8, "result": {}}', 7)


@pytest.fixture()
def tunnel(tiny_engine: Any) -> Iterator[EngineReplica]:
    """An ``EngineReplica`` without Ray: the stock app (tiny engine) behind the replica's ASGI tunnel."""
    import asyncio

    from edit_engine.serve.app import create_app

    loop = asyncio.new_event_loop()
    replica = object.__new__(EngineReplica)
    replica.app = create_app(Settings(log_level="warning"), engine=tiny_engine)
    replica.replica_id, replica.calls = "local", 0
    lifespan = replica.app.router.lifespan_context(replica.app)
    loop.run_until_complete(lifespan.__aenter__())
    replica._test_loop = loop  # type: ignore[attr-defined]
    try:
        yield replica
    finally:
        loop.run_until_complete(lifespan.__aexit__(None, None, None))
        loop.close()


def _drain(replica: EngineReplica, gen: Any) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        return [m async for batch in gen for m in batch]

    return replica._test_loop.run_until_complete(run())  # type: ignore[attr-defined, no-any-return]


def test_tunnel_runs_the_stock_app(tunnel: EngineReplica) -> None:
    """HTTP: the response (with the replica's id), streamed bodies as they come; websocket: one frame, the
    app's messages up to the answer; a frame that gets no answer ends once the app has read it."""
    body = json.dumps({"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 4, "stream": True}).encode()
    scope = {"type": "http", "method": "POST", "path": "/v1/completions", "raw_path": b"/v1/completions",
             "query_string": b"", "root_path": "", "scheme": "http", "http_version": "1.1",
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}
    msgs = _drain(tunnel, tunnel.http(scope, body))
    start = msgs[0]
    assert start["type"] == "http.response.start" and start["status"] == 200
    assert (REPLICA_HEADER.encode(), b"local") in start["headers"]
    text = b"".join(m.get("body", b"") for m in msgs[1:]).decode()
    assert text.count("data: ") >= 2 and text.endswith("data: [DONE]\n\n") and not msgs[-1].get("more_body")
    ws_scope = {"type": "websocket", "path": "/v1/stream", "raw_path": b"/v1/stream", "query_string": b"",
                "root_path": "", "scheme": "ws", "headers": [(b"host", b"127.0.0.1")], "subprotocols": []}
    frame = json.dumps({"jsonrpc": "2.0", "id": 3, "method": rpc.INFILL,
                        "params": {"prefix": PREFIX, "suffix": SUFFIX, "maxTokens": 4}})
    sent = [json.loads(m["text"]) for m in _drain(tunnel, tunnel.websocket(ws_scope, frame, 3))
            if m["type"] == "websocket.send"]
    assert [m.get("method") for m in sent[:-1]] == [rpc.PASS] * (len(sent) - 1) and sent[-1]["id"] == 3
    assert sent[-1]["result"]["text"] == sent[-2]["params"]["text"]
    note = json.dumps({"jsonrpc": "2.0", "method": rpc.ACCEPTED, "params": {}})
    assert [m for m in _drain(tunnel, tunnel.websocket(ws_scope, note, None)) if m["type"] == "websocket.send"] == []
    assert tunnel.app.state.service.metrics.requests.value(route="ws", outcome="ok") == 1


def test_tunnel_call_that_is_left_cancels_its_job(tunnel: EngineReplica) -> None:
    """The caller leaves after the first message: the app sees a disconnect and the job is cancelled."""
    import asyncio

    ws_scope = {"type": "websocket", "path": "/v1/stream", "raw_path": b"/v1/stream", "query_string": b"",
                "root_path": "", "scheme": "ws", "headers": [(b"host", b"127.0.0.1")], "subprotocols": []}
    frame = json.dumps({"jsonrpc": "2.0", "id": 1, "method": rpc.INFILL,
                        "params": {"prefix": PREFIX, "suffix": SUFFIX, "maxTokens": 256}})
    metrics = tunnel.app.state.service.metrics

    async def leave_early() -> None:
        gen = tunnel.websocket(ws_scope, frame, 1)
        assert await gen.__anext__() == []  # the replica took the call
        while not await gen.__anext__():  # up to the app's first messages (the first pass)
            pass
        await gen.aclose()
        while metrics.retired.value(reason="cancelled") + metrics.retired.value(reason="done") < 1:
            await asyncio.sleep(0.01)

    tunnel._test_loop.run_until_complete(asyncio.wait_for(leave_early(), TIMEOUT))  # type: ignore[attr-defined]
    assert metrics.cancellations.value(reason="disconnect") == 1


def test_the_ingress_guards_like_the_single_server() -> None:
    """The ingress runs the stock ``Guard`` and websocket key check before anything is forwarded."""
    from fastapi.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from edit_engine.serve.ray_app.ingress import ingress_app

    app = ingress_app(Settings(api_key="k", max_request_bytes=100))
    app.state.fwd = None  # no replicas: only answers given before forwarding are checked (and no lifespan runs)
    c = TestClient(app)
    for path in ("/v1/models", "/metrics"):
        r = c.get(path)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = c.post("/v1/completions", content=b"x" * 200, headers={"Authorization": "Bearer k"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "max_request_bytes"
    with pytest.raises(WebSocketDisconnect) as e, c.websocket_connect("/v1/stream"):
        pass
    assert e.value.code == 1008


class HeldForwarder:
    """A forwarder whose calls are taken and never answered: what the ingress does before anything comes back."""

    def __init__(self) -> None:
        from edit_engine.serve.ray_app.stats import IngressMetrics

        self.metrics = IngressMetrics()

    def key(self, material: str | None) -> str:
        return ""

    async def stream(self, method: str, key: str, args: tuple[Any, ...], started: Any) -> Any:
        import asyncio

        yield []
        await asyncio.Event().wait()  # held until the socket cancels it


def received(ws: Any, within: float = 10.0) -> Any:
    """The next message on a test client's websocket, which must come within ``within`` seconds (its own receive
    waits without a bound); its error, if receiving fails."""
    out: list[Any] = []

    def receive() -> None:
        try:
            out.append(ws.receive_json())
        except Exception as e:
            out.append(e)

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    reader.join(within)
    if not out:
        raise AssertionError(f"nothing received within {within:g} s")
    if isinstance(out[0], Exception):
        raise out[0]
    return out[0]


def test_the_ingress_websocket_limits_like_the_single_server() -> None:
    """On the ingress's websocket, next-edit requests count against ``--max-inflight-per-connection`` (-32001 at
    once), a newer next edit for the same ``uri`` cancels the one in flight (-32800), and a frame over 4 x
    ``--max-request-bytes`` closes the socket with 1009, as in the single server."""
    from fastapi.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from edit_engine.serve.ray_app.ingress import ingress_app

    app = ingress_app(Settings(api_key="k", max_request_bytes=1000, max_inflight_per_connection=2))
    app.state.fwd = HeldForwarder()
    edit = {"text": "x = 1\n", "offset": 0}

    def call(rid: int, method: str, **params: Any) -> str:
        return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})

    with TestClient(app).websocket_connect("/v1/stream", headers={"Authorization": "Bearer k"}) as ws:
        ws.send_text(call(1, rpc.NEXT_EDIT, **edit, uri="file:///a.py"))
        ws.send_text(call(2, rpc.NEXT_EDIT, **edit, uri="file:///a.py"))
        assert received(ws) == {"jsonrpc": "2.0", "id": 1, "error": {
            "code": rpc.REQUEST_CANCELLED, "message": "request cancelled (superseded)"}}
        ws.send_text(call(3, rpc.INFILL, prefix="x = ", uri="file:///b.py"))
        ws.send_text(call(4, rpc.NEXT_EDIT, **edit, uri="file:///c.py"))
        refused = received(ws)
        assert refused["id"] == 4 and refused["error"]["code"] == rpc.SERVER_OVERLOADED
        assert refused["error"]["data"]["limit"] == "max_inflight_per_connection"
        ws.send_text("x" * 4001)
        with pytest.raises(WebSocketDisconnect) as closed:
            received(ws)
    assert closed.value.code == 1009


def test_the_proxy_callback_installs_the_head_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """``proxy.install`` (run by Ray in its HTTP proxy's process, the variables from ``proxy_environment``) makes
    ``ProxyH11`` with these limits uvicorn's ``auto`` protocol, which Ray's proxy server asks for; the server's
    websocket frame limit drops to 4 x ``--max-request-bytes``."""
    import uvicorn
    from uvicorn import config as uvicorn_config
    from uvicorn.server import ServerState

    from edit_engine.serve.ray_app import proxy

    monkeypatch.setitem(uvicorn_config.HTTP_PROTOCOLS, "auto", uvicorn_config.HTTP_PROTOCOLS["auto"])
    for name in ("header_timeout_s", "ws_max_size"):
        monkeypatch.setattr(proxy.ProxyH11, name, getattr(proxy.ProxyH11, name))
    env = proxy.proxy_environment(Settings(header_timeout_s=2.5, max_request_bytes=1000))
    assert env[proxy.CALLBACK_ENV] == "edit_engine.serve.ray_app.proxy:install"
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert proxy.install() == []
    config = uvicorn.Config(lambda: None, factory=True, lifespan="off", log_config=None)  # http="auto", as Ray's
    config.load()
    assert config.http_protocol_class is proxy.ProxyH11
    assert (proxy.ProxyH11.header_timeout_s, config.ws_max_size) == (2.5, 16 * 1024 * 1024)
    loop = asyncio.new_event_loop()  # the protocol's loop (the proxy's server passes its own)
    try:
        proxy.ProxyH11(config, ServerState(), {}, _loop=loop)
    finally:
        loop.close()
    assert config.ws_max_size == 4000


def test_serve_without_ray_never_imports_ray() -> None:
    code = ("import sys; from edit_engine.cli.main import build_parser; import edit_engine.serve.app, "
            "edit_engine.serve.ray_app, edit_engine.serve.ray_app.options; "
            "build_parser().parse_args(['serve', '--port', '0']); assert 'ray' not in sys.modules, 'ray imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_serve_help_documents_the_ray_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from edit_engine.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    out = capsys.readouterr().out
    for flag in ("--ray", "--replicas", "--autoscale", "--gpus-per-replica", "--address", "--max-ongoing-requests",
                 "--max-queued-requests", "--target-ongoing-requests", "--affinity", "EDIT_ENGINE_AUTOSCALE"):
        assert flag in out, flag


# ---------------------------------------------------------------------------------------------------- the cluster
@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster()
    try:
        yield c.start()
    finally:
        c.stop()


# A Ray driver that deploys the application with a pass hook (``serve.run``), then deletes it when its stdin
# closes. Each pass takes at least ``pass_s``: the model made slower, so requests stay in flight (nothing waits
# on it). While the FIFO ``hold`` exists, one pass goes through and the next blocks reading it until the test
# releases it (``release``): a job held in flight for as long as a check needs, whatever the machine's speed.
DEPLOY = """
import json, logging, os, sys, time
import ray
from ray import serve
from edit_engine.serve.ray_app import APP_NAME
from edit_engine.serve.ray_app.launch import application, start_serve
from edit_engine.serve.settings import Settings
address, port, fields, pass_s, hold = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), float(sys.argv[4]), sys.argv[5]

def before_pass(state={"through": False}):
    time.sleep(pass_s)
    if not os.path.exists(hold):
        state["through"] = False
    elif not state["through"]:
        state["through"] = True
    else:
        with open(hold) as f:
            f.read()

ray.init(address=address, logging_level=logging.WARNING)
try:
    settings = Settings(**fields)
    start_serve(settings, port)
    serve.run(application(settings, before_pass), name=APP_NAME, route_prefix="/")
    print("deployed", flush=True)
    sys.stdin.read()
    serve.delete(APP_NAME)
finally:
    ray.shutdown()
"""


def release(hold: Path) -> None:
    """Let the passes held by ``hold`` go on and stop holding (the FIFO's reader, if any, sees its end)."""
    try:
        fd = os.open(hold, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no pass is waiting on it
        fd = -1
    hold.unlink()
    if fd >= 0:
        os.close(fd)


class Deployer:
    """``DEPLOY`` as a process of its own (this test process never joins the cluster)."""

    running: list[Deployer] = []

    def __init__(self, cluster: LocalCluster, port: int, fields: dict[str, Any], pass_s: float,
                 hold: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", DEPLOY, cluster.address, str(port), json.dumps(fields),
                                      str(pass_s), str(hold)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=cluster.env, start_new_session=True)
        self.lines: list[str] = []
        Deployer.running.append(self)
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line)
                if line.startswith("deployed"):
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(3 * TIMEOUT):
            self.stop()
            raise RuntimeError("the application did not deploy:\n" + "".join(self.lines[-40:]))

    def stop(self) -> None:
        """Delete the application and leave the cluster."""
        if self in Deployer.running:
            Deployer.running.remove(self)
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(TIMEOUT)


@pytest.fixture(scope="module")
def proxy_port(cluster: LocalCluster) -> int:
    """The port of Serve's HTTP proxy on the cluster (set by whichever driver starts Serve first)."""
    return free_port()


@pytest.fixture(scope="module")
def hold(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the application's passes look for a hold (``DEPLOY``); made with ``os.mkfifo`` by a test."""
    return tmp_path_factory.mktemp("hold") / "hold"


@pytest.fixture(scope="module")
def app(cluster: LocalCluster, proxy_port: int, tiny_checkpoint: Path, hold: Path) -> Iterator[str]:
    """Two Engine replicas (one per node) behind the ingress, passes slowed to ``PASS_S``. Yields the URL."""
    fields = {"model": str(tiny_checkpoint), "threads": 1, "replicas": 2, "log_level": "warning", "max_tokens": 256}
    deployer = Deployer(cluster, proxy_port, fields, PASS_S, hold)
    url = f"http://127.0.0.1:{proxy_port}"
    try:
        eventually(lambda: len(replicas(url)) == 2, "two replicas answering")
        yield url
    finally:
        deployer.stop()


def replicas(url: str) -> dict[str, dict[str, Any]]:
    """The replicas that answer ``/healthz``, by id."""
    body = httpx.get(url + "/healthz", timeout=TIMEOUT).json()
    return {r["replica"]: r for r in body.get("replicas", []) if "queueDepth" in r}


def metric(url: str, name: str, **labels: str) -> dict[str, float]:
    """Samples of ``name`` in ``/metrics`` matching ``labels``, by replica ("" for the ingress's own)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=TIMEOUT).text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                out[s.labels.get("replica", "")] = out.get(s.labels.get("replica", ""), 0.0) + s.value
    return out


def request(rid: int | str, **params: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.INFILL, "params": params})


def until_answers(ws: ClientConnection, rids: list[Any]) -> dict[Any, tuple[list[dict[str, Any]], dict[str, Any]]]:
    """The pass notifications and the answer of each request, whatever order they come in."""
    passes: dict[Any, list[dict[str, Any]]] = {r: [] for r in rids}
    answers: dict[Any, tuple[list[dict[str, Any]], dict[str, Any]]] = {}
    while len(answers) < len(rids):
        m = json.loads(ws.recv(timeout=TIMEOUT))
        if m.get("method") == rpc.PASS and m["params"]["requestId"] in passes:
            passes[m["params"]["requestId"]].append(m["params"])
        elif m.get("id") in passes:
            answers[m["id"]] = (passes[m["id"]], m)
    return answers


def sse(lines: Iterator[str]) -> list[str]:
    return [line[len("data: "):] for line in lines if line.startswith("data: ")]


@pytest.mark.slow
def test_http_routes_pass_through_ray(app: str) -> None:
    """The single server's HTTP surface, answered by the replicas' stock app; ``/healthz`` and ``/metrics`` cover
    every replica."""
    with httpx.Client(base_url=app, timeout=TIMEOUT) as c:
        health = c.get("/healthz").json()
        assert health["status"] == "ok" and health["model"] and len(health["replicas"]) == 2
        assert c.get("/v1/models").json()["data"][0]["id"] == health["model"]
        r = c.post("/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 8})
        assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")
        assert r.headers[REPLICA_HEADER] in {row["replica"] for row in health["replicas"]}
        fim = c.post("/v1/fim/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 4})
        assert fim.status_code == 200 and fim.json()["object"] == "text_completion"
        bad = c.post("/v1/completions", json={"prompt": 5})
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
        missing = c.get("/nope")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        assert "/v1/completions" in c.get("/openapi.json").json()["paths"]
        info = metric(app, "edit_engine_replica_info")
        assert set(info) == {r["replica"] for r in health["replicas"]}
        assert sum(metric(app, "edit_engine_requests_total", route="http", outcome="ok").values()) >= 2
        assert metric(app, "edit_engine_ray_forwarded_total", route="http")[""] >= 4


@pytest.mark.slow
@pytest.mark.parametrize("diffusing", [True, False])
def test_sse_streams_through_ray(app: str, diffusing: bool) -> None:
    body = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 16, "stream": True, "diffusing": diffusing, "seed": 1}
    with httpx.Client(base_url=app, timeout=TIMEOUT) as c, c.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse(r.iter_lines())
    assert events[-1] == "[DONE]" and len(events) >= 3
    chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
    assert chunks[-1]["finish_reason"] in ("stop", "length") and all(ch["finish_reason"] is None for ch in chunks[:-1])


@pytest.mark.slow
def test_websocket_streams_through_ray(app: str) -> None:
    """Passes then the answer, several requests in flight on one socket spread over the replicas; bad frames
    get the stock errors and the socket stays usable."""
    with connect(app.replace("http", "ws") + "/v1/stream", open_timeout=TIMEOUT) as ws:
        for i in range(4):
            ws.send(request(i, prefix=PREFIX, suffix=SUFFIX, maxTokens=8, uri=f"file:///w{i}.py"))
        for passes, answer in until_answers(ws, list(range(4))).values():
            assert passes and passes[-1]["final"] and passes[-1]["text"] == answer["result"]["text"]
        ws.send("not json")
        assert json.loads(ws.recv(timeout=TIMEOUT))["error"]["code"] == rpc.PARSE_ERROR
        ws.send(json.dumps({"jsonrpc": "2.0", "id": "m", "method": "nope"}))
        assert json.loads(ws.recv(timeout=TIMEOUT)) == {"jsonrpc": "2.0", "id": "m", "error": {
            "code": rpc.METHOD_NOT_FOUND, "message": "unknown method 'nope'"}}
        ws.send(request(9, prefix=5))
        assert until_answers(ws, [9])[9][1]["error"]["code"] == rpc.INVALID_PARAMS
        ws.send(request(10, prefix=PREFIX, maxTokens=4, stream=False))
        passes, answer = until_answers(ws, [10])[10]
        assert passes == [] and "result" in answer
    assert sum(metric(app, "edit_engine_requests_total", route="ws", outcome="ok").values()) >= 5


DOCUMENT = "".join(f"import module_{i}\n" for i in range(12)) + "\n\nclass Shape:\n    def area(self, x):\n" \
    "        y = x + 1\n        if y:\n            z = y\n"


def lookups(url: str, **labels: str) -> dict[str, float]:
    """Per replica: lookups of its per-document context cache."""
    return metric(url, "edit_engine_context_cache_lookups_total", **labels)


@pytest.mark.slow
def test_each_document_stays_on_one_replica(app: str) -> None:
    """Per document: an ``X-Session-Id`` or ``user`` always reaches the same replica; a websocket ``uri`` too,
    and its context is reused there (cache hits). Different documents spread over both replicas."""
    with httpx.Client(base_url=app, timeout=TIMEOUT) as c:
        seen: dict[str, set[str]] = {}
        for k in range(16):
            for _ in range(2):
                r = c.post("/v1/completions", json={"prompt": "x = ", "max_tokens": 2},
                           headers={"X-Session-Id": f"session-{k}"})
                seen.setdefault(f"session-{k}", set()).add(r.headers[REPLICA_HEADER])
            r = c.post("/v1/completions", json={"prompt": "x = ", "max_tokens": 2, "user": f"user-{k}"})
            r2 = c.post("/v1/completions", json={"prompt": "y = ", "max_tokens": 2, "user": f"user-{k}"})
            seen[f"user-{k}"] = {r.headers[REPLICA_HEADER], r2.headers[REPLICA_HEADER]}
    assert all(len(v) == 1 for v in seen.values()), seen
    assert len(set().union(*seen.values())) == 2
    reused, used = 0.0, set()
    with connect(app.replace("http", "ws") + "/v1/stream", open_timeout=TIMEOUT) as ws:
        for d in range(8):
            before, misses = lookups(app), lookups(app, outcome="misses")
            for typed in range(3):  # three keystrokes: a line typed at a blank line of the method
                text = f"# document {d}\n" + DOCUMENT + "".join(f"            w{j} = {j}\n" for j in range(typed))
                ws.send(request(f"{d}-{typed}", text=text + "\n" + "print(Shape())\n", offset=len(text),
                                uri=f"file:///doc{d}.py", maxTokens=4))
                assert "result" in until_answers(ws, [f"{d}-{typed}"])[f"{d}-{typed}"][1]
            after = lookups(app)
            grew = {r: after[r] - before.get(r, 0.0) for r in after if after[r] != before.get(r, 0.0)}
            assert list(grew.values()) == [3], (d, grew)  # all three looked up on one replica
            (replica,) = grew
            used.add(replica)
            reused += 3 - (lookups(app, outcome="misses")[replica] - misses.get(replica, 0.0))
    # Two of each document's three requests reuse its context (the documents start differently: the server keys a
    # document's cached context by its first tokens, so only the replica that saw it can reuse it).
    assert reused >= 16 and len(used) == 2

@pytest.mark.slow
def test_cancel_and_disconnect_reach_the_replica(app: str, hold: Path) -> None:
    """``$/cancelRequest`` is answered -32800 at once and stops the job on its replica; so does an SSE client
    that goes away mid-stream (its job held after its first pass, so it cannot finish before the news arrives)."""
    def cancelled() -> float:
        return sum(metric(app, "edit_engine_jobs_retired_total", reason="cancelled").values())

    before = cancelled()
    with connect(app.replace("http", "ws") + "/v1/stream", open_timeout=TIMEOUT) as ws:
        ws.send(request(1, prefix=PREFIX, suffix=SUFFIX, maxTokens=128))
        first = json.loads(ws.recv(timeout=TIMEOUT))
        assert first["method"] == rpc.PASS and not first["params"]["final"]
        ws.send(json.dumps({"jsonrpc": "2.0", "method": rpc.CANCEL, "params": {"id": 1}}))
        _, answer = until_answers(ws, [1])[1]
        assert answer["error"] == {"code": rpc.REQUEST_CANCELLED, "message": "request cancelled (client)"}
    eventually(lambda: cancelled() >= before + 1, "the cancelled job retired on its replica")
    assert metric(app, "edit_engine_ray_cancellations_total", reason="client")[""] >= 1
    disconnects = sum(metric(app, "edit_engine_cancellations_total", reason="disconnect").values())
    body = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 128, "stream": True, "diffusing": True}
    os.mkfifo(hold)
    try:
        with httpx.Client(base_url=app, timeout=TIMEOUT) as c, c.stream("POST", "/v1/completions", json=body) as r:
            first_chunk = json.loads(next(line for line in r.iter_lines() if line.startswith("data: "))[6:])
            assert first_chunk["choices"][0]["finish_reason"] is None  # a pass, not the answer
        eventually(lambda: sum(metric(app, "edit_engine_cancellations_total", reason="disconnect").values())
                   >= disconnects + 1, "the disconnect seen by the replica")
        assert cancelled() < before + 2  # held: the job could not have finished first
    finally:
        release(hold)
    eventually(lambda: cancelled() >= before + 2, "the abandoned job retired")


@pytest.mark.slow
def test_a_killed_replica_loses_nothing_else(app: str) -> None:
    """A replica process is killed while requests run on both: its websocket requests that had streamed passes
    end with -32001 (retry), a plain request that had sent nothing is retried on the other replica, the other
    replica's requests finish, nothing hangs, and a new replica takes the place of the dead one."""
    before = replicas(app)
    pids = pid_by_replica(app)
    victim, other = sorted(before)
    uris = on_replica(victim, list(before), 3) + on_replica(other, list(before), 3)  # where the router sends them
    session = on_replica(victim, list(before), 1)[0]
    with connect(app.replace("http", "ws") + "/v1/stream", open_timeout=TIMEOUT) as ws, ThreadPoolExecutor(1) as pool:
        for i, uri in enumerate(uris):
            ws.send(request(i, prefix=PREFIX, suffix=SUFFIX, maxTokens=128, uri=uri))
        plain = pool.submit(httpx.post, app + "/v1/completions", json={"prompt": PREFIX, "max_tokens": 128},
                            headers={"X-Session-Id": session}, timeout=TIMEOUT)
        streaming: set[int] = set()
        answers: dict[int, dict[str, Any]] = {}
        while len(streaming) < 6:
            m = json.loads(ws.recv(timeout=TIMEOUT))
            assert m.get("method") == rpc.PASS, m
            streaming.add(m["params"]["requestId"])
        eventually(lambda: replicas(app)[victim]["activeJobs"] >= 4, "the plain request running on its replica")
        os.kill(pids[victim], signal.SIGKILL)
        killed_at = time.monotonic()
        while len(answers) < 6:
            m = json.loads(ws.recv(timeout=TIMEOUT))
            if "id" in m:
                answers[m["id"]] = m
        retried = plain.result(TIMEOUT)
    assert time.monotonic() - killed_at < TIMEOUT
    lost = [a for a in answers.values() if "error" in a]
    assert sorted(a["id"] for a in lost) == [0, 1, 2]  # the victim's; the other replica's finished
    for a in lost:
        assert a["error"]["code"] == rpc.SERVER_OVERLOADED and a["error"]["data"]["limit"] == "replica"
        assert "stopped" in a["error"]["message"] and a["error"]["data"]["retryAfter"] >= 1
    assert all("result" in a for a in answers.values() if a not in lost)
    assert retried.status_code == 200 and retried.headers[REPLICA_HEADER] != victim
    assert metric(app, "edit_engine_ray_retries_total")[""] >= 1
    eventually(lambda: len(replicas(app)) == 2 and victim not in replicas(app), "a new replica", timeout=120)
    assert set(replicas(app)) != set(before)
    with httpx.Client(base_url=app, timeout=TIMEOUT) as c:
        r = c.post("/v1/completions", json={"prompt": "x = ", "max_tokens": 2}, headers={"X-Session-Id": session})
        assert r.status_code == 200


def on_replica(replica: str, ids: list[str], n: int) -> list[str]:
    """``n`` document names the router ranks ``replica`` first for (the same ranks the ingress computes)."""
    names = (f"file:///k{i}.py" for i in itertools.count())
    return list(itertools.islice((u for u in names if ids[ranks(document_key(u), ids)[0][0]] == replica), n))


def pid_by_replica(url: str) -> dict[str, int]:
    """Each replica's process id (``edit_engine_replica_info``)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=TIMEOUT).text
    return {s.labels["replica"]: int(s.labels["pid"]) for fam in text_string_to_metric_families(text)
            for s in fam.samples if s.name == "edit_engine_replica_info"}


# ---------------------------------------------------------------------------------------------------- the command
@pytest.fixture(scope="module")
def command(cluster: LocalCluster, proxy_port: int, tiny_checkpoint: Path) -> Iterator[Command]:
    """Autoscaled from one replica to two (aiming at one request per replica); a replica runs one request at a
    time, one more may wait; every other is refused."""
    for deployer in list(Deployer.running):  # the command deploys under the same name, on the same proxy
        deployer.stop()
    cmd = Command(cluster, proxy_port, "--model", str(tiny_checkpoint), "--autoscale", "1:2", "--max-tokens", "256",
                  "--target-ongoing-requests", "1", "--max-ongoing-requests", "1", "--max-queued-requests", "1",
                  "--retry-after-s", "2")
    try:
        yield cmd
    finally:
        cmd.stop()


@pytest.mark.slow
def test_full_replicas_answer_503_and_32001(command: Command) -> None:
    """Every replica full and the queue full: HTTP 503 with Retry-After in the OpenAI error shape, -32001 on the
    websocket; nothing waits without bound and the requests admitted are answered."""
    body = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 256}
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: httpx.post(command.url + "/v1/completions", json=body, timeout=TIMEOUT),
                                range(6)))
    refused = [r for r in results if r.status_code == 503]
    assert refused and any(r.status_code == 200 for r in results), [r.status_code for r in results]
    for r in refused:
        assert r.headers.get("retry-after") == "2", (r.headers, r.text)
        assert r.json()["error"]["type"] == "server_error" and r.json()["error"]["code"] == "max_queued_requests"
    with connect(command.url.replace("http", "ws") + "/v1/stream", open_timeout=TIMEOUT) as ws:
        for i in range(6):
            ws.send(request(i, prefix=PREFIX, suffix=SUFFIX, maxTokens=256, stream=False))
        answers = [a for _, a in until_answers(ws, list(range(6))).values()]
    errors = [a["error"] for a in answers if "error" in a]
    assert errors and any("result" in a for a in answers)
    assert all(e["code"] == rpc.SERVER_OVERLOADED and e["data"] == {"limit": "max_queued_requests", "retryAfter": 2}
               for e in errors)


@pytest.mark.slow
def test_sustained_load_adds_a_replica(command: Command) -> None:
    """Clients that keep the one replica busy (and retry when refused) make the autoscaler start a second."""
    assert len(replicas(command.url)) == 1
    stop = threading.Event()

    def client() -> None:
        body = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 256}
        while not stop.is_set():
            r = httpx.post(command.url + "/v1/completions", json=body, timeout=TIMEOUT)
            assert r.status_code in (200, 503), r.text

    with ThreadPoolExecutor(3) as pool:
        load = [pool.submit(client) for _ in range(3)]
        try:
            eventually(lambda: len(replicas(command.url)) == 2, "a second replica", timeout=3 * TIMEOUT)
        finally:
            stop.set()
        for f in load:
            f.result(TIMEOUT)


@pytest.mark.slow
def test_the_command_stops_cleanly(command: Command) -> None:
    """SIGTERM: the application is deleted (its replica processes end), the command exits 0; the cluster's
    Serve proxy stays up and no longer knows the routes."""
    pids = list(pid_by_replica(command.url).values())
    assert pids and command.stop() == 0
    eventually(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), "the replica processes to end")
    assert httpx.get(command.url + "/healthz", timeout=TIMEOUT).status_code == 404
