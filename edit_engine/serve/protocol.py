"""Request and response models of the HTTP and websocket APIs (pydantic, strict: a wrong type is an error).

JSON-RPC method names, error codes and the pass / response shapes shared with the language server live in
``edit_engine.protocol``; this module adds the parameter models and the OpenAI-compatible bodies.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from edit_engine.decoding.sampler import SEED_MAX, SETTINGS
from edit_engine.serve.fim import MAX_STOP, MAX_STOP_CHARS, split_fim
from edit_engine.syntax.repair import MAX_ROUNDS

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


MAX_RELATED = 32  # related files (or snippets) in one request; their characters together: max_document_chars
RELATED_DESCRIPTION = ("other files' text (open documents, workspace files) the engine searches for a copy of the "
                       "fill; at most 32, their characters together at most the server's max_document_chars")


class InfillParams(BaseModel):
    """Params of ``editEngine/infill``: ``{prefix, suffix}`` or ``{text, position | offset, range?}``; ``related``:
    other files' text, searched for a copy of the fill (``Engine.plan_document``)."""

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
    related: list[str] | None = Field(default=None, max_length=MAX_RELATED)
    # A document request's repair rounds (its fill is checked either way; 0: cut to its longest prefix that
    # parses). None: the engine's full repair. An editor asking while the user types sends 0, as the language
    # server does for automatic inline completions.
    repairRounds: int | None = Field(default=None, ge=0, le=MAX_ROUNDS)


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


MAX_HISTORY = 64  # diffs in a next-edit request's history (the engine's ``next_edit.MAX_HISTORY``)


MAX_OTHERS = 16  # other open documents in a next-edit request (the engine's ``next_edit.MAX_OTHERS``)


class NextEditParams(BaseModel):
    """Params of ``editEngine/nextEdit``: the document, the cursor (``offset`` or ``position``), the user's recent
    edits (unified diffs, oldest first; the last yields ``text``), snippets of related code, optionally the
    editable region (``range``: its rows are the region; default: around the cursor) and the other open documents
    (``others``: uri -> text, the most relevant first) where, without a region, the edit may go when the document
    holds none (``othersFirst``: before it; the user is in the first of them, the history is this document's)."""

    model_config = _STRICT
    text: str
    position: Position | None = None
    offset: int | None = Field(default=None, ge=0, le=INT32_MAX)
    history: list[str] = Field(default_factory=list, max_length=MAX_HISTORY)
    related: list[str] | None = Field(default=None, max_length=MAX_RELATED)
    range: Range | None = None
    others: dict[str, str] | None = Field(default=None, max_length=MAX_OTHERS)
    othersFirst: bool = False
    languageId: str = "python"
    uri: str | None = None
    version: int | None = Field(default=None, ge=-INT32_MAX - 1, le=INT32_MAX)
    positionEncoding: Literal["utf-16", "utf-8", "utf-32"] = "utf-16"


def next_edit_result(edit: dict[str, Any] | None, kind: str | None, elapsed_ms: float,
                     patterns: list[str] | None = None, version: int | None = None) -> dict[str, Any]:
    """Result of an ``editEngine/nextEdit`` request: ``edit`` is ``{range, text}`` (plus ``uri`` when it is in one
    of the request's ``others``; the range is in that document) or None (no proposal)."""
    out: dict[str, Any] = {"edit": edit, "kind": kind, "elapsedMs": round(elapsed_ms, 2),
                           "patterns": patterns or []}
    if version is not None:
        out["version"] = version
    return out


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
    related: list[str] | None = Field(default=None, max_length=MAX_RELATED,
                                      description="extension: " + RELATED_DESCRIPTION)

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


NEXT_TAGS = {
    "file": ("<|current_file_content|>", "<|/current_file_content|>"),
    "history": ("<|edit_diff_history|>", "<|/edit_diff_history|>"),
    "related": ("<|recently_viewed_code_snippets|>", "<|/recently_viewed_code_snippets|>"),
    "snippet": ("<|recently_viewed_code_snippet|>", "<|/recently_viewed_code_snippet|>"),
    "region": ("<|code_to_edit|>", "<|/code_to_edit|>"),
}
CURSOR_TAG = "<|cursor|>"
_DIFF_START = re.compile(r"^(?:diff --git |Index: |--- (?!-)(?=.*\n\+\+\+ ))", re.M)


