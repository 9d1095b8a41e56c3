"""End-to-end tests of the language server: the real ``edit-engine lsp`` process over stdio, driven by pytest-lsp.

Most tests use the tiny random checkpoint (fills are noise, but deterministic: every fill is compared with a
direct ``Engine.complete`` call on the same text). Cancellation tests use a tiny model with a 256-slot canvas
and ``threshold > 1`` (one token per pass), so a request runs for hundreds of passes and there is time to
cancel it after the first one. Nothing sleeps: tests wait on notifications and responses with deadlines.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from helpers import plain
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

from edit_engine.engine import Engine
from edit_engine.model import checkpoint
from edit_engine.syntax.positions import offset_to_position

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = Path(__file__).resolve().parents[1]
DEADLINE = 60.0  # seconds for any single wait (server start-up on a loaded 2-core machine included)
DOC = "import os\n\n\ndef add(a, b):\n    return \n\n\nprint(add(1, 2))\n"
CURSOR = DOC.index("return ") + len("return ")


def pos(text: str, offset: int, encoding: str = "utf-16") -> types.Position:
    """An LSP position computed here independently of edit_engine.syntax.positions (by encoding the line prefix)."""
    line = text.count("\n", 0, offset)
    start = text.rfind("\n", 0, offset) + 1
    prefix = text[start:offset]
    if encoding == "utf-32":
        units = len(prefix)
    elif encoding == "utf-8":
        units = len(prefix.encode("utf-8"))
    else:
        units = len(prefix.encode("utf-16-le")) // 2
    return types.Position(line=line, character=units)


def rng(text: str, start: int, end: int, encoding: str = "utf-16") -> dict[str, Any]:
    s, e = pos(text, start, encoding), pos(text, end, encoding)
    return {"start": {"line": s.line, "character": s.character}, "end": {"line": e.line, "character": e.character}}


class Session:
    """A started client plus what the server sent it."""

    def __init__(self, client: LanguageClient, log_file: Path) -> None:
        self.client = client
        self.log_file = log_file
        self.capabilities = types.ServerCapabilities()
        self.passes: dict[Any, list[dict[str, Any]]] = {}
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.indexed: asyncio.Queue[dict[str, Any]] = asyncio.Queue()  # editEngine/indexed
        self._ids = 0

        @client.feature("editEngine/indexed")
        def on_indexed(params: Any) -> None:
            self.indexed.put_nowait(plain(params))

        @client.feature("editEngine/pass")
        def on_pass(params: Any) -> None:
            params = plain(params)
            self.passes.setdefault(params["requestId"], []).append(params)
            self.queue.put_nowait(params)

    def next_id(self) -> str:
        self._ids += 1
        return f"req-{self._ids}"

    def open(self, uri: str, text: str, version: int = 1, language: str = "python") -> None:
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)))

    def close(self, uri: str) -> None:
        """Close a document: the server no longer offers its text to other documents' fills as related code."""
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))

    async def request(self, method: str, params: Any, msg_id: str | None = None) -> Any:
        return await asyncio.wait_for(
            self.client.protocol.send_request_async(method, params, msg_id=msg_id), DEADLINE)

    async def raw_request(self, method: str, params: Any) -> Any:
        """Send params as given (pygls' client would refuse to serialise a malformed standard request)."""
        msg_id = self.next_id()
        future: Future[Any] = Future()
        self.client.protocol._request_futures[msg_id] = future
        self.client.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return await asyncio.wait_for(asyncio.wrap_future(future), DEADLINE)

    async def infill(self, params: dict[str, Any], msg_id: str | None = None) -> dict[str, Any]:
        return plain(await self.request("editEngine/infill", params, msg_id))  # type: ignore[no-any-return]

    async def pass_of(self, request_id: str) -> dict[str, Any]:
        """Wait for the next editEngine/pass of ``request_id``."""
        while True:
            p = await asyncio.wait_for(self.queue.get(), DEADLINE)
            if p["requestId"] == request_id:
                return p


