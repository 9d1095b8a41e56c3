"""Request and response models of the HTTP and websocket APIs (pydantic, strict: a wrong type is an error).

JSON-RPC method names, error codes and the pass / response shapes shared with the language server live in
``edit_engine.protocol``; this module adds the parameter models and the OpenAI-compatible bodies.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..sampler import SEED_MAX, SETTINGS
from .fim import MAX_STOP, MAX_STOP_CHARS, split_fim

_STRICT = ConfigDict(strict=True, extra="ignore", populate_by_name=True)
INT32_MAX = 2**31 - 1  # LSP's integer; every integer field is bounded


# ---------------------------------------------------------------------------------------------------- websocket
class Position(BaseModel):
    model_config = _STRICT
    line: int = Field(ge=0, le=INT32_MAX)
    character: int = Field(ge=0, le=INT32_MAX)


class Range(BaseModel):
    model_config = _STRICT
    start: Position
    end: Position


class InfillParams(BaseModel):
    """Params of ``editEngine/infill``: ``{prefix, suffix}`` or ``{text, position | offset, range?}``."""

    model_config = _STRICT
    prefix: str | None = None
    suffix: str | None = None
    text: str | None = None
    position: Position | None = None
    offset: int | None = Field(default=None, ge=0, le=INT32_MAX)  # character offset into text (code points)
    range: Range | None = None  # rewrite this range of text
    languageId: str = "python"
    uri: str | None = None
    version: int | None = Field(default=None, ge=-INT32_MAX - 1, le=INT32_MAX)
    maxTokens: int | None = Field(default=None, ge=1, le=INT32_MAX)
    stream: bool = True
    positionEncoding: Literal["utf-16", "utf-8", "utf-32"] = "utf-16"


class RpcMessage(BaseModel):
    """The envelope; ``params`` are checked per method."""

    model_config = ConfigDict(strict=True, extra="forbid")
    jsonrpc: Literal["2.0"]
    method: str | None = None
    id: int | str | None = None
    params: dict[str, Any] | list[Any] | None = None
    result: Any = None
    error: Any = None


class CancelParams(BaseModel):
    model_config = _STRICT
    id: int | str


class ApplyParams(BaseModel):
    """Params of ``editEngine/apply``: merge ``update`` (code with ``# ... existing code ...`` markers) into
    ``original``. ``languageId``: an LSP id or ``auto`` (guessed from the code)."""

    model_config = _STRICT
    original: str
    update: str
    languageId: str = "python"


def apply_result(text: str, elapsed_ms: float, placements: list[dict[str, Any]]) -> dict[str, Any]:
    """Result of an ``editEngine/apply`` request."""
    return {"text": text, "elapsedMs": round(elapsed_ms, 2), "placements": placements}


# ---------------------------------------------------------------------------------------------------- HTTP
_StopString = Annotated[str, Field(max_length=MAX_STOP_CHARS)]


class CompletionRequest(BaseModel):
    """OpenAI ``/v1/completions`` with a suffix (fill-in-the-middle) and ``diffusing`` (Inception)."""

    model_config = ConfigDict(strict=True, extra="ignore")
    model: str | None = None
    prompt: str | list[str] = ""
    suffix: str | None = None
    max_tokens: int | None = Field(default=None, ge=SETTINGS["max_tokens"].lo, le=INT32_MAX)
    temperature: float | None = Field(default=None, ge=SETTINGS["temperature"].lo, le=SETTINGS["temperature"].hi)
    stream: bool = False
    diffusing: bool = False
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    n: int = Field(default=1, ge=1, le=1)
    stop: _StopString | Annotated[list[_StopString], Field(max_length=MAX_STOP)] | None = Field(
        default=None, description="the text ends before the first of these strings")

    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise ValueError("prompt must be a string or a list of exactly one string")
        return self.prompt[0]

    def prefix_suffix(self) -> tuple[str, str]:
        """The text before and after the cursor: ``prompt`` and ``suffix``, or, without ``suffix``, the two
        parts of a prompt written in a FIM template (``fim.split_fim``)."""
        prompt = self.prompt_text()
        if self.suffix is None:
            parts = split_fim(prompt)
            if parts is not None:
                return parts
        return prompt, self.suffix or ""

    def stop_strings(self) -> list[str]:
        return [] if self.stop is None else [self.stop] if isinstance(self.stop, str) else self.stop


ORIGINAL_TAGS = ("<|original_code|>", "<|/original_code|>")
UPDATE_TAGS = ("<|update_snippet|>", "<|/update_snippet|>")


class ChatContentPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ChatContentPart] | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(p.text for p in self.content)


def _tagged(content: str, tags: tuple[str, str]) -> str:
    """The text between a pair of tags, without the one newline after the opening tag and before the closing
    one that the request format puts there; ValueError when the pair is missing."""
    start = content.find(tags[0])
    end = content.find(tags[1], start + len(tags[0])) if start >= 0 else -1
    if end < 0:
        raise ValueError(f"the last user message holds no {tags[0]}...{tags[1]} block")
    text = content[start + len(tags[0]) : end]
    text = text[1:] if text.startswith("\n") else text
    return text[:-1] if text.endswith("\n") else text


class ApplyRequest(BaseModel):
    """Mercury Edit's apply request (Inception): an OpenAI chat body whose last user message holds the file
    between ``<|original_code|>`` and ``<|/original_code|>`` and the edit between ``<|update_snippet|>`` and
    ``<|/update_snippet|>``. ``language`` (an extension: a grammar name or LSP id) defaults to a guess."""

    model_config = ConfigDict(strict=True, extra="ignore")
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    n: int = Field(default=1, ge=1, le=1)
    language: str = Field(default="auto", max_length=64, description="the code's language; auto: guessed")

    def parts(self) -> tuple[str, str]:
        """(original, update) from the last user message; ValueError when it lacks them."""
        users = [m for m in self.messages if m.role == "user"]
        if not users:
            raise ValueError("no user message: send the original code and the update snippet in one")
        content = users[-1].text()
        return _tagged(content, ORIGINAL_TAGS), _tagged(content, UPDATE_TAGS)


def chat_body(cid: str, model: str, text: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def chat_chunk(cid: str, model: str, created: int, delta: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


FINISH = {"complete": "stop", "length": "length", "cancelled": "stop"}


def completion_body(cid: str, model: str, text: str, stop_reason: str, prompt_tokens: int,
                    completion_tokens: int, created: int | None = None) -> dict[str, Any]:
    return {
        "id": cid, "object": "text_completion", "created": created or int(time.time()), "model": model,
        "choices": [{"index": 0, "text": text, "finish_reason": FINISH.get(stop_reason, "stop"), "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def completion_chunk(cid: str, model: str, created: int, text: str, finish_reason: str | None) -> dict[str, Any]:
    return {"id": cid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}]}


def models_body(name: str, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": name, "object": "model", "created": created, "owned_by": "edit-engine"}]}


# ---------------------------------------------------------------------------------------------------- OpenAPI
# The bodies the routes build as dicts (``completion_body``, ``ServeError.http_body``), described for
# ``/openapi.json``.
class ErrorDetail(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, permission_error, server_error, "
                                  "cancelled")
    code: str = Field(description="the error's kind, or the limit that was hit (e.g. max_request_bytes)")
    param: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: Literal["stop", "length"] | None
    logprobs: None = None


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionBody(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage | None = Field(default=None, description="absent from stream chunks")


class ChatCompletionMessage(BaseModel):
    role: Literal["assistant"]
    content: str


class ChatCompletionChoice(BaseModel):
    index: int
    message: ChatCompletionMessage
    finish_reason: Literal["stop"]


class ChatCompletionBody(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatCompletionChoice]
    usage: CompletionUsage


APPLY_SSE_DESCRIPTION = ("With ``stream: true``: server-sent events, each ``data: {...}`` a ``chat.completion.chunk`` "
                         "whose ``choices[0].delta.content`` is the next piece of the merged file (append; the first "
                         "chunk also carries ``role``, the last has an empty delta and ``finish_reason: stop``). "
                         "The stream ends with ``data: [DONE]``.")

SSE_DESCRIPTION = ("With ``stream: true``: server-sent events, each ``data: {CompletionBody}`` (a chunk without "
                   "usage); with ``diffusing: true`` each chunk's text is the whole span so far (replace), "
                   "otherwise the newly committed text (append). An error mid-stream is a ``data: {ErrorBody}`` "
                   "event. The stream ends with ``data: [DONE]``.")

SSE_EVENT = {  # one server-sent event; its data is JSON (a CompletionBody chunk or an ErrorBody) or "[DONE]"
    "type": "object", "required": ["data"],
    "properties": {"data": {"type": "string", "contentMediaType": "application/json"}, "event": {"type": "string"}},
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error statuses, each with the ``ErrorBody`` schema."""
    words = {400: "bad request", 401: "missing or wrong API key", 403: "Host or Origin refused (no API key set)",
             404: "no such model or path", 408: "the body did not arrive in time", 411: "Content-Length missing",
             413: "request, document or max_tokens over a limit", 500: "the request failed",
             503: "overloaded: retry after Retry-After seconds"}
    return {s: {"model": ErrorBody, "description": words[s]} for s in statuses}
