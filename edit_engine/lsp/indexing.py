"""The workspace index behind the memory of code: started when the engine is loaded, kept up to date by the
client's file events.

The workspace folders come from ``initialize`` (``workspaceFolders``, else ``rootUri``/``rootPath``). With
``workspaceIndex`` on, the engine's indexer (``memory.indexer``) counts their source files on a thread of its
own, nearest the open documents first, and (``installedPackages``) the files of the packages they import; the
counts are cached on disk under ``$XDG_CACHE_HOME/edit-engine`` (``~/.cache/edit-engine``). ``didSave`` and
``workspace/didChangeWatchedFiles`` (registered dynamically when the client supports it) report changed files.
The server tells the client ``editEngine/indexed`` when the walk ends (with what it counted) and when a changed
file was counted again.
Nothing here blocks the event loop: the walk, the reads and the counting run on the indexer's thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any, Protocol

from lsprotocol import types

from edit_engine import protocol
from edit_engine.lsp.workspace import path_of


class EditEngineServer(Protocol):
    """What the index uses of ``handlers.EditEngineServer`` (not imported: the handlers import this module)."""

    settings: Any
    roots: list[str]
    documents: dict[str, Any]
    indexer: Any
    protocol: Any

    @property
    def client_capabilities(self) -> Any: ...

    @property
    def loaded_engine(self) -> Any: ...

    async def client_register_capability_async(self, params: types.RegistrationParams) -> Any: ...

log = logging.getLogger(__name__)

WATCH_GLOB = "**/*.{py,pyi,js,mjs,cjs,jsx,ts,tsx,mts,go,rs}"


def roots_of(params: types.InitializeParams) -> list[str]:
    """The local workspace folders a client names at ``initialize``."""
    uris = [f.uri for f in params.workspace_folders or ()]
    if not uris and params.root_uri:
        uris = [params.root_uri]
    paths = [p for u in uris if (p := path_of(u)) is not None]
    if not paths and params.root_path:
        paths = [Path(params.root_path)]
    return [str(p) for p in paths if p.is_dir()]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edit-engine"


def start(ls: EditEngineServer) -> None:
    """(Re)start the index for the loaded engine, when the settings ask for one and there are folders."""
    stop(ls)
    engine = ls.loaded_engine
    if engine is None or not ls.settings.workspace_index or not ls.roots:
        return
    focus = tuple(str(p.parent) for d in ls.documents.values() if (p := path_of(d.uri)) is not None)
    loop = asyncio.get_running_loop()

    def tell(event: dict[str, object]) -> None:  # on the indexer's thread: the client hears it from the loop
        loop.call_soon_threadsafe(ls.protocol.notify, protocol.INDEXED, event)

    ls.indexer = engine.index_workspace(ls.roots, focus, ls.settings.installed_packages, cache_dir(), tell)
    for uri in ls.documents:
        opened(ls, uri)
    if ls.indexer is not None:
        log.info("indexing %s", ", ".join(ls.roots))


def stop(ls: EditEngineServer) -> None:
    if ls.indexer is not None:
        ls.indexer.stop()
        ls.indexer = None


def changed(ls: EditEngineServer, uri: str) -> None:
    """A file changed on disk (saved, created, deleted): the index counts it again."""
    path = path_of(uri)
    if ls.indexer is not None and path is not None:
        ls.indexer.changed(path)


def opened(ls: EditEngineServer, uri: str) -> None:
    """A document was opened: the index leaves its (older) copy on disk out."""
    path = path_of(uri)
    if ls.indexer is not None and path is not None:
        ls.indexer.opened(path)


def closed(ls: EditEngineServer, uri: str) -> None:
    path = path_of(uri)
    if ls.indexer is not None and path is not None:
        ls.indexer.closed(path)


def did_save(ls: EditEngineServer, params: types.DidSaveTextDocumentParams) -> None:
    changed(ls, params.text_document.uri)


def did_change_watched_files(ls: EditEngineServer, params: types.DidChangeWatchedFilesParams) -> None:
    for event in params.changes:
        changed(ls, event.uri)


async def watch(ls: EditEngineServer) -> None:
    """Ask the client to report changes to source files, when it can register the watcher dynamically."""
    caps: Any = ls.client_capabilities
    dynamic = getattr(getattr(getattr(caps, "workspace", None), "did_change_watched_files", None),
                      "dynamic_registration", False)
    if not dynamic or not ls.roots or not ls.settings.workspace_index:
        return
    options = types.DidChangeWatchedFilesRegistrationOptions(watchers=[types.FileSystemWatcher(glob_pattern=WATCH_GLOB)])
    try:
        await ls.client_register_capability_async(types.RegistrationParams(registrations=[types.Registration(
            id="edit-engine-watch", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES, register_options=options)]))
    except Exception as e:  # a client that refuses: saves still update the index
        log.info("the client did not register the file watcher: %s", e)


def status(ls: EditEngineServer) -> dict[str, Any]:
    """The index's progress for ``editEngine/status``."""
    ix = ls.indexer
    if ix is None:
        return {"indexing": False}
    return {"indexing": not ix.done.is_set(), "indexed": dict(ix.stats)}
