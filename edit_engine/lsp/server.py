"""The edit-engine language server: registers the handlers in ``lsp.handlers``, nothing else.

Capabilities: incremental text sync, ``textDocument/inlineCompletion`` (LSP 3.18), ``textDocument/completion``
(fallback: one item whose ``textEdit`` is the fill), the custom request ``editEngine/infill``, the client
notification ``editEngine/accepted`` (telemetry), and ``editEngine/pass`` notifications while denoising when
the client sets ``initializationOptions.streamPasses``, the request ``editEngine/status`` (counts of open
documents and of work in flight), the request ``editEngine/nextEdit`` and the command ``editEngine.applyNextEdit``
(``workspace/executeCommand``; it sends the edit back as ``workspace/applyEdit``). ``didSave`` and
``workspace/didChangeWatchedFiles`` keep the memory's workspace index up to date (``lsp.indexing``).
"""

from __future__ import annotations

from lsprotocol import types

from edit_engine import protocol
from edit_engine.lsp import handlers, indexing
from edit_engine.lsp.handlers import EditEngineServer
from edit_engine.lsp.rpc import STATUS
from edit_engine.lsp.settings import Settings


def create_server(settings: Settings | None = None) -> EditEngineServer:
    """A server with every handler registered; start it with ``start_io()`` or ``start_tcp(host, port)``."""
    ls = EditEngineServer(settings)
    ls.feature(types.INITIALIZE)(handlers.initialize)
    ls.feature(types.INITIALIZED)(handlers.initialized)
    ls.feature(types.TEXT_DOCUMENT_DID_OPEN)(handlers.did_open)
    ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)(handlers.did_change)
    ls.feature(types.TEXT_DOCUMENT_DID_CLOSE)(handlers.did_close)
    ls.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))(indexing.did_save)
    ls.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)(indexing.did_change_watched_files)
    ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)(handlers.did_change_configuration)
    # pygls only advertises inline completion when it is registered with options.
    ls.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())(handlers.inline_completion)
    ls.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions())(handlers.completion)
    ls.feature(protocol.INFILL)(handlers.infill)
    ls.feature(protocol.NEXT_EDIT)(handlers.next_edit)
    ls.command(protocol.APPLY_NEXT_EDIT_COMMAND)(handlers.apply_next_edit)
    ls.feature(protocol.ACCEPTED)(handlers.accepted)
    ls.feature(STATUS)(handlers.status)
    return ls
