"""Next edit in the language server: the history each document keeps (``lsp.history``), ``editEngine/nextEdit``,
the command ``editEngine.applyNextEdit`` and the related documents sent with completions.

The end-to-end tests start the real ``edit-engine lsp`` process with the packaged model (through the helpers of
``test_lsp``) and type as an editor does: one incremental ``didChange`` per keystroke. Renaming a variable at its
definition makes the server propose the same rename at its other uses; the proposal is checked against the text
the client holds, with positions computed here. Property tests check the history's bounds and that its diffs
chain (each one applies, as written, to the text before it). Nothing sleeps.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from helpers import plain
from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from test_lsp import DEADLINE, Session, pos, rng, start, stop

from edit_engine import protocol
from edit_engine.edits import patterns
from edit_engine.lsp import handlers, history
from edit_engine.lsp.documents import Document
from edit_engine.lsp.handlers import EditEngineServer
from edit_engine.model import checkpoint

DOC = """def total(items):
    count = 0
    for item in items:
        count += item.price  # coût ☕
    return count


print(total([]))
"""
# What renaming ``count`` to ``subtotal`` on row 1 leads to: the same rename on rows 3-4 (one hunk).
SITES = "        count += item.price  # coût ☕\n    return count"
RENAMED = SITES.replace("count", "subtotal")


class Editor:
    """The client's copy of a document, sent to the server a keystroke at a time."""

    def __init__(self, session: Session, uri: str, text: str, encoding: str = "utf-16") -> None:
        self.s, self.uri, self.text, self.encoding, self.version = session, uri, text, encoding, 1
        session.open(uri, text)

    def change(self, start: int, end: int, inserted: str) -> None:
        self.version += 1
        self.s.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(pos(self.text, start, self.encoding), pos(self.text, end, self.encoding)),
                text=inserted)]))
        self.text = self.text[:start] + inserted + self.text[end:]

    def rename_at(self, offset: int, old: str, new: str) -> int:
        """Backspace over ``old`` (which ends at ``offset + len(old)``) and type ``new``; returns the cursor."""
        for k in range(len(old), 0, -1):
            self.change(offset + k - 1, offset + k, "")
        for k, c in enumerate(new):
            self.change(offset + k, offset + k, c)
        return offset + len(new)

    async def next_edit(self, cursor: int, **extra: Any) -> dict[str, Any] | None:
        params = {"textDocument": {"uri": self.uri, "version": self.version},
                  "position": plain_pos(self.text, cursor, self.encoding), **extra}
        return plain(await self.s.request(protocol.NEXT_EDIT, params))  # type: ignore[no-any-return]

    def apply(self, rng_: dict[str, Any], new_text: str) -> None:
        """Apply an edit given in LSP positions (as the editor would, sending it as one change)."""
        start, end = self.offset(rng_["start"]), self.offset(rng_["end"])
        self.change(start, end, new_text)

    def offset(self, p: dict[str, Any]) -> int:
        """An LSP position back to an offset, by searching the positions computed here (small documents)."""
        return next(o for o in range(len(self.text) + 1)
                    if plain_pos(self.text, o, self.encoding) == p)


def plain_pos(text: str, offset: int, encoding: str) -> dict[str, int]:
    p = pos(text, offset, encoding)
    return {"line": p.line, "character": p.character}


def needs_packaged_model() -> None:
    assert checkpoint.DEFAULT_DIR.is_dir(), f"no packaged model at {checkpoint.DEFAULT_DIR}: the package ships it"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def packaged(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Session]:
    """The server with the packaged model; it answers ``workspace/applyEdit`` and records what it was sent."""
    needs_packaged_model()
    s = await start(tmp_path_factory.mktemp("lsp-next-edit"), {})
    s.applied = []  # type: ignore[attr-defined]

    @s.client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        s.applied.append(params)  # type: ignore[attr-defined]
        return types.ApplyWorkspaceEditResult(applied=True)

    yield s
    await stop(s)


e2e = pytest.mark.asyncio(loop_scope="module")  # the async tests share the module's event loop (and server)


