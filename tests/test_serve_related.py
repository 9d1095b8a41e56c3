"""Related files and answers settled while planning, through ``edit-engine serve``: ``related`` on the websocket's
``editEngine/infill`` and on ``/v1/completions`` reaches ``Engine.plan_document`` on every path, bad ``related``
is refused in each endpoint's error shape, a plan with an ``answer`` runs no forward pass and is the final pass,
and every answer says who wrote the fill (``source``, ``reason``).

The server tests run a real uvicorn server on a loopback port with the tiny model, served by an ``Engine``
subclass that records what ``plan_document`` is given (and, when told to, settles the plan with an answer).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import httpx
import pytest
import torch
from websockets.sync.client import ClientConnection, connect

from edit_engine import protocol as rpc
from edit_engine.engine import DocumentPlan, Engine
from edit_engine.engine.document import Answer
from edit_engine.model.network import ContextCache, DiffusionLM
from edit_engine.model.tokenizer import Tokenizer
from edit_engine.serve.app import BackgroundServer, create_app
from edit_engine.serve.batching import JobPass, JobSpec, Scheduler
from edit_engine.serve.metrics import Metrics
from edit_engine.serve.protocol import MAX_RELATED
from edit_engine.serve.serving import document_spec, insertion_at
from edit_engine.serve.settings import Settings

TIMEOUT = 30.0  # seconds: every wait in these tests is bounded by it
DOC = "def add(a, b):\n    return \n\nprint(add(1, 2))\n"
CURSOR = DOC.index("return ") + len("return ")
RELATED = ["def add(x, y):\n    return x + y\n", "import math\n"]
PREFIX, SUFFIX = DOC[:CURSOR], DOC[CURSOR:]
MAX_CHARS = 4_000  # the test server's max_document_chars


class RecordingEngine(Engine):
    """An engine that records every ``plan_document`` call's (text, offset, related) and, while ``answer`` is
    set, settles the plan with it; ``batched=False`` makes the server run whole engine streams instead of
    batching first rounds."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.calls: list[tuple[str, int, list[str] | None]] = []
        self.repairs: list[bool | int] = []  # each call's ``repair``
        self.answer: Answer | None = None
        self.batched = True

    @property
    def batchable(self) -> bool:
        return self.batched and super().batchable

    def plan_document(self, text: str, offset: int, language: str = "python",
                      selection: tuple[int, int] | None = None, max_tokens: int | None = None, mode: str = "insert",
                      repair: bool | int = True, uri: str | None = None, related: list[str] | None = None,
                      **overrides: Any) -> DocumentPlan:
        self.calls.append((text, offset, related))
        self.repairs.append(repair)
        dp = super().plan_document(text, offset, language, selection, max_tokens, mode, repair, uri, related,
                                   **overrides)
        return dp if self.answer is None else replace(dp, answer=self.answer)


