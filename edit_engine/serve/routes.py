"""HTTP routes: OpenAI-compatible completions (fill-in-the-middle), apply edit and next edit (Mercury Edit's
chat-shaped requests), models, health, metrics, and the websocket.

Each route parses its request, calls the ``Service``, and formats the answer; errors are ``ServeError`` and
become responses in ``app.py``'s one handler.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Request, WebSocket
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from edit_engine.edits.budget import Stopped
from edit_engine.engine import default_region, guess_language, language_for_path
from edit_engine.serve.batching import Cancelled, Job
from edit_engine.serve.errors import ServeError
from edit_engine.serve.fim import cut_at_stop
from edit_engine.serve.protocol import (
    APPLY_SSE_DESCRIPTION,
    NEXT_EDIT_SSE_DESCRIPTION,
    SSE_DESCRIPTION,
    SSE_EVENT,
    ApplyRequest,
    ChatCompletionBody,
    CompletionBody,
    CompletionRequest,
    EditPrompt,
    EditRequest,
    chat_body,
    chat_chunk,
    completion_body,
    completion_chunk,
    error_responses,
    fenced,
    models_body,
)
from edit_engine.serve.serving import Service
from edit_engine.serve.ws import authorized, websocket_endpoint
from edit_engine.syntax.positions import line_starts

_T = TypeVar("_T")
STARTED = int(time.time())


def get_service(request: Request) -> Service:
    service = request.app.state.service
    assert isinstance(service, Service)
    return service


def require_key(request: Request) -> None:
    if not authorized(request.headers.get("authorization"), get_service(request).settings.api_key):
        raise ServeError("unauthorized", "missing or wrong API key (send 'Authorization: Bearer KEY')")


public = APIRouter()
protected = APIRouter(dependencies=[Depends(require_key)], responses=error_responses(401, 403, 408, 503))
COMPLETION_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": CompletionBody, "description": "the completion (JSON), or its stream",
          "content": {"text/event-stream": {"schema": SSE_EVENT, "description": SSE_DESCRIPTION}}},
    **error_responses(400, 404, 411, 413, 500),
}


APPLY_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": ChatCompletionBody, "description": "the merged file (JSON), or its stream",
          "content": {"text/event-stream": {"schema": SSE_EVENT, "description": APPLY_SSE_DESCRIPTION}}},
    **error_responses(400, 404, 411, 413, 500),
}
NEXT_EDIT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": ChatCompletionBody, "description": "the editable region after the next edit (JSON), or its stream",
          "content": {"text/event-stream": {"schema": SSE_EVENT, "description": NEXT_EDIT_SSE_DESCRIPTION}}},
    **error_responses(400, 404, 411, 413, 500),
}
APPLY_PIECE_CHARS = 4096  # a streamed merge is sent in pieces of about this many characters, at line ends


@public.get("/healthz")
async def healthz(service: Service = Depends(get_service)) -> dict[str, Any]:
    return {"status": "ok", "model": service.model_name, "dtype": service.engine.dtype,
            "queueDepth": service.scheduler.queue_depth}


@protected.get("/metrics", response_class=PlainTextResponse, responses={200: {
    "description": "Prometheus text exposition", "content": {"text/plain": {"schema": {"type": "string"}}}}})
async def metrics(service: Service = Depends(get_service)) -> Response:
    return PlainTextResponse(service.metrics.render(), media_type="text/plain; version=0.0.4")


@protected.get("/v1/models")
async def models(service: Service = Depends(get_service)) -> dict[str, Any]:
    return models_body(service.model_name, STARTED)


@protected.post("/v1/completions", response_model=None, responses=COMPLETION_RESPONSES)
@protected.post("/v1/fim/completions", response_model=None, responses=COMPLETION_RESPONSES)
async def completions(body: CompletionRequest, service: Service = Depends(get_service)) -> Response:
    """Fill-in-the-middle: ``prompt`` is the text before the cursor, ``suffix`` the text after it (or, without
    ``suffix``, a prompt in a common FIM template, as editors written for other models send). ``related``
    (an extension): other files' text, searched for a copy of the fill. Each choice says who wrote the fill
    (``source``: model, copy or none, and ``reason`` for none; in a stream, in the final chunk)."""
    check_model(service, body.model)
    planned = service.plan_completion(body, stable=body.stream and not body.diffusing)
    spec = planned.spec
    assert spec is not None
    try:
        job = await service.start(planned)
    except ServeError as e:
        service.metrics.requests.inc(route="http", outcome="overloaded" if e.kind == "overloaded" else "error")
        raise
    cid = "cmpl-" + uuid.uuid4().hex[:24]
    model = service.model_name
    if body.stream:
        return StreamingResponse(_sse(service, job, cid, model, body.diffusing, body.stop_strings()),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    try:
        last = None
        async for p in job.passes():
            last = p
    except Cancelled as c:
        service.metrics.requests.inc(route="http", outcome="cancelled")
        raise ServeError("cancelled", str(c)) from c
    except Exception as e:  # the job failed (the scheduler logged it): this request's error, in the API's shape
        service.metrics.requests.inc(route="http", outcome="error")
        raise ServeError("internal", f"the request failed: {type(e).__name__}: {e}") from e
    finally:
        if last is None or not last.final:
            job.cancel("disconnect")
    assert last is not None
    service.metrics.requests.inc(route="http", outcome="ok")
    prompt_tokens = await asyncio.to_thread(lambda: service.count_tokens(spec.prefix) +
                                            service.count_tokens(spec.suffix))  # a large prompt: off the loop
    text, stopped = cut_at_stop(last.text, body.stop_strings())
    return JSONResponse(completion_body(cid, model, text, "complete" if stopped else last.stop_reason,
                                        prompt_tokens, service.count_tokens(text), source=last.source,
                                        reason=last.reason))


async def _sse(service: Service, job: Job, cid: str, model: str, diffusing: bool,
               stop: list[str]) -> AsyncIterator[str]:
    """``data: {...}`` chunks, then ``data: [DONE]``. Diffusing: each chunk is the whole span (replace);
    otherwise appended deltas of the committed leading text; the final chunk says who wrote the fill. Text from
    a ``stop`` string on is never sent. A client that goes away cancels the job."""
    created = int(time.time())
    sent = ""
    finished = False
    try:
        async for p in job.passes():
            text, stopped = cut_at_stop(p.text if diffusing or p.final else (p.stable or ""), stop)
            reason = ("stop" if stopped else _finish(p.stop_reason)) if p.final else None
            source = p.source if p.final else None
            if diffusing:
                yield _data(completion_chunk(cid, model, created, text, reason, source, p.reason))
            else:
                delta = text[len(sent) :] if text.startswith(sent) else ""
                if delta or p.final:
                    sent += delta
                    yield _data(completion_chunk(cid, model, created, delta, reason, source, p.reason))
            finished = p.final
        service.metrics.requests.inc(route="http", outcome="ok")
    except Cancelled as c:
        service.metrics.requests.inc(route="http", outcome="cancelled")
        err = ServeError("cancelled", str(c))
        yield _data(err.http_body())
    except Exception as e:  # the job failed (the scheduler logged it): an error event, then [DONE]
        service.metrics.requests.inc(route="http", outcome="error")
        yield _data(ServeError("internal", f"the request failed: {type(e).__name__}: {e}").http_body())
    finally:
        if not finished and not job.cancelled:  # the client went away mid-stream
            service.metrics.cancellations.inc(reason="disconnect")
            job.cancel("disconnect")
    yield "data: [DONE]\n\n"


def _finish(stop_reason: str) -> str:
    return "length" if stop_reason == "length" else "stop"


def _data(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def check_model(service: Service, model: str | None) -> None:
    if model and model != service.model_name:
        raise ServeError("model_not_found", f"the model {model!r} does not exist here (GET /v1/models lists "
                         f"{service.model_name!r})")


def check_size(service: Service, what: str, text: str) -> None:
    limit = service.settings.max_document_chars
    if len(text) > limit:
        raise ServeError("too_large", f"{what} of {len(text):,} characters exceeds the limit of {limit:,}",
                         limit="max_document_chars")


@protected.post("/v1/apply/completions", response_model=None, responses=APPLY_RESPONSES)
async def apply_completions(body: ApplyRequest, request: Request,
                            service: Service = Depends(get_service)) -> Response:
    """Apply edit (Mercury Edit's request): merge the ``<|update_snippet|>`` (code with ``# ... existing code
    ...`` markers) into the ``<|original_code|>`` of the last user message; the answer is the merged file, as an
    OpenAI chat completion (or its stream)."""
    check_model(service, body.model)
    try:
        original, update = body.parts()
    except ValueError as e:
        raise ServeError("invalid_params", str(e)) from e
    check_size(service, "the original code", original)
    check_size(service, "the update snippet", update)

    def run(should_stop: Callable[[], bool]) -> tuple[Any, int, int]:  # parses, may run the model: off the loop
        r = service.engine.apply(original, update, body.language, should_stop=should_stop)
        prompt = sum(service.count_tokens(m.text()) for m in body.messages)
        return r, prompt, service.count_tokens(r.text)

    result, prompt_tokens, completion_tokens = await _edit_work(service, request, run)
    cid = "chatcmpl-" + uuid.uuid4().hex[:24]
    if body.stream:
        return StreamingResponse(_apply_sse(cid, service.model_name, [p for _, p in result.segments]),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    return JSONResponse(chat_body(cid, service.model_name, result.text, prompt_tokens, completion_tokens))


async def _edit_work(service: Service, request: Request, run: Callable[[Callable[[], bool]], _T]) -> _T:
    """A next edit or apply request's work on the server's edit threads (``EditWork``: it parses, and may run
    the model), stopped when the client disconnects; counted: a ValueError is the caller's to fix (400),
    anything else this request's failure (500), in the API's error shape."""
    gone = asyncio.Event()

    async def watch() -> None:  # the body is read: the next message is the client's disconnect
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gone.set()

    watcher = asyncio.create_task(watch())
    try:
        out = await service.edit_work.run(run, gone.is_set)
    except ServeError:
        service.metrics.requests.inc(route="http", outcome="error")
        raise
    except ValueError as e:
        service.metrics.requests.inc(route="http", outcome="error")
        raise ServeError("invalid_params", str(e)) from e
    except Exception as e:  # a bug: this request's error, in the API's shape
        service.metrics.requests.inc(route="http", outcome="error")
        raise ServeError("internal", f"the request failed: {type(e).__name__}: {e}") from e
    finally:
        watcher.cancel()
    service.metrics.requests.inc(route="http", outcome="ok")
    return out


async def _apply_sse(cid: str, model: str, segments: list[str]) -> AsyncIterator[str]:
    """The merged file as ``chat.completion.chunk`` deltas: its pieces (kept original, placed chunk) in order,
    long ones cut at line ends; then an empty delta with ``finish_reason: stop`` and ``[DONE]``."""
    created = int(time.time())
    yield _data(chat_chunk(cid, model, created, {"role": "assistant", "content": ""}, None))
    for seg in segments:
        while seg:
            cut = seg.find("\n", APPLY_PIECE_CHARS) + 1 or len(seg)
            yield _data(chat_chunk(cid, model, created, {"content": seg[:cut]}, None))
            seg = seg[cut:]
    yield _data(chat_chunk(cid, model, created, {}, "stop"))
    yield "data: [DONE]\n\n"


@protected.post("/v1/edit/completions", response_model=None, responses=NEXT_EDIT_RESPONSES)
async def edit_completions(body: EditRequest, request: Request, service: Service = Depends(get_service)) -> Response:
    """Next edit (Mercury Edit's request): from the ``<|edit_diff_history|>``, propose the next change inside the
    ``<|code_to_edit|>`` region of the ``<|current_file_content|>``; the answer is that region after the edit (or
    as it is, when there is none) between lines of three backticks, as an OpenAI chat completion (or its
    stream)."""
    check_model(service, body.model)
    try:
        prompt = body.prompt()
    except ValueError as e:
        raise ServeError("invalid_params", str(e)) from e
    check_size(service, "the current file", prompt.document)
    check_size(service, "the edit history", "".join(prompt.history))
    check_size(service, "the related snippets", "".join(prompt.related))

    def run(should_stop: Callable[[], bool]) -> tuple[str, int, int]:  # parses, may run the model: off the loop
        region = _next_region(service, prompt, body.language, should_stop)
        prompt_tokens = sum(service.count_tokens(m.text()) for m in body.messages)
        return region, prompt_tokens, service.count_tokens(region)

    region, prompt_tokens, completion_tokens = await _edit_work(service, request, run)
    cid = "chatcmpl-" + uuid.uuid4().hex[:24]
    answer = fenced(region)
    if body.stream:
        return StreamingResponse(_apply_sse(cid, service.model_name, [answer]), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    return JSONResponse(chat_body(cid, service.model_name, answer, prompt_tokens, completion_tokens))


def _next_region(service: Service, prompt: EditPrompt, language: str, should_stop: Callable[[], bool]) -> str:
    """The prompt's editable region after the engine's next edit (as it is when there is none). Without
    ``<|code_to_edit|>`` tags the region is the engine's default around the cursor."""
    doc = prompt.document
    if language == "auto":
        language = language_for_path(prompt.path or "")
        language = guess_language(doc) if language == "plaintext" else language
    if prompt.region is not None:
        start, end = prompt.region
        rows = (doc.count("\n", 0, start), doc.count("\n", 0, max(start, end - 1)) + 1)
    else:
        rows = default_region(doc, prompt.cursor)
        starts = line_starts(doc)
        start, end = starts[rows[0]], starts[rows[1]] if rows[1] < len(starts) else len(doc)
    ne = service.engine.next_edit(doc, prompt.cursor, prompt.history, language, prompt.related, rows,
                                  should_stop=should_stop)
    if should_stop():
        raise Stopped("next edit")
    new = doc[start:end]
    if ne is not None and start <= ne.start <= ne.end <= end:
        new = ne.apply(doc)[start : end + len(ne.text) - (ne.end - ne.start)]
    return new[:-1] if new.endswith("\n") and doc[start:end].endswith("\n") else new


@public.websocket("/v1/stream")
async def stream(ws: WebSocket) -> None:
    service = ws.app.state.service
    assert isinstance(service, Service)
    await websocket_endpoint(ws, service)
