"""Files beside a document on disk reach the engine as related code: listed by language, the open ones left to
the editor's text, bounded, re-read only when they change; end to end, a line found only in a sibling file is
what the language server proposes."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import plain
from lsprotocol import types
from test_lsp import DEADLINE, pos, start, stop

from edit_engine.lsp import workspace
from edit_engine.lsp.workspace import Workspace, path_of


def write(p: Path, text: str) -> Path:
    p.write_text(text, encoding="utf-8")
    return p


def test_siblings_are_same_language_not_open_largest_first(tmp_path: Path) -> None:
    main = write(tmp_path / "main.py", "x = 1\n")
    small = write(tmp_path / "small.py", "a = 1\n")
    large = write(tmp_path / "large.py", "b = 2\n" * 20)
    opened = write(tmp_path / "opened.py", "c = 3\n")
    write(tmp_path / "other.rs", "fn main() {}\n")
    write(tmp_path / "empty.py", "")
    (tmp_path / "pkg.py").mkdir()
    got = Workspace().siblings(main.as_uri(), "python", {opened.as_uri()})
    assert [u for u, _ in got] == [large.as_uri(), small.as_uri()]
    assert got[0][1] == large.read_text()


def test_siblings_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    main = write(tmp_path / "main.py", "x = 1\n")
    for i in range(5):
        write(tmp_path / f"m{i}.py", "y = 1\n" * (i + 1))
    write(tmp_path / "huge.py", "z = 1\n" * 100)
    monkeypatch.setattr(workspace, "MAX_FILES", 2)
    monkeypatch.setattr(workspace, "MAX_FILE_CHARS", 50)
    got = Workspace().siblings(main.as_uri(), "python", set())
    assert [Path(path_of(u) or "").name for u, _ in got] == ["m4.py", "m3.py"]  # huge.py is over the size cap


def test_a_changed_file_is_read_again_and_others_come_from_the_cache(tmp_path: Path) -> None:
    main = write(tmp_path / "main.py", "x = 1\n")
    sib = write(tmp_path / "sib.py", "old = 1\n")
    ws = Workspace()
    assert ws.siblings(main.as_uri(), "python", set())[0][1] == "old = 1\n"
    write(sib, "newer = 2\n")
    st = sib.stat()
    os.utime(sib, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a later modification time
    assert ws.siblings(main.as_uri(), "python", set())[0][1] == "newer = 2\n"


def test_an_unchanged_folder_is_listed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder's listing is kept while its modification time stays and is older than ``SETTLE_NS`` when
    listed; a folder that changed since (an added file) or just changed is listed again."""
    main = write(tmp_path / "main.py", "x = 1\n")
    write(tmp_path / "a.py", "a = 1\n")
    scans: list[str] = []
    scandir = os.scandir
    monkeypatch.setattr(workspace.os, "scandir", lambda p: scans.append(str(p)) or scandir(p))

    def settle(seconds_ago: float) -> None:
        t = time.time_ns() - int(seconds_ago * 1e9)
        os.utime(tmp_path, ns=(t, t))

    ws = Workspace()
    settle(10)
    assert [path_of(u) for u, _ in ws.siblings(main.as_uri(), "python", set())] == [tmp_path / "a.py"]
    assert [path_of(u) for u, _ in ws.siblings(main.as_uri(), "python", set())] == [tmp_path / "a.py"]
    assert len(scans) == 1
    write(tmp_path / "bb.py", "b = 22\n")
    settle(5)  # a later modification time than the one listed
    assert [path_of(u) for u, _ in ws.siblings(main.as_uri(), "python", set())] == [tmp_path / "bb.py",
                                                                                  tmp_path / "a.py"]
    assert len(scans) == 2
    settle(0)  # changed just now: a listing taken now is not trusted next time
    ws.siblings(main.as_uri(), "python", set())
    ws.siblings(main.as_uri(), "python", set())
    assert len(scans) == 4