@pytest.fixture()
def engine(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> RecordingEngine:
    return RecordingEngine(tiny_model, tiny_tokenizer)


@contextmanager
def serving(engine: Engine) -> Iterator[BackgroundServer]:
    settings = Settings(port=0, log_level="warning", max_tokens=16, max_document_chars=MAX_CHARS)
    with BackgroundServer(create_app(settings, engine=engine), settings) as server:
        yield server


@pytest.fixture()
def server(engine: RecordingEngine) -> Iterator[BackgroundServer]:
    with serving(engine) as s:
        yield s


# ---------------------------------------------------------------------------------------------------- helpers
def infill(ws: ClientConnection, rid: int, **params: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Send an ``editEngine/infill`` request; its pass notifications and its answer."""
    ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.INFILL, "params": params}))
    passes = []
    for _ in range(10_000):
        m = json.loads(ws.recv(timeout=TIMEOUT))
        if m.get("method") == rpc.PASS and m["params"]["requestId"] == rid:
            passes.append(m["params"])
        elif m.get("id") == rid:
            return passes, m
    raise AssertionError(f"no answer for {rid}")


def forward_passes(server: BackgroundServer) -> float:
    text = httpx.get(server.url + "/metrics", timeout=TIMEOUT).text
    for line in text.splitlines():
        if line.startswith("edit_engine_forward_passes_total "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def sse_data(text: str) -> list[str]:
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


def complete(server: BackgroundServer, **body: Any) -> httpx.Response:
    return httpx.post(server.url + "/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 8,
                                                            **body}, timeout=TIMEOUT)


# ---------------------------------------------------------------------------------------------------- the scheduler
def _run(sched: Scheduler, specs: list[JobSpec]) -> list[list[JobPass]]:
    async def go() -> list[list[JobPass]]:
        loop = asyncio.get_running_loop()
        jobs = [sched.submit(s, loop) for s in specs]

        async def collect(j):  # type: ignore[no-untyped-def]
            return [p async for p in j.passes()]

        return list(await asyncio.wait_for(asyncio.gather(*(collect(j) for j in jobs)), 120))

    return asyncio.run(go())


@pytest.mark.parametrize("answer", [Answer("a + b", "copy", nfe=1),
                                    Answer("", "none", "cobol: a language the model was not trained on")])
def test_a_plan_with_an_answer_runs_no_forward_pass_and_is_the_final_pass(tiny_model: DiffusionLM,
                                                                         tiny_tokenizer: Tokenizer,
                                                                         answer: Answer) -> None:
    """The scheduler answers a settled plan at once: no context encoded, no canvas pass; its one pass is final
    and carries the answer's text, nfe, source and reason at the planned span. A plan without an answer, in the
    same scheduler, does run forward passes (the count can fail)."""
    engine = Engine(tiny_model, tiny_tokenizer)
    dp = engine.plan_document(DOC, CURSOR)
    calls = {"canvas": 0, "encode": 0}
    canvas_logits, encode_context = tiny_model.canvas_logits, tiny_model.encode_context

    def counted_canvas(canvas: torch.Tensor, cache: ContextCache) -> torch.Tensor:
        calls["canvas"] += 1
        return canvas_logits(canvas, cache)

    def counted_encode(*args: Any, **kw: Any) -> ContextCache:
        calls["encode"] += 1
        return encode_context(*args, **kw)

    tiny_model.canvas_logits = counted_canvas  # type: ignore[method-assign]
    tiny_model.encode_context = counted_encode  # type: ignore[method-assign]
    metrics = Metrics()
    sched = Scheduler(engine, metrics)
    try:
        (settled,) = _run(sched, [document_spec(engine, replace(dp, answer=answer))])
        assert calls == {"canvas": 0, "encode": 0}
        assert metrics.forward_passes.value() == 0
        (plain,) = _run(sched, [document_spec(engine, dp)])
    finally:
        del tiny_model.canvas_logits, tiny_model.encode_context
        sched.close()
    assert [(p.index, p.text, p.masked, p.final, p.nfe, p.stop_reason, p.source, p.reason, p.start, p.end)
            for p in settled] == [(0, answer.text, 0, True, answer.nfe, "complete", answer.source, answer.reason,
                                   dp.start, dp.end)]
    assert calls["canvas"] >= 1 and plain[-1].final and plain[-1].source == "model"


def test_an_answer_is_written_as_an_insertion_at_the_cursor_or_not_at_all() -> None:
    text = "ab|cd"
    assert insertion_at(text, 2, 2, 2, "XY") == "XY"
    assert insertion_at(text, 2, 1, 2, "bXY") == "XY"  # the span starts before the cursor with the same text
    assert insertion_at(text, 2, 2, 3, "XY|") == "XY"  # and ends after it with the same text
    assert insertion_at(text, 2, 1, 2, "zXY") is None  # it changes text before the cursor
    assert insertion_at(text, 2, 2, 5, "") is None  # it deletes text after the cursor


# ---------------------------------------------------------------------------------------------------- the server
def test_ws_document_request_passes_related_to_the_engine(server: BackgroundServer,
                                                          engine: RecordingEngine) -> None:
    with connect(server.ws_url) as ws:
        passes, answer = infill(ws, 1, text=DOC, offset=CURSOR, related=RELATED, maxTokens=8)
    assert engine.calls == [(DOC, CURSOR, RELATED)]
    result = answer["result"]
    assert result["source"] == "model" and "reason" not in result
    assert passes[-1]["final"] and passes[-1]["source"] == "model" and passes[-1]["text"] == result["text"]
    assert all("source" not in p for p in passes[:-1])


def test_ws_hole_request_with_related_is_planned_for_an_answer(server: BackgroundServer,
                                                               engine: RecordingEngine) -> None:
    """A ``{prefix, suffix}`` request with related files is planned as the document prefix + suffix with the
    cursor between them; without related files it is not planned at all."""
    with connect(server.ws_url) as ws:
        _, plain = infill(ws, 1, prefix=PREFIX, suffix=SUFFIX, maxTokens=8)
        assert engine.calls == [] and plain["result"]["source"] == "model"
        _, answer = infill(ws, 2, prefix=PREFIX, suffix=SUFFIX, related=RELATED, maxTokens=8)
    assert engine.calls == [(DOC, CURSOR, RELATED)]
    assert answer["result"]["source"] == "model"


def test_ws_settled_request_runs_no_forward_pass(server: BackgroundServer, engine: RecordingEngine) -> None:
    engine.answer = Answer("a + b", "copy", nfe=1)
    before = forward_passes(server)
    with connect(server.ws_url) as ws:
        passes, answer = infill(ws, 1, text=DOC, offset=CURSOR, related=RELATED)
        assert [(p["passIndex"], p["final"], p["text"], p["source"]) for p in passes] == [(0, True, "a + b", "copy")]
        r = answer["result"]
        assert (r["text"], r["nfe"], r["passes"], r["stopReason"], r["source"]) == ("a + b", 1, 1, "complete", "copy")
        assert r["range"] == {"start": {"line": 1, "character": 11}, "end": {"line": 1, "character": 11}}
        assert "elapsedMs" in r
        engine.answer = Answer("", "none", "not trained on this language")
        _, none = infill(ws, 2, prefix=PREFIX, suffix=SUFFIX, related=RELATED, stream=False)
        assert (none["result"]["text"], none["result"]["source"], none["result"]["reason"]) == \
               ("", "none", "not trained on this language")
    assert forward_passes(server) == before


def test_http_completion_passes_related_and_says_who_wrote_the_fill(server: BackgroundServer,
                                                                   engine: RecordingEngine) -> None:
    r = complete(server)
    assert r.status_code == 200 and r.json()["choices"][0]["source"] == "model" and engine.calls == []
    r = complete(server, related=RELATED)
    assert r.status_code == 200, r.text
    assert engine.calls == [(DOC, CURSOR, RELATED)]
    choice = r.json()["choices"][0]
    assert choice["source"] == "model" and "reason" not in choice


@pytest.mark.parametrize("diffusing", [False, True])
def test_http_settled_completion_and_its_stream(server: BackgroundServer, engine: RecordingEngine,
                                                diffusing: bool) -> None:
    engine.answer = Answer("a + b", "copy", nfe=1)
    before = forward_passes(server)
    r = complete(server, related=RELATED)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert (choice["text"], choice["source"], choice["finish_reason"]) == ("a + b", "copy", "stop")
    r = complete(server, related=RELATED, stream=True, diffusing=diffusing)
    events = sse_data(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
    assert "".join(c["text"] for c in chunks) == "a + b"
    assert chunks[-1]["finish_reason"] == "stop" and chunks[-1]["source"] == "copy"
    engine.answer = Answer("", "none", "not trained on this language")
    choice = complete(server, related=RELATED).json()["choices"][0]
    assert (choice["text"], choice["source"], choice["reason"]) == ("", "none", "not trained on this language")
    assert forward_passes(server) == before


def test_unbatched_document_request_passes_related_to_the_engine(server: BackgroundServer,
                                                                 engine: RecordingEngine) -> None:
    """An engine whose first rounds the server cannot batch runs ``Engine.stream_complete`` whole: related files
    reach its planning too, and its final pass's source and reason reach the client."""
    engine.batched = False
    with connect(server.ws_url) as ws:
        passes, answer = infill(ws, 1, text=DOC, offset=CURSOR, related=RELATED, maxTokens=8)
        assert engine.calls == [(DOC, CURSOR, RELATED)]
        assert answer["result"]["source"] == passes[-1]["source"] == "model"
        engine.answer = Answer("", "none", "not trained on this language")
        passes, answer = infill(ws, 2, text=DOC, offset=CURSOR, related=RELATED)
    assert (answer["result"]["text"], answer["result"]["source"], answer["result"]["reason"]) == \
           ("", "none", "not trained on this language")
    assert passes[-1]["reason"] == "not trained on this language"


@pytest.mark.parametrize("batched", [True, False])
def test_ws_repair_rounds_reach_the_engine_and_bad_ones_are_refused(server: BackgroundServer,
                                                                   engine: RecordingEngine, batched: bool) -> None:
    """``repairRounds`` (0 while the user types) reaches the engine's planning on the batched and the unbatched
    path, and without it the engine's full repair runs; a value out of range or not an integer is -32602, names
    the field and reaches nothing, and the connection keeps serving."""
    engine.batched = batched
    with connect(server.ws_url) as ws:
        for i, bad in enumerate((-1, 3, "0", 1.5, True)):
            passes, answer = infill(ws, i, text=DOC, offset=CURSOR, maxTokens=4, repairRounds=bad)
            assert passes == [] and answer["error"]["code"] == rpc.INVALID_PARAMS, answer
            assert "repairRounds" in answer["error"]["message"]
        assert engine.calls == []
        for rid, extra in ((10, {"repairRounds": 0}), (11, {"repairRounds": 2}), (12, {})):
            passes, answer = infill(ws, rid, text=DOC, offset=CURSOR, maxTokens=4, **extra)
            assert passes[-1]["final"] and answer["result"]["text"] == passes[-1]["text"]
    assert engine.repairs == [0, 2, True]


BAD_RELATED: list[tuple[Any, str]] = [
    (["ok", 3], "invalid"),  # an item that is not a string
    ("def f(): pass", "invalid"),  # not a list
    ([{"text": "x"}], "invalid"),
    (["x"] * (MAX_RELATED + 1), "invalid"),  # too many
    (["x" * (MAX_CHARS // 2 + 1)] * 2, "too_large"),  # their characters together over max_document_chars
]


def test_ws_bad_related_is_refused_and_the_connection_keeps_serving(server: BackgroundServer,
                                                                    engine: RecordingEngine) -> None:
    with connect(server.ws_url) as ws:
        for i, (related, kind) in enumerate(BAD_RELATED):
            for params in ({"text": DOC, "offset": CURSOR}, {"prefix": PREFIX, "suffix": SUFFIX}):
                passes, answer = infill(ws, i, related=related, **params)
                assert passes == [] and "result" not in answer, answer
                err = answer["error"]
                if kind == "invalid":
                    assert err["code"] == rpc.INVALID_PARAMS and "related" in err["message"], err
                else:
                    assert err["code"] == rpc.SERVER_OVERLOADED and err["data"]["limit"] == "max_document_chars"
                    assert "related" in err["message"]
        assert engine.calls == []  # nothing refused reached the engine
        _, good = infill(ws, 99, text=DOC, offset=CURSOR, related=["x" * (MAX_CHARS // 2)] * 2, maxTokens=4)
    assert good["result"]["source"] == "model" and len(engine.calls) == 1


def test_http_bad_related_is_refused_in_the_error_shape(server: BackgroundServer, engine: RecordingEngine) -> None:
    for related, kind in BAD_RELATED:
        r = complete(server, related=related)
        assert r.status_code == (400 if kind == "invalid" else 413), r.text
        err = r.json()["error"]
        assert set(err) >= {"message", "type", "code"} and err["type"] == "invalid_request_error"
        if kind == "too_large":
            assert err["code"] == "max_document_chars" and "related" in err["message"]
    assert engine.calls == []
    r = complete(server, related=[])  # an empty list is no related files
    assert r.status_code == 200 and engine.calls == []


def test_the_openai_client_sends_related_and_keeps_source(server: BackgroundServer,
                                                          engine: RecordingEngine) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=TIMEOUT)
    engine.answer = Answer("a + b", "copy", nfe=1)
    r = client.completions.create(model="edit-engine", prompt=PREFIX, suffix=SUFFIX, max_tokens=8,
                                  extra_body={"related": RELATED})
    assert engine.calls == [(DOC, CURSOR, RELATED)]
    assert r.choices[0].text == "a + b" and (r.choices[0].model_extra or {})["source"] == "copy"


def test_the_openapi_schema_documents_related_and_source(server: BackgroundServer) -> None:
    spec = httpx.get(server.url + "/openapi.json", timeout=TIMEOUT).json()
    schemas = spec["components"]["schemas"]
    related = schemas["CompletionRequest"]["properties"]["related"]
    assert "copy" in related["description"] and any(
        s.get("type") == "array" and s.get("maxItems") == MAX_RELATED for s in related["anyOf"])
    assert {"source", "reason"} <= set(schemas["CompletionChoice"]["properties"])


# ---------------------------------------------------------------------------------------------------- packaged model
@pytest.mark.slow
def test_packaged_model_answers_with_related_files(packaged_engine: Engine) -> None:
    """The real model, related files on both endpoints: the requests succeed and say who wrote the fill."""
    doc = "from geometry import area\n\nprint(area(\n"
    related = ["def area(width, height):\n    return width * height\n",
               "from geometry import area\n\nprint(area(width, height))\n"]
    with serving(packaged_engine) as srv, connect(srv.ws_url) as ws:
        passes, answer = infill(ws, 1, text=doc, offset=doc.index("area(\n") + len("area("), related=related)
        result = answer["result"]
        assert result["source"] in ("model", "copy", "none") and passes[-1]["source"] == result["source"]
        assert passes[-1]["text"] == result["text"]
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": doc[: doc.index("area(\n") + 5], "suffix": "\n",
                                                           "related": related, "max_tokens": 16}, timeout=TIMEOUT)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["source"] in ("model", "copy", "none")