@dataclass(frozen=True)
class EditPrompt:
    """What a Mercury Edit next-edit prompt holds: the file (markers taken out), the cursor (a character offset),
    the editable region (character offsets of ``<|code_to_edit|>``'s rows; None without the tags), the history's
    diffs and the related snippets."""

    document: str
    cursor: int
    region: tuple[int, int] | None
    history: list[str] = field(default_factory=list)
    related: list[str] = field(default_factory=list)
    path: str | None = None

    @property
    def region_text(self) -> str:
        """The editable region as the prompt showed it (without the newline before its closing tag)."""
        if self.region is None:
            return ""
        text = self.document[self.region[0] : self.region[1]]
        return text[:-1] if text.endswith("\n") else text


def _block(content: str, tags: tuple[str, str]) -> str | None:
    """The text between a pair of tags, less one newline after the opening one and one before the closing one;
    None when the opening tag is missing (a missing closing tag: to the end)."""
    start = content.find(tags[0])
    if start < 0:
        return None
    end = content.find(tags[1], start + len(tags[0]))
    text = content[start + len(tags[0]) : end if end >= 0 else len(content)]
    text = text[1:] if text.startswith("\n") else text
    return text[:-1] if text.endswith("\n") else text


def split_diffs(text: str) -> list[str]:
    """The unified diffs of an ``<|edit_diff_history|>`` block, oldest first: it is cut before each file header
    (``diff --git``, ``Index:``, ``--- a`` followed by ``+++ b``); a piece without an ``@@`` hunk (a note in
    words) is left out."""
    cuts = [m.start() for m in _DIFF_START.finditer(text)]
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    out = []
    for piece in pieces:
        if re.search(r"^@@ ", piece, re.M) is None:
            continue
        out.append(piece if piece.endswith("\n") else piece + "\n")
    return out


def _file(body: str) -> tuple[str, int, tuple[int, int] | None, str | None]:
    """The document, cursor and region of a ``<|current_file_content|>`` block's text."""
    path = None
    first, _, rest = body.partition("\n")
    if first.startswith("current_file_path:"):
        path, body = first.removeprefix("current_file_path:").strip() or None, rest
    open_tag, close_tag = NEXT_TAGS["region"]
    a = body.find(open_tag)
    b = body.find(close_tag, a + len(open_tag)) if a >= 0 else -1
    if a < 0 or b < 0:
        pre, inner, post = body.replace(open_tag, "").replace(close_tag, ""), None, ""
    else:
        pre, inner, post = body[:a], body[a + len(open_tag) : b], body[b + len(close_tag) :]
        inner = inner[1:] if inner.startswith("\n") else inner
        if post.startswith("\n") and (inner.endswith("\n") or not inner):
            post = post[1:]  # the closing tag's own line
    cursor = -1
    parts: list[str] = []
    for piece in (pre, inner, post):
        if piece is not None and CURSOR_TAG in piece:
            k = piece.find(CURSOR_TAG)
            if cursor < 0:
                cursor = sum(len(x) for x in parts) + k
            piece = piece.replace(CURSOR_TAG, "")
        parts.append(piece or "")
    document = "".join(parts)
    region = (len(parts[0]), len(parts[0]) + len(parts[1])) if inner is not None else None
    if cursor < 0:
        cursor = region[0] if region is not None else 0
    return document, cursor, region, path


