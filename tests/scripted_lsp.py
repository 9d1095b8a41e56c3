"""A language server whose answers are scripted: the client tests' way to show a suggestion (or a next edit)
whose words and range they choose, where what the model would say is not the point.

    python tests/scripted_lsp.py ANSWERS.json    # {"inline": ["first answer", ...], "nextEdit": [{...}, ...]}

The n-th ``textDocument/inlineCompletion`` is answered with the n-th text (the last one repeats), inserted at
the cursor; an empty text answers with no item. The n-th ``editEngine/nextEdit`` is answered with the n-th
``{"range": ..., "newText": ...}`` (the last one repeats; none: null), for the document's current version.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer


def build(answers: list[str], edits: list[dict[str, Any]] | None = None) -> LanguageServer:
    server = LanguageServer("scripted-lsp", "1")
    asked = [0, 0]

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION)
    def inline(params: types.InlineCompletionParams) -> types.InlineCompletionList:
        text = answers[min(asked[0], len(answers) - 1)] if answers else ""
        asked[0] += 1
        if not text:
            return types.InlineCompletionList(items=[])
        at = types.Range(params.position, params.position)
        return types.InlineCompletionList(items=[types.InlineCompletionItem(insert_text=text, range=at)])

    @server.feature("editEngine/nextEdit")
    def next_edit(params: Any) -> dict[str, Any] | None:
        if not edits:
            return None
        edit = edits[min(asked[1], len(edits) - 1)]
        asked[1] += 1
        doc = server.workspace.get_text_document(params.textDocument.uri)
        return {**edit, "version": doc.version, "kind": "pattern", "patterns": [], "elapsedMs": 0.0}

    return server


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        script = json.load(f)
    build(script.get("inline", []), script.get("nextEdit")).start_io()