# ---------------------------------------------------------------------------------------------- end to end
@pytest.mark.slow
@e2e
async def test_the_command_is_declared(packaged: Session) -> None:
    provider = packaged.capabilities.execute_command_provider
    assert provider is not None and protocol.APPLY_NEXT_EDIT_COMMAND in provider.commands


@pytest.mark.slow
@e2e
async def test_a_rename_is_proposed_at_the_other_site_and_applied_by_the_command(packaged: Session) -> None:
    ed = Editor(packaged, "file:///rename.py", DOC)
    cursor = ed.rename_at(DOC.index("count"), "count", "subtotal")
    result = await ed.next_edit(cursor)
    at = ed.text.index(SITES)
    assert result is not None, "no proposal"
    assert result["range"] == rng(ed.text, at, at + len(SITES))
    assert result["newText"] == RENAMED
    assert result["version"] == ed.version and result["kind"] == "pattern" and "rename" in result["patterns"]

    # The proposal's command sends it back as workspace/applyEdit (a plain ``changes`` edit: this client does
    # not take versioned ones).
    command = result["command"]
    assert command["command"] == protocol.APPLY_NEXT_EDIT_COMMAND
    answer = plain(await packaged.request(types.WORKSPACE_EXECUTE_COMMAND, types.ExecuteCommandParams(
        command=command["command"], arguments=command["arguments"])))
    assert answer == {"applied": True}
    sent = packaged.applied[-1]  # type: ignore[attr-defined]
    assert sent.edit.changes is not None and list(sent.edit.changes) == [ed.uri]
    (edit,) = sent.edit.changes[ed.uri]
    assert edit.new_text == RENAMED
    assert plain_pos(ed.text, at, "utf-16") == {"line": edit.range.start.line, "character": edit.range.start.character}
    ed.apply(result["range"], result["newText"])  # the editor applies it and says so
    assert ed.text == DOC.replace("count", "subtotal")
    # Nothing is left to rename: no proposal (rather than a wrong one).
    assert await ed.next_edit(ed.text.index("subtotal\n\n") + len("subtotal")) is None


@pytest.mark.slow
@e2e
async def test_positions_in_utf8(tmp_path: Path) -> None:
    """The range is in the negotiated encoding (the edited rows hold characters of 2, 3 bytes and 2 UTF-16
    units... the end position differs per encoding)."""
    needs_packaged_model()
    s = await start(tmp_path, {}, encodings=["utf-8"])
    try:
        ed = Editor(s, "file:///utf8.py", DOC.replace("print(", "# ☕ 𝄞\nprint("), encoding="utf-8")
        cursor = ed.rename_at(ed.text.index("count"), "count", "subtotal")
        result = await ed.next_edit(cursor)
        at = ed.text.index(SITES)
        assert result is not None and result["range"] == rng(ed.text, at, at + len(SITES), "utf-8")
        assert result["newText"] == RENAMED
    finally:
        await stop(s)


@pytest.mark.slow
@e2e
async def test_a_region_limits_where_the_edit_may_go(packaged: Session) -> None:
    ed = Editor(packaged, "file:///region.py", DOC)
    cursor = ed.rename_at(DOC.index("count"), "count", "subtotal")
    # Rows 0-2 only: the uses on rows 3-4 are outside; nothing to propose there.
    region = {"start": {"line": 0, "character": 0}, "end": {"line": 3, "character": 0}}
    assert await ed.next_edit(cursor, range=region) is None
    whole = {"start": {"line": 0, "character": 0}, "end": {"line": 8, "character": 0}}
    result = await ed.next_edit(cursor, range=whole)
    assert result is not None and result["newText"] == RENAMED


LIB = """def load_config(path):
    return open(path).read()


def main():
    return load_config("app.toml")
"""
APP = """from lib import load_config


def run(path):
    cfg = load_config(path)
    return cfg
"""