def parse_edit_prompt(content: str) -> EditPrompt:
    """A Mercury Edit next-edit prompt's parts. Raises ValueError without a ``<|current_file_content|>``."""
    body = _block(content, NEXT_TAGS["file"])
    if body is None:
        raise ValueError("the user message holds no <|current_file_content|> block")
    document, cursor, region, path = _file(body)
    history = split_diffs(_block(content, NEXT_TAGS["history"]) or "")
    related_text = _block(content, NEXT_TAGS["related"]) or ""
    snippets = re.findall(re.escape(NEXT_TAGS["snippet"][0]) + r"\n?(.*?)\n?" + re.escape(NEXT_TAGS["snippet"][1]),
                          related_text, re.S)
    if not snippets and related_text.strip():
        snippets = [related_text]
    related = [re.sub(r"\Acode_snippet_file_path:[^\n]*\n?", "", x) for x in snippets]
    return EditPrompt(document, cursor, region, history, [x for x in related if x.strip()], path)


class EditRequest(BaseModel):
    """Mercury Edit's next-edit request (Inception): an OpenAI chat body whose last user message holds the file
    (``<|current_file_content|>``, with the editable region between ``<|code_to_edit|>`` tags and the cursor at
    ``<|cursor|>``), the recent edits (``<|edit_diff_history|>``: unified diffs, oldest first) and related code
    (``<|recently_viewed_code_snippets|>``). ``language`` (an extension) defaults to the file path's, else a
    guess."""

    model_config = ConfigDict(strict=True, extra="ignore")
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    n: int = Field(default=1, ge=1, le=1)
    max_tokens: int | None = Field(default=None, ge=1, le=INT32_MAX,
                                   description="accepted as clients send it; the editable region bounds the answer")
    language: str = Field(default="auto", max_length=64, description="the code's language; auto: from the path")

    def prompt(self) -> EditPrompt:
        """The last user message's parts; ValueError when it lacks the file."""
        users = [m for m in self.messages if m.role == "user"]
        if not users:
            raise ValueError("no user message: send the next-edit prompt in one")
        return parse_edit_prompt(users[-1].text())


def fenced(text: str) -> str:
    """The region as Mercury Edit answers it: between lines of three backticks."""
    return f"```\n{text}\n```"


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


def fill_source(source: str | None, reason: str = "") -> dict[str, str]:
    """The extension fields that say who wrote a fill (``source``: model, copy or none; ``reason`` when there
    is one), as a completion's choice and the websocket's final messages carry them; {} without a source."""
    if source is None:
        return {}
    return {"source": source, **({"reason": reason} if reason else {})}


def completion_body(cid: str, model: str, text: str, stop_reason: str, prompt_tokens: int,
                    completion_tokens: int, created: int | None = None, source: str = "model",
                    reason: str = "") -> dict[str, Any]:
    choice = {"index": 0, "text": text, "finish_reason": FINISH.get(stop_reason, "stop"), "logprobs": None,
              **fill_source(source, reason)}
    return {
        "id": cid, "object": "text_completion", "created": created or int(time.time()), "model": model,
        "choices": [choice],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def completion_chunk(cid: str, model: str, created: int, text: str, finish_reason: str | None,
                     source: str | None = None, reason: str = "") -> dict[str, Any]:
    """One streamed chunk; the final one (``source`` given) says who wrote the fill."""
    return {"id": cid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None,
                         **fill_source(source, reason)}]}


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


SOURCE_DESCRIPTION = ("extension: who wrote the fill: model (denoised), copy (a copy from the document or a related "
                      "file, verified by the model), none (no fill: see reason). In the response, and in the "
                      "final chunk of a stream")


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: Literal["stop", "length"] | None
    logprobs: None = None
    source: str | None = Field(default=None, description=SOURCE_DESCRIPTION)
    reason: str | None = Field(default=None, description="extension: why there is no fill (source none), e.g. a "
                                                         "language the model was not trained on")


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


NEXT_EDIT_SSE_DESCRIPTION = ("With ``stream: true``: server-sent events, each ``data: {...}`` a "
                             "``chat.completion.chunk`` whose ``choices[0].delta.content`` is the next piece of the "
                             "answer (the editable region after the edit, between lines of three backticks; append; "
                             "the first chunk also carries ``role``, the last has an empty delta and "
                             "``finish_reason: stop``). The stream ends with ``data: [DONE]``.")

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