async def start(tmp: Path, init: dict[str, Any] | None, encodings: list[str] | None = None,
                args: tuple[str, ...] = (), root: Path | None = None) -> Session:
    log_file = tmp / "server.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "XDG_CACHE_HOME": str(tmp / "cache")}
    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "edit_engine.lsp", "--threads", "1",
                        "--log-file", str(log_file), *args],
        server_env=env)
    client = await config.start()
    session = Session(client, log_file)
    general = types.GeneralClientCapabilities(position_encodings=encodings) if encodings else None
    caps = types.ClientCapabilities(
        general=general,
        text_document=types.TextDocumentClientCapabilities(
            inline_completion=types.InlineCompletionClientCapabilities(),
            completion=types.CompletionClientCapabilities()))
    result = await asyncio.wait_for(client.initialize_session(
        types.InitializeParams(capabilities=caps, initialization_options=init, root_uri=root.as_uri() if root else None,
                               workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)]
                               if root else None)), DEADLINE)
    session.capabilities = result.capabilities
    return session


async def stop(session: Session) -> None:
    await asyncio.wait_for(session.client.shutdown_session(), DEADLINE)
    await session.client.stop()


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint: Path) -> Engine:
    """The engine the server loads, for expected fills (same weights, same thread count)."""
    return Engine.load(tiny_checkpoint)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> AsyncIterator[Session]:
    # Every answer shown while typing too (showThreshold 0): these tests compare the server with the library,
    # whose requests are explicit; the gate has its own test.
    s = await start(tmp_path_factory.mktemp("lsp"), {"modelPath": str(tiny_checkpoint), "streamPasses": True,
                                                     "showThreshold": 0})
    yield s
    await stop(s)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slow(tmp_path_factory: pytest.TempPathFactory, slow_checkpoint: Path) -> AsyncIterator[Session]:
    s = await start(tmp_path_factory.mktemp("lsp-slow"), {
        "modelPath": str(slow_checkpoint), "streamPasses": True, "threshold": 2.0, "maxTokens": 256,
        "showThreshold": 0, "memory": False})
    yield s
    await stop(s)


# ---------------------------------------------------------------------------------------------- basics
async def test_capabilities(session: Session) -> None:
    caps = session.capabilities
    assert caps.inline_completion_provider is not None
    assert caps.completion_provider is not None
    sync = caps.text_document_sync
    assert isinstance(sync, types.TextDocumentSyncOptions)
    assert sync.change == types.TextDocumentSyncKind.Incremental
    assert caps.position_encoding in (None, types.PositionEncodingKind.Utf16)


async def invoked_inline(session: Session, uri: str) -> Any:
    """An invoked ``textDocument/inlineCompletion`` at ``CURSOR`` of ``DOC`` (open at ``uri``)."""
    return await asyncio.wait_for(session.client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=pos(DOC, CURSOR),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))),
        DEADLINE)


async def test_inline_completion_matches_the_engine(session: Session, tiny: Engine) -> None:
    uri = "file:///inline.py"
    session.open(uri, DOC)
    result = await invoked_inline(session, uri)
    expected = tiny.complete(DOC, CURSOR)
    assert isinstance(result, types.InlineCompletionList)
    if not expected.text:
        assert result.items == []
        return
    (item,) = result.items
    assert item.insert_text == expected.text
    assert item.range is not None
    assert session.client.protocol._converter.unstructure(item.range) == rng(DOC, expected.start, expected.end)