@pytest.mark.slow
@e2e
async def test_a_rename_is_carried_to_another_open_document(packaged: Session) -> None:
    """A function renamed where it is defined, and at its use there: the next edit is in the other open file
    that imports it, named by the answer's ``textDocument``; the command applies it there; the answer after that
    is that file's second use. A region keeps the search in the asked document."""
    app = Editor(packaged, "file:///carry/app.py", APP)
    lib = Editor(packaged, "file:///carry/lib.py", LIB)
    lib.rename_at(LIB.index("load_config"), "load_config", "read_config")
    cursor = lib.rename_at(lib.text.rindex("load_config"), "load_config", "read_config")
    assert await lib.next_edit(cursor) is None  # a client that does not say it can show one gets none
    result = await lib.next_edit(cursor, otherDocuments=True)
    assert result is not None, "no proposal"
    assert result["textDocument"] == {"uri": app.uri, "version": app.version}
    assert result["version"] == lib.version  # the asked document's version, which the client checks
    row = "from lib import load_config"
    assert result["range"] == rng(app.text, 0, len(row)) and result["newText"] == "from lib import read_config"
    assert "rename" in result["patterns"]
    command = result["command"]
    assert command["arguments"][0]["textDocument"] == {"uri": app.uri, "version": app.version}
    answer = plain(await packaged.request(types.WORKSPACE_EXECUTE_COMMAND, types.ExecuteCommandParams(
        command=command["command"], arguments=command["arguments"])))
    assert answer == {"applied": True}
    sent = packaged.applied[-1]  # type: ignore[attr-defined]
    assert sent.edit.changes is not None and list(sent.edit.changes) == [app.uri]
    app.apply(result["range"], result["newText"])
    second = await lib.next_edit(cursor, otherDocuments=True)
    at = app.text.index("    cfg = load_config(path)")
    assert second is not None and second["textDocument"]["uri"] == app.uri
    assert second["range"] == rng(app.text, at, at + len("    cfg = load_config(path)"))
    assert second["newText"] == "    cfg = read_config(path)"
    whole = {"start": {"line": 0, "character": 0}, "end": {"line": 6, "character": 0}}
    assert await lib.next_edit(cursor, range=whole, otherDocuments=True) is None
    app.apply(second["range"], second["newText"])
    assert app.text == APP.replace("load_config", "read_config")
    assert await lib.next_edit(cursor, otherDocuments=True) is None  # nothing left anywhere: no proposal


@pytest.mark.slow
@e2e
async def test_a_file_not_changed_yet_takes_the_patterns_of_the_one_changed_last(packaged: Session) -> None:
    """The function renamed in lib.py; the user goes to app.py, which has no changes of its own, and asks there:
    the edit is in app.py (the server searches it first with lib.py's history)."""
    lib = Editor(packaged, "file:///moved/lib.py", LIB)
    app = Editor(packaged, "file:///moved/app.py", APP)
    lib.rename_at(LIB.index("load_config"), "load_config", "read_config")
    lib.rename_at(lib.text.rindex("load_config"), "load_config", "read_config")
    assert await app.next_edit(0) is None  # a client that does not ask for others: app.py's own history is empty
    result = await app.next_edit(len(app.text), otherDocuments=True)
    assert result is not None, "no proposal"
    assert result["textDocument"] == {"uri": app.uri, "version": app.version} and result["version"] == app.version
    assert result["range"] == rng(app.text, 0, len("from lib import load_config"))
    assert result["newText"] == "from lib import read_config"


