"""LSP handlers: each converts a request to one engine call and converts the result back.

Every request that runs the model goes through ``_fill``: it supersedes the request in flight for the same
document, pulls the engine's passes one at a time in a worker thread (so the event loop keeps reading
``$/cancelRequest`` and ``didChange`` between passes), checks after each pass that the document has not
changed, optionally streams the pass to the client as ``editEngine/pass``, and returns the last pass. Position
conversions go through each document's line index (``lsp.documents``, which follows ``edit_engine.syntax.positions``);
nothing here knows about tokens or the model.

Documents over ``protocol.MAX_DOCUMENT_CHARS`` (the HTTP server's limit too) are kept in sync but never sent to
the model: the user is told once (``window/showMessage``), completions come back empty and ``editEngine/infill``
is answered -32001.

Requests that run the model also send the other open documents of the same language as related code
(``related_texts``: the most recently edited first, up to ``MAX_RELATED`` of them and ``MAX_RELATED_CHARS``).

``editEngine/nextEdit`` proposes the change after the user's recent edits (each document's history of diffs,
``lsp.history``): one ``Engine.next_edit`` call on the model thread, superseded by the next such request for the
document and stopped when it is cancelled or the document changes. A client that asks with ``otherDocuments``
(and no range) may get a change in another open document of the language (``open_documents``); the answer's
``textDocument`` says which. The proposal carries the command
``editEngine.applyNextEdit``, which sends it back to the client as ``workspace/applyEdit``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from lsprotocol import types
from pygls.exceptions import (
    FeatureRequestError,
    JsonRpcContentModified,
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcServerError,
)
from pygls.lsp.server import LanguageServer

from edit_engine import Engine, Pass, protocol
from edit_engine.edits.budget import OverBudget
from edit_engine.engine import MAX_OTHERS, NextEdit
from edit_engine.lsp import indexing, transport
from edit_engine.lsp import settings as settings_mod
from edit_engine.lsp.documents import Document, apply_change
from edit_engine.lsp.rpc import Protocol
from edit_engine.lsp.settings import Settings
from edit_engine.lsp.workspace import Workspace
from edit_engine.syntax.positions import ENCODINGS, Encoding

if TYPE_CHECKING:
    from edit_engine.memory.indexer import Indexer

__all__ = ["Document", "EditEngineServer", "apply_change"]

log = logging.getLogger("lsp")
telemetry_log = logging.getLogger("lsp.telemetry")
T = TypeVar("T")

# LSP language ids -> engine language names (the rest pass through unchanged).
LANGUAGE_IDS = {"typescriptreact": "tsx", "javascriptreact": "javascript"}
# Related code sent with a request: other open documents of its language, the most recently edited first. The
# engine searches them for copies (a few ms per 100 k characters), so they are capped in number and in size.
MAX_RELATED = 16
MAX_RELATED_CHARS = 1_000_000


@dataclass(frozen=True)
class Fill:
    """The outcome of one model request, in LSP terms."""

    text: str
    range: types.Range
    version: int
    passes: int
    nfe: int
    elapsed_ms: float
    stop_reason: str
    timings: dict[str, float] = field(default_factory=dict)  # the final pass's (``Pass.timings``)
    reason: str = ""  # why there is no text (``Pass.reason``)


@dataclass
class Tap:
    """The passes of a fill started on a keystroke, for the request that takes it: the latest one so far, and once
    a request has taken the fill, where each later one goes (``send``)."""

    latest: tuple[Pass, types.Range] | None = None
    send: Callable[[Pass, types.Range], None] | None = None

    def __call__(self, p: Pass, rng: types.Range) -> None:
        self.latest = (p, rng)
        if self.send is not None:
            self.send(p, rng)


@dataclass
class Early:
    """A fill started on a keystroke (``start_early``) for the document's ``version`` at ``offset``."""

    version: int
    offset: int
    task: asyncio.Task[Fill | None]
    tap: Tap = field(default_factory=Tap)