async def test_a_fill_asked_while_typing_runs_the_typing_repair_rounds(session: Session, tiny: Engine) -> None:
    """An automatic inline completion (asked while typing) runs ``typingRepairRounds`` repair rounds (0 by
    default: the fill is checked and cut to its longest prefix that parses); an invoked one runs the full
    repair. The tiny model's fill here breaks the parse, so the two differ in forward passes."""
    uri = "file:///typing.py"
    session.open(uri, DOC)
    kinds = types.InlineCompletionTriggerKind
    nfe = {}
    for kind, repair in ((kinds.Automatic, 0), (kinds.Invoked, True)):
        expected = tiny.complete(DOC, CURSOR, repair=repair)
        rid = session.next_id()
        result = await session.request("textDocument/inlineCompletion", types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=pos(DOC, CURSOR),
            context=types.InlineCompletionContext(trigger_kind=kind)), rid)
        final = session.passes[rid][-1]
        assert final["final"] and final["nfe"] == expected.nfe, (kind, final, expected)
        assert [i.insert_text for i in result.items] == ([expected.text] if expected.text else [])
        nfe[kind] = expected.nfe
    assert nfe[kinds.Automatic] < nfe[kinds.Invoked]


async def test_the_show_gate_hides_a_fill_asked_while_typing_not_one_asked_for(
        tmp_path: Path, tiny_checkpoint: Path, tiny: Engine) -> None:
    """With a show threshold no answer reaches, an automatic inline completion comes back empty (its final pass
    says so) while an invoked one shows the engine's answer."""
    expected = tiny.complete(DOC, CURSOR)
    assert expected.text
    s = await start(tmp_path, {"modelPath": str(tiny_checkpoint), "streamPasses": True, "showThreshold": 1.0})
    try:
        uri = "file:///gated.py"
        s.open(uri, DOC)
        kinds = types.InlineCompletionTriggerKind
        got, streamed = {}, {}
        for kind in (kinds.Automatic, kinds.Invoked):
            rid = s.next_id()
            result = await s.request("textDocument/inlineCompletion", types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri), position=pos(DOC, CURSOR),
                context=types.InlineCompletionContext(trigger_kind=kind)), rid)
            got[kind] = [i.insert_text for i in result.items]
            streamed[kind] = [p["final"] for p in s.passes.get(rid, [])]
        assert got[kinds.Automatic] == [] and got[kinds.Invoked] == [expected.text]
        # Nothing drawn that the gate then takes away: the gated fill sends its final pass only.
        assert streamed[kinds.Automatic] == [True]
        assert streamed[kinds.Invoked] == [False] * (expected.passes - 1) + [True] and expected.passes > 1
    finally:
        await stop(s)


async def test_dtype_flag_reaches_the_engine(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """``edit-engine lsp --dtype bf16``: the server's model computes in bf16 and answers as a bf16 engine does."""
    s = await start(tmp_path, {"modelPath": str(tiny_checkpoint)}, args=("--dtype", "bf16"))
    try:
        uri = "file:///bf16.py"
        s.open(uri, DOC)
        result = await invoked_inline(s, uri)
    finally:
        await stop(s)
    expected = Engine.load(tiny_checkpoint, dtype="bf16").complete(DOC, CURSOR)
    assert isinstance(result, types.InlineCompletionList)
    assert [i.insert_text for i in result.items] == ([expected.text] if expected.text else [])
    assert "(bfloat16)" in s.log_file.read_text()


async def test_completion_fallback_is_one_text_edit(session: Session, tiny: Engine) -> None:
    uri = "file:///completion.py"
    session.open(uri, DOC)
    result = await asyncio.wait_for(session.client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=pos(DOC, CURSOR))), DEADLINE)
    expected = tiny.complete(DOC, CURSOR)
    assert isinstance(result, types.CompletionList)
    if not expected.text:
        assert result.items == []
        return
    (item,) = result.items
    assert isinstance(item.text_edit, types.TextEdit)
    assert item.text_edit.new_text == expected.text
    assert session.client.protocol._converter.unstructure(item.text_edit.range) == \
        rng(DOC, expected.start, expected.end)