@pytest.mark.slow
@e2e
async def test_bad_params_unknown_documents_and_stale_versions_get_errors(packaged: Session) -> None:
    ed = Editor(packaged, "file:///errors.py", DOC)
    td = {"uri": ed.uri}
    at = {"line": 1, "character": 4}
    bad: list[tuple[str, Any, int, str]] = [
        (protocol.NEXT_EDIT, [1, 2], -32602, "params must be an object"),
        (protocol.NEXT_EDIT, {"position": at}, -32602, "textDocument.uri is required"),
        (protocol.NEXT_EDIT, {"textDocument": td}, -32602, "position is required"),
        (protocol.NEXT_EDIT, {"textDocument": td, "position": {"line": -1, "character": 0}}, -32602, "position"),
        (protocol.NEXT_EDIT, {"textDocument": td, "position": at, "range": "rows"}, -32602, "range"),
        (protocol.NEXT_EDIT, {"textDocument": td, "position": at, "range": {
            "start": {"line": 3, "character": 0}, "end": {"line": 1, "character": 0}}}, -32602, "ends before"),
        (protocol.NEXT_EDIT, {"textDocument": {"uri": "file:///not-open.py"}, "position": at}, -32602, "not open"),
        (protocol.NEXT_EDIT, {"textDocument": td, "position": at, "otherDocuments": "yes"}, -32602,
         "otherDocuments"),
        (protocol.NEXT_EDIT, {"textDocument": {**td, "version": 7}, "position": at}, -32801, "version"),
        (protocol.NEXT_EDIT, {"textDocument": {**td, "version": "one"}, "position": at}, -32602, "version"),
        (types.WORKSPACE_EXECUTE_COMMAND, {"command": protocol.APPLY_NEXT_EDIT_COMMAND, "arguments": []}, -32602,
         "one argument"),
        (types.WORKSPACE_EXECUTE_COMMAND, {"command": protocol.APPLY_NEXT_EDIT_COMMAND, "arguments": [
            {"textDocument": td, "range": {"start": at, "end": at}, "newText": 3}]}, -32602, "newText"),
        (types.WORKSPACE_EXECUTE_COMMAND, {"command": protocol.APPLY_NEXT_EDIT_COMMAND, "arguments": [
            {"textDocument": {"uri": "file:///gone.py"}, "range": {"start": at, "end": at}, "newText": ""}]},
         -32602, "not open"),
        (types.WORKSPACE_EXECUTE_COMMAND, {"command": "editEngine.noSuchCommand", "arguments": []}, -32602,
         "noSuchCommand"),
    ]
    for method, params, code, words in bad:
        with pytest.raises(JsonRpcException) as info:
            await packaged.raw_request(method, params)
        assert info.value.code == code, (params, info.value)
        assert words in str(info.value), (params, info.value)
    # The server still serves, and nothing was sent to the client.
    status = plain(await packaged.request("editEngine/status", {}))
    assert status["inflight"] == 0
    assert not any(p.edit.changes and "file:///errors.py" in p.edit.changes
                   for p in packaged.applied)  # type: ignore[attr-defined]


@pytest.mark.slow
@e2e
async def test_a_document_closed_or_changed_while_asked_is_not_answered_with_an_edit(packaged: Session) -> None:
    ed = Editor(packaged, "file:///closed.py", DOC)
    cursor = ed.rename_at(DOC.index("count"), "count", "subtotal")
    asked = ed.version
    request = packaged.client.protocol.send_request(protocol.NEXT_EDIT, {
        "textDocument": {"uri": ed.uri, "version": asked}, "position": plain_pos(ed.text, cursor, "utf-16")})
    ed.change(0, 0, "# new first row\n")  # sent right after the request: the server reads it while the engine runs
    try:
        result = plain(await asyncio.wait_for(asyncio.wrap_future(request), DEADLINE))
    except JsonRpcException as e:
        assert e.code == -32801
    else:  # answered before the change was read: for the version it was asked about
        assert result is not None and result["version"] == asked
    packaged.client.text_document_did_close(types.DidCloseTextDocumentParams(
        types.TextDocumentIdentifier(uri=ed.uri)))
    with pytest.raises(JsonRpcException) as info:
        await ed.next_edit(cursor)
    assert info.value.code == -32602


# ---------------------------------------------------------------------------------------------- history
def strict_apply(text: str, diff: str, undo: bool = False) -> str:
    """``text`` after ``diff`` (``undo``: before it), whose hunks must match it exactly where their headers say."""
    rows = text.split("\n")
    for h in reversed(patterns.parse_diff(diff)):
        start, before, after = (h.new_start, h.new_rows, h.old_rows) if undo else (h.old_start, h.old_rows, h.new_rows)
        assert rows[start: start + len(before)] == before, (h, rows)
        rows[start: start + len(before)] = after
    return "\n".join(rows)


def strict_undo(text: str, diff: str) -> str:
    """``text`` before ``diff``, whose hunks must match it exactly where their headers put their new rows."""
    return strict_apply(text, diff, undo=True)