def test_only_file_uris_have_siblings(tmp_path: Path) -> None:
    assert Workspace().siblings("untitled:Untitled-1", "python", set()) == []
    assert Workspace().siblings((tmp_path / "gone" / "x.py").as_uri(), "python", set()) == []
    assert path_of("file:///a%20b/c.py") == Path("/a b/c.py")


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_line_found_only_in_a_sibling_file_is_proposed(tmp_path: Path) -> None:
    """The sibling is never opened in the editor: the language server finds it on disk, and the blank line
    gets the line that follows the same two lines there (a verified copy)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    write(pkg / "loader.py", "import json\n\n\ndef load(path):\n    with open(path, encoding='utf-8') as f:\n"
                             "        data = json.load(f)\n    return data\n")
    doc = "import json\n\n\ndef read_config(path):\n    with open(path, encoding='utf-8') as f:\n        \n" \
          "    return data\n"
    main = write(pkg / "main.py", doc)
    s = await start(tmp_path, {})
    try:
        s.open(main.as_uri(), doc)
        at = doc.index("as f:\n") + len("as f:\n        ")
        result = await asyncio.wait_for(s.client.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=main.as_uri()), position=pos(doc, at),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))),
            DEADLINE)
        items = result.items if isinstance(result, types.InlineCompletionList) else result
        assert items, result
        text = items[0].insert_text
        assert isinstance(text, str) and text.strip() == "data = json.load(f)", text
        assert "related: 1 documents" in s.log_file.read_text()
    finally:
        await stop(s)


async def _invoke(s: Any, uri: str, doc: str, at: int) -> str:
    result = await asyncio.wait_for(s.client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=pos(doc, at),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))), DEADLINE)
    items = result.items if isinstance(result, types.InlineCompletionList) else result
    assert items, result
    text = items[0].insert_text
    assert isinstance(text, str)
    return text


@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_workspace_index_feeds_drafts_and_follows_saves(tmp_path: Path) -> None:
    """A name defined only in a file two folders away (never opened, not beside the document) is drafted once
    the server says it has indexed the workspace; a function added to that file and saved is drafted after the
    server says it counted the file again."""
    ws = tmp_path / "proj"
    (ws / "lib" / "geometry").mkdir(parents=True)
    (ws / "app").mkdir()
    shapes = write(ws / "lib" / "geometry" / "shapes.py",
                   "def frobnicate_widget_area(width, height):\n    return width * height\n\n\n"
                   + "print(frobnicate_widget_area(3, 4))\n" * 3)
    doc = "import os\n\n\nresult = frobnicate_"
    main = write(ws / "app" / "main.py", doc)
    s = await start(tmp_path, {"memory": True, "showThreshold": 0}, root=ws)
    try:
        walked = await asyncio.wait_for(s.indexed.get(), DEADLINE)
        assert walked["event"] == "walked" and walked["files"] >= 2, walked
        status = plain(await s.request("editEngine/status", {}))
        assert status["indexing"] is False and status["indexed"]["files"] >= 2, status
        s.open(main.as_uri(), doc)  # its copy on disk is left out of the index from now on (the editor's is newer)
        opened = await asyncio.wait_for(s.indexed.get(), DEADLINE)
        assert opened == {"event": "changed", "path": str(main)}, opened
        assert (await _invoke(s, main.as_uri(), doc, len(doc))).startswith("widget_area")
        write(shapes, shapes.read_text() + "\n\ndef zorblify_gadget_volume(depth):\n    return depth\n")
        s.client.text_document_did_save(types.DidSaveTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=shapes.as_uri())))
        changed = await asyncio.wait_for(s.indexed.get(), DEADLINE)
        assert changed == {"event": "changed", "path": str(shapes)}, changed
        other = write(ws / "app" / "other.py", "value = zorblify_")
        s.open(other.as_uri(), other.read_text())
        assert (await _invoke(s, other.as_uri(), "value = zorblify_", len("value = zorblify_"))).startswith(
            "gadget_volume")
    finally:
        await stop(s)


def test_only_regular_files_are_read_and_their_size_is_checked_when_read(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A symbolic link beside the document is not followed (what it points to, outside the folder, is never
    read); a sibling replaced by a FIFO after the listing is skipped without blocking (opening a FIFO for
    reading waits for a writer); one grown past the size limit since the listing is not read."""
    import threading

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    main = write(pkg / "main.py", "x = 1\n")
    outside = write(tmp_path / "secret.py", "KEY = 'sk-live-abc'\n")
    os.symlink(outside, pkg / "link.py")
    fifo = write(pkg / "fifo.py", "a = 1\n" * 3)
    grown = write(pkg / "grown.py", "b = 2\n" * 2)
    monkeypatch.setattr(workspace, "MAX_FILE_CHARS", 40)
    ws = Workspace()
    assert ws.listing(pkg) is not None
    fifo.unlink()
    os.mkfifo(fifo)
    write(grown, "b = 2\n" * 100)
    got: list[list[tuple[str, str]]] = []
    t = threading.Thread(target=lambda: got.append(ws.siblings(main.as_uri(), "python", set())), daemon=True)
    t.start()
    t.join(DEADLINE)
    assert got, "reading the siblings blocked"
    assert got[0] == []