class EditEngineServer(LanguageServer):
    """Connection state: settings, open documents, the engine, and the request in flight per document."""

    protocol: Protocol

    def __init__(self, settings: Settings | None = None) -> None:
        from edit_engine import __version__

        super().__init__("edit-engine", __version__, protocol_cls=Protocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.settings = settings or Settings()
        self.documents: dict[str, Document] = {}
        self.workspace_files = Workspace()  # files beside the open documents, sent as related code
        self.roots: list[str] = []  # the workspace folders (``initialize``), indexed for the memory of code
        self.indexer: Indexer | None = None  # ``lsp.indexing``
        self.inflight: dict[str, asyncio.Task[Any]] = {}  # fills (inline completion, completion, infill)
        self.inflight_edits: dict[str, asyncio.Task[Any]] = {}  # next-edit requests
        self.early: dict[str, Early] = {}  # fills started on a keystroke, by document (``start_early``)
        self.asks_inline: set[str] = set()  # documents the client has asked for an inline completion
        self.model_jobs = 0  # calls queued or running on the model thread
        self._jobs_lock = threading.Lock()
        self.too_large: set[str] = set()  # documents over the limit that the user has been told about
        self.unknown: set[str] = set()  # documents changed without being opened (logged once each)
        self.silent: set[str] = set()  # documents told once why their language gets no suggestions
        self._engine: Engine | None = None
        self._engine_path: str | None = None
        self._engine_lock: asyncio.Lock | None = None
        # One thread runs the model: passes are CPU-bound (torch uses its own intra-op threads), and with a
        # queue of one a superseded request's pass is dropped before it starts instead of competing for cores.
        self.model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edit-engine-model")
        # Next edits' analysis (CPU-bound Python, bounded by each request's work budget) runs on a thread of its
        # own: a slow one never delays a fill on the model thread, and it stops when its request ends.
        self.edit_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edit-engine-edit")

    # ------------------------------------------------------------------ running
    def start_io(self, stdin: Any = None, stdout: Any = None) -> int:  # type: ignore[override]
        """Serve one client over stdio (``lsp.transport``); returns the process exit code."""
        try:
            return transport.run_stdio(self.protocol, stdin, stdout)
        finally:
            indexing.stop(self)
            self.model_thread.shutdown(wait=False, cancel_futures=True)
            self.edit_thread.shutdown(wait=False, cancel_futures=True)

    def start_tcp(self, host: str, port: int) -> int:  # type: ignore[override]
        """Serve the first client that connects to ``host:port``; returns the process exit code."""
        try:
            return transport.run_tcp(self.protocol, host, port)
        finally:
            indexing.stop(self)
            self.model_thread.shutdown(wait=False, cancel_futures=True)
            self.edit_thread.shutdown(wait=False, cancel_futures=True)

    def submit_model(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """``fn(*args)`` on the model thread, counted in ``model_jobs`` until it has run (or was dropped)."""
        with self._jobs_lock:
            self.model_jobs += 1
        job = self.model_thread.submit(fn, *args)
        job.add_done_callback(self._job_done)
        return job

    def run_model(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``submit_model`` to await (cancelling the awaitable drops the call if it has not started)."""
        return asyncio.wrap_future(self.submit_model(fn, *args))

    def run_edit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` on the edit thread, to await."""
        return asyncio.wrap_future(self.edit_thread.submit(fn, *args))

    def _job_done(self, _: Future[Any]) -> None:
        with self._jobs_lock:
            self.model_jobs -= 1

    def report_server_error(self, error: Exception, source: Any) -> None:
        """pygls calls this for every error; one outside a request (a notification handler raised) is logged
        here and shown to the user as pygls does. A request's error is in its answer (and logged by ``rpc``)."""
        if source is FeatureRequestError:
            return
        log.error("%s", error, exc_info=error)
        super().report_server_error(error, source)

    # ------------------------------------------------------------------ helpers
    @property
    def encoding(self) -> Encoding:
        """The position encoding negotiated at ``initialize`` (utf-16 until then)."""
        try:
            enc = self.workspace.position_encoding
        except RuntimeError:
            return "utf-16"
        value = getattr(enc, "value", enc)
        return value if value in ENCODINGS else "utf-16"  # type: ignore[return-value]

    def log_message(self, level: int, message: str, show: bool = False) -> None:
        """Log to the server log and to the client's output (``window/logMessage``; ``show``: as a message the
        user sees, ``window/showMessage``)."""
        log.log(level, "%s", message)
        kind = {logging.ERROR: types.MessageType.Error, logging.WARNING: types.MessageType.Warning}.get(
            level, types.MessageType.Info)
        if show:
            self.window_show_message(types.ShowMessageParams(type=kind, message=f"edit-engine: {message}"))
        else:
            self.window_log_message(types.LogMessageParams(type=kind, message=f"edit-engine: {message}"))

    def apply_settings(self, options: Any) -> None:
        self.settings, warnings = settings_mod.parse(options, self.settings)
        for w in warnings:
            self.log_message(logging.WARNING, w)
        log.info("settings: %s", self.settings)

    @property
    def loaded_engine(self) -> Engine | None:
        """The engine if one is loaded (without loading one)."""
        return self._engine

    async def engine(self) -> Engine:
        """The engine for the current ``modelPath``, loaded off the event loop on first use."""
        if self._engine_lock is None:
            self._engine_lock = asyncio.Lock()
        async with self._engine_lock:
            path, memory = self.settings.model_path, self.settings.memory
            if self._engine is None or self._engine_path != path or (
                    memory is not None and (self._engine.rt.memory is not None) != memory):
                t0 = time.perf_counter()
                try:
                    self._engine = await self.run_model(functools.partial(Engine.load, path, memory=memory))
                    # Warm it on the model thread, so the first fill is not the slow one.
                    warm = await self.run_model(self._engine.warm_up)
                    log.info("warm-up took %.0f ms", warm)
                except Exception as e:  # unreadable checkpoint: every request says so
                    self.log_message(logging.ERROR, f"cannot load the model: {e}")
                    raise JsonRpcInternalError(f"cannot load the model: {e}") from e
                self._engine_path = path
                indexing.start(self)
                log.info("loaded model %s (%s) in %.0f ms", path or "(packaged)", self._engine.dtype,
                         (time.perf_counter() - t0) * 1e3)
            return self._engine

    def document(self, uri: str) -> Document:
        doc = self.documents.get(uri)
        if doc is None:
            raise JsonRpcInvalidParams(f"document {uri} is not open")
        return doc

    def offset(self, doc: Document, pos: types.Position) -> int:
        try:
            return doc.offset(pos.line, pos.character, self.encoding)
        except ValueError as e:
            raise JsonRpcInvalidParams(str(e)) from e

    def lsp_range(self, doc: Document, start: int, end: int) -> types.Range:
        (sl, sc), (el, ec) = doc.position(start, self.encoding), doc.position(end, self.encoding)
        return types.Range(types.Position(sl, sc), types.Position(el, ec))

    def check_size(self, doc: Document) -> None:
        """Tell the user once when a document grows over the limit (and again if it shrinks and grows back)."""
        if len(doc.text) <= protocol.MAX_DOCUMENT_CHARS:
            self.too_large.discard(doc.uri)
        elif doc.uri not in self.too_large:
            self.too_large.add(doc.uri)
            self.log_message(logging.WARNING, f"{doc.uri} has {len(doc.text):,} characters, over the limit of "
                             f"{protocol.MAX_DOCUMENT_CHARS:,}: no completions for it", show=True)


# ---------------------------------------------------------------------------------------------- documents
def did_open(ls: EditEngineServer, params: types.DidOpenTextDocumentParams) -> None:
    td = params.text_document
    lang = LANGUAGE_IDS.get(td.language_id, td.language_id)
    ls.documents[td.uri] = doc = Document(td.uri, td.text, td.version, lang)
    ls.unknown.discard(td.uri)
    indexing.opened(ls, td.uri)
    ls.check_size(doc)


def did_change(ls: EditEngineServer, params: types.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    doc = ls.documents.get(uri)
    if doc is None:  # a client bug, or a didOpen the transport had to skip: said once per document
        if uri not in ls.unknown:
            if len(ls.unknown) > 1000:
                ls.unknown.clear()
            ls.unknown.add(uri)
            log.warning("didChange for %s, which is not open: ignored", uri)
        return
    try:
        for change in params.content_changes:
            doc.apply(change, ls.encoding)
    except ValueError as e:  # the copy no longer matches the editor's: forget it rather than fill on wrong text
        del ls.documents[uri]
        log.warning("cannot apply a change to %s (%s): closed until it is opened again", uri, e)
        return
    doc.version = params.text_document.version
    ls.check_size(doc)
    # Requests in flight for this document notice the new version after their current pass.
    cursor = _typed_cursor(ls, doc, params.content_changes)
    if cursor is not None:
        start_early(ls, doc, cursor)


def _typed_cursor(ls: EditEngineServer, doc: Document, changes: Any) -> int | None:
    """Where the cursor stands after a keystroke: one incremental change inserting at most ``EARLY_MAX_CHARS``
    characters (or deleting); None for anything else (a paste, a whole-text change, several changes)."""
    if len(changes) != 1:
        return None
    change = changes[0]
    rng = getattr(change, "range", None)
    text = str(change.text)
    if rng is None or len(text) > EARLY_MAX_CHARS:
        return None
    try:
        return ls.offset(doc, rng.start) + len(text)  # the text before the change's start did not change
    except JsonRpcException:
        return None


EARLY_MAX_CHARS = 64  # a change inserting more than this is a paste or a completion, not typing


def start_early(ls: EditEngineServer, doc: Document, offset: int) -> None:
    """Start the fill at ``offset`` now, on the keystroke, when the setting allows it, the model is loaded and the
    client asks this document for inline completions: the inline completion request that follows (after the
    editor's debounce) takes its result (``inline_completion``). The document's fill in flight ends by itself
    after its current pass (its version is stale: a request is answered -32801); this one streams nothing (it has
    no request id) and an error ends it quietly."""
    if not ls.settings.start_on_keystroke or ls.loaded_engine is None or doc.uri not in ls.asks_inline \
            or _too_large(doc):
        return
    tap = Tap()
    ls.early[doc.uri] = Early(doc.version, offset, asyncio.ensure_future(_early_fill(ls, doc, offset, tap)), tap)


async def _early_fill(ls: EditEngineServer, doc: Document, offset: int, tap: Tap) -> Fill | None:
    try:
        return await _fill(ls, doc, offset, request_id=None, supersede=False,
                           repair=ls.settings.typing_repair_rounds, tap=tap)
    except (JsonRpcException, ValueError, RuntimeError):  # stale or refused: the request will say so itself
        return None


def did_close(ls: EditEngineServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.documents.pop(params.text_document.uri, None)
    indexing.closed(ls, params.text_document.uri)
    ls.too_large.discard(params.text_document.uri)
    if ls.loaded_engine is not None:
        ls.loaded_engine.close_document(params.text_document.uri)
    for table in (ls.inflight, ls.inflight_edits):
        task = table.pop(params.text_document.uri, None)
        if task is not None:
            task.cancel()
    early = ls.early.pop(params.text_document.uri, None)
    if early is not None:
        early.task.cancel()
    ls.asks_inline.discard(params.text_document.uri)


# ---------------------------------------------------------------------------------------------- settings
def initialize(ls: EditEngineServer, params: types.InitializeParams) -> None:
    ls.apply_settings(params.initialization_options)
    ls.roots = indexing.roots_of(params)


async def initialized(ls: EditEngineServer, params: types.InitializedParams) -> None:
    """Load and warm the model as soon as the client is ready, before the first keystroke asks for it."""
    try:
        await ls.engine()
    except Exception:  # already logged and shown to the user; requests will say it again
        pass
    await indexing.watch(ls)


def did_change_configuration(ls: EditEngineServer, params: types.DidChangeConfigurationParams) -> None:
    before = (ls.settings.workspace_index, ls.settings.installed_packages)
    ls.apply_settings(params.settings)
    if (ls.settings.workspace_index, ls.settings.installed_packages) != before:
        indexing.start(ls)


def accepted(ls: EditEngineServer, params: Any) -> None:
    """Telemetry from the client: a completion was accepted (fully or partly). Recorded in the log."""
    record = params if isinstance(params, dict) else {"params": repr(params)}
    telemetry_log.info("accepted %s", json.dumps(record, sort_keys=True))


def status(ls: EditEngineServer, params: Any) -> dict[str, Any]:
    """``editEngine/status``: what the server holds and has in flight (cheap: counts only)."""
    return {"documents": len(ls.documents), "inflight": len(ls.inflight) + len(ls.inflight_edits), "modelJobs": ls.model_jobs,
            "requests": len(ls.protocol._request_futures), "maxDocumentChars": protocol.MAX_DOCUMENT_CHARS,
            **indexing.status(ls)}


# ---------------------------------------------------------------------------------------------- the model
def _too_large(doc: Document) -> bool:
    return len(doc.text) > protocol.MAX_DOCUMENT_CHARS


_REQUEST = object()  # ``_fill``'s default request id: the request being handled


async def _fill(ls: EditEngineServer, doc: Document, offset: int, selection: tuple[int, int] | None = None,
                max_tokens: int | None = None, request_id: Any = _REQUEST, supersede: bool = True,
                repair: bool | int = True, tap: Tap | None = None, explicit: bool = False) -> Fill:
    """Run the model at ``offset`` (or over ``selection``) of ``doc``; stream passes if the client asked (and the
    fill belongs to a request: ``request_id`` None streams nothing). ``supersede``: cancel the document's fill in
    flight; without it, that fill ends by itself after its current pass, as the document changed under it.
    ``repair``: as ``Engine.stream_complete`` takes it (a fill asked while typing runs fewer rounds). ``tap``: gets
    every pass but the final one (a fill started on a keystroke, for the request that takes it). ``explicit``: the
    user asked (every answer is shown); otherwise the show gate hides what is unlikely (``showThreshold``), and
    unless that threshold is 0 only the final pass is sent (nothing is drawn that the gate then takes away)."""
    t0 = time.perf_counter()
    if _too_large(doc):
        raise JsonRpcServerError(f"{doc.uri} has {len(doc.text):,} characters, over the limit of "
                                 f"{protocol.MAX_DOCUMENT_CHARS:,}", protocol.SERVER_OVERLOADED)
    if request_id is _REQUEST:
        request_id = ls.protocol.msg_id
    task = _supersede(ls.inflight, doc.uri, cancel=supersede)
    version, text = doc.version, doc.text
    related = related_texts(ls, doc)
    settings = ls.settings
    # A fill the show gate may still hide streams no pass before its last: a suggestion drawn pass by pass and
    # then taken away flickers (and its placeholders show for nothing). The gate sees only the final answer.
    gated = not explicit and settings.show_threshold != 0
    gen: Iterator[Pass] | None = None
    try:
        engine = await ls.engine()
        # uri: the engine keeps the document's syntax tree and re-parses it incrementally next time. The
        # generator plans (parses) on its first pass, so that too runs on the model thread.
        gen = engine.stream_complete(text, offset, language=doc.language, selection=selection,
                                     max_tokens=max_tokens or settings.max_tokens, uri=doc.uri,
                                     related=related or None, repair=repair,
                                     show_threshold=0.0 if explicit else settings.show_threshold,
                                     **settings.overrides())
        last: Pass | None = None
        rng: types.Range | None = None
        json_ms = 0.0  # writing this request's pass notifications
        while True:
            try:
                # If the request is cancelled while its pass is still queued behind another's, it never runs.
                p = await ls.run_model(next, gen, None)
            except ValueError as e:  # the engine rejects the input (e.g. document too large)
                raise JsonRpcInvalidParams(str(e)) from e
            if p is None:
                break
            if doc.version != version or doc.text is not text or ls.documents.get(doc.uri) is not doc:
                raise JsonRpcContentModified(f"{doc.uri} changed while the request ran (version {version})")
            if rng is None:
                rng = ls.lsp_range(doc, p.start, p.end)  # doc.text is still ``text``
            if gated and not p.final:
                continue
            if tap is not None and not p.final:
                tap(p, rng)
            if settings.stream_passes and request_id is not None:
                t_json = time.perf_counter()
                timings = None
                if p.final:  # the engine's stages, this server's time so far and its JSON so far
                    timings = {**p.timings, "server": (t_json - t0) * 1e3, "json": json_ms}
                _notify_pass(ls, request_id, doc.uri, version, p, rng, timings)
                json_ms += (time.perf_counter() - t_json) * 1e3
            last = p
            if p.final:
                break
        if last is None or rng is None:
            raise JsonRpcInternalError("the engine produced no pass")
        fill = Fill(last.text, rng, version, last.index + 1, last.nfe, (time.perf_counter() - t0) * 1e3,
                    last.stop_reason, last.timings, last.reason)
        log.info("request %s: %d passes, %d chars, %.0f ms, %s, related: %d documents; stages (ms): %s",
                 request_id, fill.passes, len(fill.text), fill.elapsed_ms, fill.stop_reason, len(related),
                 ", ".join(f"{k} {v:.1f}" for k, v in last.timings.items()))
        return fill
    finally:
        _close(ls, gen)
        if ls.inflight.get(doc.uri) is task:
            del ls.inflight[doc.uri]


def _notify_pass(ls: EditEngineServer, request_id: Any, uri: str, version: int, p: Pass, rng: types.Range,
                 timings: dict[str, float] | None = None) -> None:
    """Send pass ``p`` of a fill of ``uri`` at ``version`` as an ``editEngine/pass`` of ``request_id``."""
    ls.protocol.notify(protocol.PASS, protocol.pass_params(
        request_id, p.index, p.final, p.text, p.masked, uri=uri, version=version, range_=_range_json(rng),
        preview=p.preview, timings=timings, nfe=p.nfe if p.final else None))


def _supersede(table: dict[str, asyncio.Task[Any]], uri: str, cancel: bool = True) -> asyncio.Task[Any]:
    """File the current task as ``uri``'s request in ``table``, cancelling the one it replaces unless ``cancel`` is
    False (newer work supersedes older: pygls answers that one -32800). The caller takes it out again when
    done."""
    task = asyncio.current_task()
    assert task is not None
    previous = table.get(uri)
    if cancel and previous is not None and previous is not task and not previous.done():
        previous.cancel()
    table[uri] = task
    return task


def related_texts(ls: EditEngineServer, doc: Document) -> list[str]:
    """The other open documents of ``doc``'s language, the most recently edited first, then the files of that
    language beside ``doc`` on disk that are not open (``lsp.workspace``): at most ``MAX_RELATED`` of them,
    ``MAX_RELATED_CHARS`` together (one that does not fit is passed over), none over the size limit."""
    others = sorted((d for d in ls.documents.values() if d is not doc and d.language == doc.language
                     and d.text and not _too_large(d)), key=lambda d: d.touched, reverse=True)
    texts = [d.text for d in others]
    texts += [t for _, t in ls.workspace_files.siblings(doc.uri, doc.language, set(ls.documents))]
    out: list[str] = []
    total = 0
    for t in texts:
        if len(out) == MAX_RELATED:
            break
        if total + len(t) <= MAX_RELATED_CHARS:
            out.append(t)
            total += len(t)
    return out


def _close(ls: EditEngineServer, gen: Iterator[Pass] | None) -> None:
    """Stop the engine's generator before its next forward pass."""
    close = getattr(gen, "close", None)
    if close is None:
        return
    try:
        close()
    except ValueError:  # cancelled mid-pass: close it on the model thread once that pass is done
        try:
            ls.submit_model(close)
        except RuntimeError:  # the server is stopping: the model thread takes no more work
            pass


def _range_json(rng: types.Range) -> dict[str, Any]:
    return protocol.lsp_range((rng.start.line, rng.start.character), (rng.end.line, rng.end.character))


async def inline_completion(ls: EditEngineServer,
                            params: types.InlineCompletionParams) -> types.InlineCompletionList:
    doc = ls.document(params.text_document.uri)
    offset = ls.offset(doc, params.position)
    ls.asks_inline.add(doc.uri)
    if _too_large(doc):  # the user was told when the document grew over the limit
        return types.InlineCompletionList(items=[])
    version = doc.version
    # Asked while typing (not invoked by the user): the fill started on the keystroke may answer it, and it
    # runs ``typingRepairRounds`` repair rounds.
    typing = params.context.trigger_kind == types.InlineCompletionTriggerKind.Automatic
    fill = await _early_result(ls, doc, offset) if typing else None
    if fill is None:
        if doc.version != version or ls.documents.get(doc.uri) is not doc:  # changed while it waited
            raise JsonRpcContentModified(f"{doc.uri} changed while the request ran (version {version})")
        fill = await _fill(ls, doc, offset, repair=ls.settings.typing_repair_rounds if typing else True,
                           explicit=not typing)
    if not fill.text:
        _say_why_once(ls, doc, fill.reason)
        return types.InlineCompletionList(items=[])
    return types.InlineCompletionList(items=[types.InlineCompletionItem(insert_text=fill.text, range=fill.range)])


def _say_why_once(ls: EditEngineServer, doc: Document, reason: str) -> None:
    """Tell the user once per document, in the log the client keeps (``window/logMessage``) and as
    ``editEngine/silent`` (a client shows it quietly), why its language gets no suggestions (a language the model was not trained on, with nothing else likely enough). A fill held
    back by the show gate is an ordinary event and says nothing."""
    if "not trained on" in reason and doc.uri not in ls.silent:
        ls.silent.add(doc.uri)
        ls.log_message(logging.INFO, f"{doc.uri}: no suggestion: {reason}")
        ls.protocol.notify(protocol.SILENT, {"uri": doc.uri, "reason": reason})  # a client may tell the user


async def _early_result(ls: EditEngineServer, doc: Document, offset: int) -> Fill | None:
    """The fill started on the keystroke for this very document version and cursor, awaited (None when there is
    none or it ended without an answer). Its passes are sent as this request's notifications: the latest one so
    far at once, each later one as it comes, and the final one with the answer's timings."""
    request_id = ls.protocol.msg_id  # read before awaiting: it names the message being handled
    early = ls.early.pop(doc.uri, None)
    if early is None or early.version != doc.version or early.offset != offset or early.task.cancelled():
        return None
    t0 = time.perf_counter()
    if ls.settings.stream_passes and request_id is not None and not early.task.done():
        # The passes so far (the latest stands for them: each is the whole span) and each later one, as this
        # request's; the final one follows the answer's timings below.
        def send(p: Pass, rng: types.Range) -> None:
            _notify_pass(ls, request_id, doc.uri, early.version, p, rng)

        if early.tap.latest is not None:
            send(*early.tap.latest)
        early.tap.send = send
    try:
        fill = await early.task
    finally:
        early.tap.send = None  # a cancelled request hears no more of the fill
    if fill is not None and ls.settings.stream_passes and request_id is not None:
        # ``waited``: what this request waited for the fill (its ``server`` time ran from the keystroke).
        timings = {**fill.timings, "server": fill.elapsed_ms, "json": 0.0, "waited": (time.perf_counter() - t0) * 1e3}
        ls.protocol.notify(protocol.PASS, protocol.pass_params(
            request_id, fill.passes - 1, True, fill.text, 0, uri=doc.uri, version=fill.version,
            range_=_range_json(fill.range), timings=timings, nfe=fill.nfe))
    return fill


async def completion(ls: EditEngineServer, params: types.CompletionParams) -> types.CompletionList:
    """Fallback for clients without inline completion: one item whose ``textEdit`` is the fill."""
    doc = ls.document(params.text_document.uri)
    offset = ls.offset(doc, params.position)
    if _too_large(doc):
        return types.CompletionList(is_incomplete=False, items=[])
    fill = await _fill(ls, doc, offset)
    if not fill.text:
        return types.CompletionList(is_incomplete=True, items=[])
    start = ls.offset(doc, fill.range.start)  # the document is still the one the fill is for
    typed = doc.text[start:offset] if start <= offset else ""
    label = fill.text.strip().splitlines()[0] if fill.text.strip() else fill.text
    item = types.CompletionItem(
        label=label[:80], kind=types.CompletionItemKind.Snippet, detail="edit-engine",
        filter_text=typed + fill.text, sort_text="0", insert_text_format=types.InsertTextFormat.PlainText,
        text_edit=types.TextEdit(range=fill.range, new_text=fill.text))
    return types.CompletionList(is_incomplete=True, items=[item])


def _position(v: Any, name: str) -> types.Position:
    if not (isinstance(v, dict) and isinstance(v.get("line"), int) and isinstance(v.get("character"), int)
            and not isinstance(v["line"], bool) and not isinstance(v["character"], bool)
            and v["line"] >= 0 and v["character"] >= 0):
        raise JsonRpcInvalidParams(f"{name} must be {{line, character}} with non-negative integers")
    return types.Position(v["line"], v["character"])


def _document_param(ls: EditEngineServer, params: Any) -> Document:
    """The open document named by ``params.textDocument`` ({uri, version?}); a version that is not the
    document's is ContentModified."""
    if not isinstance(params, dict):
        raise JsonRpcInvalidParams("params must be an object")
    td = params.get("textDocument")
    if not (isinstance(td, dict) and isinstance(td.get("uri"), str)):
        raise JsonRpcInvalidParams("textDocument.uri is required")
    doc = ls.document(td["uri"])
    version = td.get("version")
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, int):
            raise JsonRpcInvalidParams("textDocument.version must be an integer")
        if version != doc.version:
            raise JsonRpcContentModified(f"{doc.uri} is at version {doc.version}, not {version}")
    return doc


def _range_param(ls: EditEngineServer, doc: Document, r: Any) -> tuple[int, int]:
    """A ``{start, end}`` range of ``doc`` as character offsets."""
    if not isinstance(r, dict):
        raise JsonRpcInvalidParams("range must be {start, end}")
    start = ls.offset(doc, _position(r.get("start"), "range.start"))
    end = ls.offset(doc, _position(r.get("end"), "range.end"))
    if end < start:
        raise JsonRpcInvalidParams("range ends before it starts")
    return start, end


async def infill(ls: EditEngineServer, params: Any) -> dict[str, Any]:
    """``editEngine/infill``: ``{textDocument: {uri, version?}, position | range, maxTokens?}``."""
    doc = _document_param(ls, params)
    max_tokens = params.get("maxTokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < 1):
        raise JsonRpcInvalidParams("maxTokens must be an integer >= 1")
    selection = None
    if params.get("range") is not None:
        start, end = _range_param(ls, doc, params["range"])
        offset, selection = start, (start, end)
    elif params.get("position") is not None:
        offset = ls.offset(doc, _position(params["position"], "position"))
    else:
        raise JsonRpcInvalidParams("position or range is required")
    fill = await _fill(ls, doc, offset, selection, max_tokens, explicit=True)
    return protocol.infill_response(fill.text, fill.passes, fill.nfe, fill.elapsed_ms, fill.stop_reason,
                                    range_=_range_json(fill.range), version=fill.version)


# ---------------------------------------------------------------------------------------------- next edit
async def next_edit(ls: EditEngineServer, params: Any) -> dict[str, Any] | None:
    """``editEngine/nextEdit``: ``{textDocument: {uri, version?}, position, range?, otherDocuments?}``
    (``range``: its rows are the editable region; default: around the cursor; ``otherDocuments: true``: a client
    that can show an edit in another document lets the server propose one there when the asked document has
    none; a document with no history of its own then takes that of the open document changed last, and is
    searched first). Answered with ``protocol.next_edit_response`` or null (no proposal). The history is the
    document's own (``Document.history``)."""
    doc = _document_param(ls, params)
    if params.get("position") is None:
        raise JsonRpcInvalidParams("position is required")
    cursor = ls.offset(doc, _position(params["position"], "position"))
    region = None
    if params.get("range") is not None:
        region = _rows(doc, params["range"])
    if not isinstance(params.get("otherDocuments", False), bool):
        raise JsonRpcInvalidParams("otherDocuments must be true or false")
    if _too_large(doc):
        raise JsonRpcServerError(f"{doc.uri} has {len(doc.text):,} characters, over the limit of "
                                 f"{protocol.MAX_DOCUMENT_CHARS:,}", protocol.SERVER_OVERLOADED)
    task = _supersede(ls.inflight_edits, doc.uri)
    version, text = doc.version, doc.text
    history, related = doc.history.diffs(text), related_texts(ls, doc)
    # With ``otherDocuments`` and no region, the other open documents of the language are searched too (the most
    # recently edited first); each is held at the version it is read at.
    opened = open_documents(ls, doc) if region is None and params.get("otherDocuments") is True else []
    others = {d.uri: d.text for d in opened}
    versions = {d.uri: (d, d.version, d.text) for d in (*opened, doc)}
    # A document with no changes of its own takes the patterns of the open one changed last (a function renamed
    # there, then the user came here): that one's history, this document searched first.
    source, asked = None, (text, cursor, history)
    for d in opened if not history else []:
        if diffs := d.history.diffs(d.text):
            source, asked = d, (d.text, 0, diffs)
            others = {doc.uri: text, **{o.uri: o.text for o in opened if o is not d}}
            break
    stop = threading.Event()  # set when this request ends (answered, cancelled or superseded)

    def should_stop() -> bool:  # read on the model thread between the engine's steps
        return stop.is_set() or doc.version != version

    t0 = time.perf_counter()
    try:
        engine = await ls.engine()
        ne: NextEdit | None = None
        try:
            staged = await ls.run_edit(functools.partial(engine.next_edit_patterns, *asked, doc.language,
                                                         related or None, region, should_stop, others or None,
                                                         source is not None))
            if staged is not None:
                ne = staged.proposal or await ls.run_model(
                    functools.partial(engine.next_edit_model, staged, should_stop=should_stop))
        except OverBudget as e:  # a history too costly to analyse: no proposal (the user did nothing wrong)
            log.info("next edit for %s: %s", doc.uri, e)
        except ValueError as e:  # the engine rejects the input
            raise JsonRpcInvalidParams(str(e)) from e
    finally:
        stop.set()
        if ls.inflight_edits.get(doc.uri) is task:
            del ls.inflight_edits[doc.uri]
    if doc.version != version or doc.text is not text or ls.documents.get(doc.uri) is not doc:
        raise JsonRpcContentModified(f"{doc.uri} changed while the request ran (version {version})")
    log.info("next edit for %s (%d diffs): %s%s, %.0f ms", doc.uri, len(history),
             ne.kind if ne is not None else "none", f" in {ne.document}" if ne and ne.document else "",
             (time.perf_counter() - t0) * 1e3)
    if ne is None:
        return None
    target, target_version = doc, version
    name = ne.document if ne.document is not None else source.uri if source is not None else None
    if name is not None and name != doc.uri:
        target, target_version, target_text = versions[name]
        if target.version != target_version or target.text is not target_text or \
                ls.documents.get(target.uri) is not target:
            raise JsonRpcContentModified(f"{target.uri} changed while the request ran (version {target_version})")
    return protocol.next_edit_response(_range_json(ls.lsp_range(target, ne.start, ne.end)), ne.text, target.uri,
                                       target_version, ne.kind, list(ne.patterns), ne.elapsed_ms, version)


def open_documents(ls: EditEngineServer, doc: Document) -> list[Document]:
    """The other open documents of ``doc``'s language that next edit may change: the most recently edited first,
    at most ``next_edit.MAX_OTHERS``, none over the size limit."""
    others = sorted((d for d in ls.documents.values() if d is not doc and d.language == doc.language
                     and d.text and not _too_large(d)), key=lambda d: d.touched, reverse=True)
    return others[:MAX_OTHERS]


def _rows(doc: Document, r: Any) -> tuple[int, int]:
    """The rows ``[first, last)`` a range covers (its end row only if something of it is in the range)."""
    if not isinstance(r, dict):
        raise JsonRpcInvalidParams("range must be {start, end}")
    start, end = _position(r.get("start"), "range.start"), _position(r.get("end"), "range.end")
    if (end.line, end.character) < (start.line, start.character):
        raise JsonRpcInvalidParams("range ends before it starts")
    rows = doc.text.count("\n") + 1
    last = end.line + 1 if end.character > 0 or end.line == start.line else end.line
    first = min(start.line, rows - 1)
    return first, min(max(last, first + 1), rows)


async def apply_next_edit(ls: EditEngineServer, *args: Any) -> dict[str, Any]:
    """``workspace/executeCommand`` ``editEngine.applyNextEdit`` with one argument, ``{textDocument: {uri,
    version?}, range, newText}`` (a ``nextEdit`` answer's ``command``): sends the edit to the client as
    ``workspace/applyEdit`` (for the document's version when the client takes versioned edits) and answers
    ``{applied, failureReason?}``."""
    if len(args) != 1 or not isinstance(args[0], dict):
        raise JsonRpcInvalidParams(f"{protocol.APPLY_NEXT_EDIT_COMMAND} takes one argument: "
                                   "{textDocument, range, newText}")
    arg = args[0]
    doc = _document_param(ls, arg)
    start, end = _range_param(ls, doc, arg.get("range"))
    new_text = arg.get("newText")
    if not isinstance(new_text, str):
        raise JsonRpcInvalidParams("newText must be a string")
    edit = types.TextEdit(range=ls.lsp_range(doc, start, end), new_text=new_text)
    caps = ls.client_capabilities.workspace
    if caps is not None and caps.workspace_edit is not None and caps.workspace_edit.document_changes:
        ws_edit = types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
            text_document=types.OptionalVersionedTextDocumentIdentifier(uri=doc.uri, version=doc.version),
            edits=[edit])])
    else:
        ws_edit = types.WorkspaceEdit(changes={doc.uri: [edit]})
    result = await ls.workspace_apply_edit_async(
        types.ApplyWorkspaceEditParams(edit=ws_edit, label="edit-engine: next edit"))
    out: dict[str, Any] = {"applied": bool(result.applied)}
    if result.failure_reason:
        out["failureReason"] = result.failure_reason
    return out