def type_into(doc: Document, offset: int, old: str, new: str) -> None:
    """Backspace over ``old`` ending at ``offset + len(old)`` and type ``new``, a change per key."""
    for k in range(len(old), 0, -1):
        apply_at(doc, offset + k - 1, offset + k, "")
    for k, c in enumerate(new):
        apply_at(doc, offset + k, offset + k, c)


def apply_at(doc: Document, start: int, end: int, inserted: str) -> None:
    s, e = doc.position(start, "utf-32"), doc.position(end, "utf-32")
    doc.apply(types.TextDocumentContentChangePartial(
        range=types.Range(types.Position(*s), types.Position(*e)), text=inserted), "utf-32")


def test_a_typed_word_is_one_diff_and_an_edit_elsewhere_another() -> None:
    doc = Document("file:///w/x.py", DOC, 1, "python")
    type_into(doc, DOC.index("count"), "count", "subtotal")
    (d,) = doc.history.diffs(doc.text)
    assert d.startswith("--- a/x.py\n+++ b/x.py\n@@ -1,5 +1,5 @@\n")
    assert "-    count = 0\n+    subtotal = 0\n" in d
    assert strict_apply(DOC, d) == doc.text
    # A line break and a new row typed after it belong to the same edit ...
    end_of_row = doc.text.index("subtotal = 0") + len("subtotal = 0")
    apply_at(doc, end_of_row, end_of_row, "\n    ")
    for k, c in enumerate("n = 0"):
        apply_at(doc, end_of_row + 5 + k, end_of_row + 5 + k, c)
    assert len(doc.history.diffs(doc.text)) == 1
    # ... an edit on another row is the next one.
    type_into(doc, doc.text.index("count +="), "count", "subtotal")
    first, second = doc.history.diffs(doc.text)
    assert strict_apply(strict_apply(DOC, first), second) == doc.text
    assert "+    n = 0\n" in first and "-        count += item.price" in second
    # Typing a word and deleting it again is no edit.
    type_into(doc, 0, "", "xyz")
    type_into(doc, 0, "xyz", "")
    assert doc.history.diffs(doc.text) == [first, second]


def test_a_large_change_starts_the_history_again() -> None:
    doc = Document("file:///x.py", DOC, 1, "python")
    type_into(doc, DOC.index("count"), "count", "subtotal")
    paste = "x = 1\n" * (history.MAX_EDIT_ROWS + 1)
    apply_at(doc, len(doc.text), len(doc.text), paste)
    assert doc.history.diffs(doc.text) == []
    type_into(doc, 0, "def", "async def")
    (d,) = doc.history.diffs(doc.text)
    assert strict_apply(DOC.replace("count = 0", "subtotal = 0") + paste, d) == doc.text


def test_a_whole_text_change_is_recorded_as_what_changed() -> None:
    doc = Document("file:///x.py", DOC, 1, "python")
    new = DOC.replace("return count", "return count * 2")
    doc.apply(types.TextDocumentContentChangeWholeDocument(text=new), "utf-16")
    (d,) = doc.history.diffs(doc.text)
    assert "-    return count\n+    return count * 2\n" in d and strict_apply(DOC, d) == new


# Documents of a few rows, edited with a small alphabet so that rows repeat and edits merge and split rows.
ALPHABET = "ab\n é\r"
edits = st.lists(st.tuples(st.floats(0, 1), st.floats(0, 0.2), st.text(ALPHABET, max_size=4), st.booleans()),
                 max_size=60)


@settings(max_examples=150, deadline=None)
@given(st.text(ALPHABET, max_size=40), edits, st.integers(2, 6))
def test_history_is_bounded_and_its_diffs_chain(text: str, changes: list[tuple[float, float, str, bool]],
                                                bound: int) -> None:
    doc = Document("file:///p.py", text, 1, "python")
    doc.history = history.EditHistory("p.py", max_edits=bound)
    states = [text]
    for at, length, inserted, whole in changes:
        start = int(at * len(doc.text))
        end = min(len(doc.text), start + int(length * len(doc.text)))
        if whole:
            new = doc.text[:start] + inserted + doc.text[end:]
            doc.apply(types.TextDocumentContentChangeWholeDocument(text=new), "utf-16")
        else:
            apply_at(doc, start, end, inserted)
        states.append(doc.text)
        diffs = doc.history.diffs(doc.text)
        assert len(diffs) <= bound and len(doc.history) <= bound + 1
        # Undone newest first, each diff gives a text the document had; applied forwards, they give it back.
        undone = [doc.text]
        for d in reversed(diffs):
            undone.append(strict_undo(undone[-1], d))
        assert all(u in states for u in undone)
        base = undone[-1]
        for d in diffs:
            base = strict_apply(base, d)
        assert base == doc.text