async def test_streamed_passes_end_with_the_answer(session: Session, tiny: Engine) -> None:
    uri = "file:///stream.py"
    session.open(uri, DOC, version=3)
    rid = session.next_id()
    answer = await session.infill({"textDocument": {"uri": uri}, "position": {"line": 4, "character": 11}}, rid)
    passes = session.passes[rid]  # every pass was sent before the answer, and messages arrive in order
    assert [p["passIndex"] for p in passes] == list(range(len(passes)))
    assert [p["final"] for p in passes] == [False] * (len(passes) - 1) + [True]
    assert all(p["uri"] == uri and p["version"] == 3 and p["range"] == answer["range"] for p in passes)
    assert passes[-1]["text"] == answer["text"]
    assert passes[-1]["masked"] == 0
    assert answer["passes"] == len(passes) and answer["version"] == 3
    assert answer["stopReason"] in ("complete", "length", "line")
    expected = tiny.complete(DOC, CURSOR)
    assert answer["text"] == expected.text
    assert answer["range"] == rng(DOC, expected.start, expected.end)


async def test_infill_over_a_range_rewrites_it(session: Session, tiny: Engine) -> None:
    uri = "file:///range.py"
    session.open(uri, DOC)
    start, end = DOC.index("a, b"), DOC.index("a, b") + 4
    answer = await session.infill({"textDocument": {"uri": uri, "version": 1}, "range": rng(DOC, start, end),
                                   "maxTokens": 8})
    expected = tiny.complete(DOC, start, selection=(start, end), max_tokens=8)
    assert answer["text"] == expected.text
    assert answer["range"] == rng(DOC, expected.start, expected.end)


# ---------------------------------------------------------------------------------------------- errors
async def test_bad_params_and_unknown_methods_get_errors_and_the_server_keeps_serving(session: Session) -> None:
    uri = "file:///bad.py"
    session.open(uri, DOC)
    bad: list[tuple[str, Any, int]] = [
        ("editEngine/infill", {"textDocument": {"uri": uri}}, -32602),  # neither position nor range
        ("editEngine/infill", {"textDocument": {"uri": "file:///not-open.py"}, "position": {"line": 0,
                                                                                           "character": 0}}, -32602),
        ("editEngine/infill", {"textDocument": {"uri": uri}, "position": {"line": -1, "character": 0}}, -32602),
        ("editEngine/infill", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 0},
                               "maxTokens": "many"}, -32602),
        ("editEngine/infill", [1, 2, 3], -32602),
        ("textDocument/inlineCompletion", {"textDocument": {"uri": uri}}, -32602),  # no position: pygls can't parse
        ("editEngine/noSuchMethod", {}, -32601),
    ]
    for method, params, code in bad:
        with pytest.raises(JsonRpcException) as info:
            await session.raw_request(method, params)
        assert info.value.code == code, (method, params, info.value)
    answer = await session.infill({"textDocument": {"uri": uri}, "position": {"line": 4, "character": 11}})
    assert answer["stopReason"] in ("complete", "length", "line")


async def test_stale_version_is_content_modified(session: Session) -> None:
    uri = "file:///stale.py"
    session.open(uri, DOC, version=1)
    session.client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(pos(DOC, 0), pos(DOC, 0)), text="# header\n")]))
    with pytest.raises(JsonRpcException) as info:
        await session.infill({"textDocument": {"uri": uri, "version": 1}, "position": {"line": 5, "character": 11}})
    assert info.value.code == -32801
    answer = await session.infill({"textDocument": {"uri": uri, "version": 2}, "position": {"line": 5,
                                                                                            "character": 11}})
    assert answer["version"] == 2


async def test_telemetry_is_logged(session: Session) -> None:
    session.client.protocol.notify("editEngine/accepted", {"uri": "file:///t.py", "kind": "partial",
                                                           "acceptedChars": 7, "requestId": "r-42"})
    session.open("file:///t.py", DOC)
    # Messages are handled in order: once this answer is back, the notification has been recorded.
    await session.infill({"textDocument": {"uri": "file:///t.py"}, "position": {"line": 0, "character": 0},
                          "maxTokens": 1})
    records = [json.loads(line.split("accepted ", 1)[1]) for line in session.log_file.read_text().splitlines()
               if "lsp.telemetry" in line]
    assert {"uri": "file:///t.py", "kind": "partial", "acceptedChars": 7, "requestId": "r-42"} in records