# ---------------------------------------------------------------------------------------------- related
def test_related_documents_are_the_same_language_most_recent_first_and_capped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ls = EditEngineServer()
    names = itertools.count()

    def open_(language: str, text: str) -> Document:
        d = Document(f"file:///{next(names)}", text, 1, language)
        ls.documents[d.uri] = d
        return d

    current = open_("python", "x = 1\n")
    a = open_("python", "a = 1\n")
    open_("rust", "let r = 1;\n")
    b = open_("python", "b = 2\n")
    big = open_("python", "c" * (protocol.MAX_DOCUMENT_CHARS + 1))
    open_("python", "")
    apply_at(a, 0, 0, "# edited\n")  # a is now the most recently edited
    assert handlers.related_texts(ls, current) == [a.text, b.text]
    assert big.text not in handlers.related_texts(ls, current)
    monkeypatch.setattr(handlers, "MAX_RELATED", 1)
    assert handlers.related_texts(ls, current) == [a.text]
    monkeypatch.setattr(handlers, "MAX_RELATED", 16)
    monkeypatch.setattr(handlers, "MAX_RELATED_CHARS", len(b.text))  # a no longer fits; b does
    assert handlers.related_texts(ls, current) == [b.text]


@pytest.mark.slow
@e2e
async def test_completions_get_the_other_open_documents(tmp_path: Path) -> None:
    """The other open Python file reaches the engine (it is searched for copies): the log says how many."""
    needs_packaged_model()
    s = await start(tmp_path, {})
    try:
        s.open("file:///other.py", "def helper(values):\n    return sorted(set(values))\n")
        s.open("file:///other.rs", "fn main() {}\n", language="rust")
        doc = "import os\n\n\ndef unique(values):\n    return \n"
        s.open("file:///main.py", doc)
        at = doc.index("return ") + len("return ")
        await asyncio.wait_for(s.client.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri="file:///main.py"), position=pos(doc, at),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))),
            DEADLINE)
        log = s.log_file.read_text()
        assert "related: 1 documents" in log, log[-2000:]
    finally:
        await stop(s)


@e2e
async def test_a_costly_next_edit_never_delays_a_fill(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """Sixteen block edits (150 rows changed, one added) made the history's analysis take 14 s on the model
    thread, and a fill in another document waited for it. The analysis runs on a thread of its own, within its
    budget: the fill is answered meanwhile."""
    s = await start(tmp_path, {"modelPath": str(tiny_checkpoint), "showThreshold": 0})
    try:
        text = "".join(f"row_{i} = func_{i}(alpha, beta)\n" for i in range(2600))
        ed = Editor(s, "file:///blocks.py", text)
        for k in range(16):
            lines = ed.text.splitlines(True)
            start_, end_ = sum(map(len, lines[: 150 * k])), sum(map(len, lines[: 150 * k + 150]))
            ed.change(start_, end_, "".join(x.replace(")", f", k{k})") for x in lines[150 * k : 150 * k + 150])
                      + f"extra_{k} = {k}\n")
        doc = "def add(a, b):\n    return \n"
        s.open("file:///small.py", doc)
        pending = asyncio.ensure_future(ed.next_edit(len(ed.text) // 2))
        t = asyncio.get_running_loop().time()
        await s.infill({"textDocument": {"uri": "file:///small.py"}, "position": pos(doc, doc.index("return ") + 7)})
        waited = asyncio.get_running_loop().time() - t
        assert waited < 6.0, f"the fill waited {waited:.1f} s behind the next edit"
        await asyncio.wait_for(pending, DEADLINE)
    finally:
        await stop(s)