# ---------------------------------------------------------------------------------------------- latency
async def test_cancel_stops_within_a_pass(slow: Session) -> None:
    uri = "file:///cancel.py"
    slow.open(uri, DOC)
    rid = slow.next_id()
    req = asyncio.ensure_future(slow.infill({"textDocument": {"uri": uri}, "position": {"line": 4,
                                                                                        "character": 11}}, rid))
    first = await slow.pass_of(rid)
    assert first["passIndex"] == 0
    slow.client.protocol.notify("$/cancelRequest", types.CancelParams(id=rid))
    with pytest.raises(JsonRpcException) as info:
        await req
    assert info.value.code == -32800
    sent = slow.passes[rid]
    assert not any(p["final"] for p in sent)  # it never ran to the end
    # The server keeps serving, and nothing more of the cancelled request arrives after the next answer.
    rid2 = slow.next_id()
    answer = await slow.infill({"textDocument": {"uri": uri}, "position": {"line": 4, "character": 11},
                                "maxTokens": 4}, rid2)
    assert answer["text"] == slow.passes[rid2][-1]["text"]
    assert len(slow.passes[rid]) == len(sent)


async def test_new_request_supersedes_the_one_in_flight(slow: Session) -> None:
    uri = "file:///supersede.py"
    slow.open(uri, DOC)
    first_id, second_id = slow.next_id(), slow.next_id()
    first = asyncio.ensure_future(slow.infill({"textDocument": {"uri": uri}, "position": {"line": 4,
                                                                                          "character": 11}}, first_id))
    await slow.pass_of(first_id)
    second = await slow.infill({"textDocument": {"uri": uri}, "position": {"line": 4, "character": 11},
                                "maxTokens": 4}, second_id)
    with pytest.raises(JsonRpcException) as info:
        await first
    assert info.value.code == -32800
    assert second["text"] == slow.passes[second_id][-1]["text"]
    assert not any(p["final"] for p in slow.passes[first_id])


async def test_inline_completion_for_a_document_that_changed_is_stale(slow: Session) -> None:
    uri = "file:///typing.py"
    slow.open(uri, DOC)
    rid = slow.next_id()
    req = asyncio.ensure_future(slow.request("textDocument/inlineCompletion", types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=pos(DOC, CURSOR),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)), rid))
    await slow.pass_of(rid)
    slow.client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(pos(DOC, CURSOR), pos(DOC, CURSOR)), text="a")]))
    with pytest.raises(JsonRpcException) as info:
        await req
    assert info.value.code == -32801


async def test_a_keystroke_starts_the_fill_that_the_next_request_takes(slow: Session) -> None:
    """Once the client has asked a document for inline completions, a keystroke starts the fill at the new cursor:
    the request that follows (an editor asks after its debounce) takes it: it is sent the fill's latest pass so
    far and each later one as its own, in order, the final one last, with ``waited``. With ``startOnKeystroke``
    off, the request runs its own fill."""
    uri = "file:///early.py"
    slow.open(uri, DOC)

    def ask(text: str, cursor: int) -> Any:
        rid = slow.next_id()
        return rid, slow.request("textDocument/inlineCompletion", types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=pos(text, cursor),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)), rid)

    slow.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"editEngine": {"startOnKeystroke": True}}))
    rid, req = ask(DOC, CURSOR)
    first = await req  # the client asks this document: keystrokes now start fills
    shown = first.items[0].insert_text if first.items else ""
    text, version = DOC, 1
    for on in (True, False):
        if not on:
            slow.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
                settings={"editEngine": {"startOnKeystroke": False}}))
        cursor = CURSOR + version - 1
        version += 1
        # A character the last suggestion does not start with, so the model runs (typing through a suggestion
        # is answered without it).
        ch = "q" if shown.startswith("z") else "z"
        slow.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(pos(text, cursor), pos(text, cursor)), text=ch)]))
        text = text[:cursor] + ch + text[cursor:]
        rid, req = ask(text, cursor + 1)
        answer = await req
        shown = answer.items[0].insert_text if answer.items else ""
        streamed = slow.passes[rid]
        assert streamed[-1]["final"] and streamed[-1]["text"] == (answer.items[0].insert_text if answer.items else "")
        assert ("waited" in streamed[-1]["timings"]) == on
        indices = [p["passIndex"] for p in streamed]
        assert indices == sorted(set(indices)) and not any(p["final"] for p in streamed[:-1]), indices
        assert all(p["version"] == version for p in streamed)
        if on and streamed[-1]["nfe"] > 1:  # the model ran (one token per pass): the request took it running
            assert len(streamed) > 1, streamed
    assert first.items is not None
    slow.close(uri)


async def test_a_request_waiting_on_a_keystrokes_fill_is_stale_after_the_next_keystroke(
        tmp_path: Path, slow_checkpoint: Path) -> None:
    """A request that took the fill started on its keystroke, then saw the document change again, is answered
    -32801 (content modified), never with a fill computed for a text it did not ask about. A server of its own:
    no other open document offers a copy that would end the fill in one pass, and no memory of code a draft."""
    slow = await start(tmp_path, {"modelPath": str(slow_checkpoint), "streamPasses": True, "threshold": 2.0,
                                  "maxTokens": 256, "memory": False, "showThreshold": 0})  # passes streamed
    try:
        await _stale_after_the_next_keystroke(slow)
    finally:
        await stop(slow)


async def _stale_after_the_next_keystroke(slow: Session) -> None:
    uri = "file:///early-stale.py"
    slow.open(uri, DOC)
    slow.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"editEngine": {"startOnKeystroke": True}}))

    def ask(text: str, cursor: int, rid: str | None = None) -> Any:
        return slow.request("textDocument/inlineCompletion", types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=pos(text, cursor),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)),
            rid or slow.next_id())

    def type_at(text: str, cursor: int, ch: str, version: int) -> str:
        slow.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(pos(text, cursor), pos(text, cursor)), text=ch)]))
        return text[:cursor] + ch + text[cursor:]

    first = await ask(DOC, CURSOR)  # the client asks this document: keystrokes now start fills
    shown = first.items[0].insert_text if first.items else ""
    # A character the suggestion does not start with (typing through it is answered at once): starts a long fill
    # (one token per pass).
    text = type_at(DOC, CURSOR, "q" if shown.startswith("z") else "z", 2)
    rid = slow.next_id()
    waiting = asyncio.ensure_future(ask(text, CURSOR + 1, rid))
    taken = await slow.pass_of(rid)  # the request has taken the fill, which is still running
    assert not taken["final"], taken
    type_at(text, CURSOR + 1, "b", 3)
    with pytest.raises(JsonRpcException) as info:
        await waiting
    assert info.value.code == -32801


# ---------------------------------------------------------------------------------------------- settings
async def test_settings_from_initialization_options_and_configuration(tmp_path: Path, tiny_checkpoint: Path,
                                                                      tiny: Engine) -> None:
    s = await start(tmp_path, {"modelPath": str(tiny_checkpoint), "threshold": "high", "maxTokens": -3,
                               "streamPasses": "yes", "colour": "blue"})
    try:
        warnings = [m.message for m in s.client.log_messages if m.type == types.MessageType.Warning]
        for key in ("threshold", "maxTokens", "streamPasses", "colour"):
            assert any(key in w for w in warnings), (key, warnings)
        uri = "file:///settings.py"
        s.open(uri, DOC)
        rid = s.next_id()
        answer = await s.infill({"textDocument": {"uri": uri}, "position": {"line": 4, "character": 11}}, rid)
        assert rid not in s.passes  # streamPasses fell back to its default, false
        assert answer["text"] == tiny.complete(DOC, CURSOR).text

        logged = asyncio.ensure_future(s.client.wait_for_notification("window/logMessage"))
        s.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"editEngine": {"maxTokens": 3, "streamPasses": True, "threshold": -1}}))
        message = await asyncio.wait_for(logged, DEADLINE)
        assert "threshold" in message.message
        rid = s.next_id()
        answer = await s.infill({"textDocument": {"uri": uri}, "position": {"line": 4, "character": 11}}, rid)
        assert s.passes[rid][-1]["text"] == answer["text"]
        assert answer["text"] == tiny.complete(DOC, CURSOR, max_tokens=3).text
    finally:
        await stop(s)


# ---------------------------------------------------------------------------------------------- encodings
UNICODE_DOC = "# café 😀 naïve — 漢字\ns = '😀😀'\ndef grüße(x):\n    return x  # ü\n"


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32"])
async def test_non_ascii_positions_in_each_encoding(encoding: str, tmp_path: Path, tiny_checkpoint: Path,
                                                    tiny: Engine) -> None:
    s = await start(tmp_path, {"modelPath": str(tiny_checkpoint)}, encodings=[encoding])
    try:
        assert s.capabilities.position_encoding == encoding
        uri = "file:///unicode.py"
        s.open(uri, UNICODE_DOC)
        # An incremental edit after non-ASCII text on its line: replace "x" after "return " with "x + 1".
        at = UNICODE_DOC.index("return x") + len("return ")
        text = UNICODE_DOC[:at] + "x + 1" + UNICODE_DOC[at + 1:]
        s.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(pos(UNICODE_DOC, at, encoding), pos(UNICODE_DOC, at + 1, encoding)),
                text="x + 1")]))
        # Another one inside the line with emoji (positions there differ in every encoding).
        at2 = text.index("😀😀") + 1
        text2 = text[:at2] + "é" + text[at2:]
        s.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=3),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(pos(text, at2, encoding), pos(text, at2, encoding)), text="é")]))
        cursor = text2.index("😀é😀") + 2  # after the second character of the emoji run
        p = pos(text2, cursor, encoding)
        answer = await s.infill({"textDocument": {"uri": uri, "version": 3},
                                 "position": {"line": p.line, "character": p.character}, "maxTokens": 6})
        expected = tiny.complete(text2, cursor, max_tokens=6)  # the server's text must equal ours
        assert answer["text"] == expected.text
        assert answer["range"] == rng(text2, expected.start, expected.end, encoding)
        assert offset_to_position(text2, expected.start, encoding) == (answer["range"]["start"]["line"],
                                                                        answer["range"]["start"]["character"])
    finally:
        await stop(s)


# ---------------------------------------------------------------------------------------------- packaged model
@pytest.mark.slow
async def test_packaged_model_end_to_end(tmp_path: Path) -> None:
    if not checkpoint.DEFAULT_DIR.is_dir():
        pytest.skip(f"no packaged model at {checkpoint.DEFAULT_DIR}")
    s = await start(tmp_path, {"streamPasses": True})
    try:
        uri = "file:///packaged.py"
        s.open(uri, DOC)
        rid = s.next_id()
        result = await s.request("textDocument/inlineCompletion", types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=pos(DOC, CURSOR),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)), rid)
        passes = s.passes[rid]
        assert passes[-1]["final"]
        items = result.items if hasattr(result, "items") else result["items"]
        texts = [i.insert_text if hasattr(i, "insert_text") else i["insertText"] for i in items]
        assert texts == ([passes[-1]["text"]] if passes[-1]["text"] else [])
    finally:
        await stop(s)
