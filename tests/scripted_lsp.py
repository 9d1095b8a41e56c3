"""A language server whose answers are scripted: the client tests' way to show a suggestion (or a next edit)
whose words and range they choose, where what the model would say is not the point.

    python tests/scripted_lsp.py ANSWERS.json    # {"inline": ["first answer", ...], "nextEdit": [{...}, ...]}

The n-th ``textDocument/inlineCompletion`` is answered with the n-th text (the last one repeats), inserted at
the cursor; an empty text answers with no item. The n-th ``editEngine/nextEdit`` is answered with the n-th
``{"range": ..., "newText": ...}`` (the last one repeats; none: null), for the document's current version, with
the real server's ``command`` (``editEngine.applyNextEdit``, which sends the edit back as ``workspace/applyEdit``).
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
        arg = {"textDocument": {"uri": doc.uri, "version": doc.version}, **edit}
        return {**edit, "version": doc.version, "kind": "pattern", "patterns": [], "elapsedMs": 0.0,
                "command": {"title": "Apply next edit", "command": "editEngine.applyNextEdit", "arguments": [arg]}}

    @server.command("editEngine.applyNextEdit")
    async def apply(arg: Any) -> dict[str, Any]:  # as the real server: the edit goes back as workspace/applyEdit
        if not isinstance(arg, dict):
            arg = json.loads(json.dumps(arg, default=lambda o: o.__dict__))
        text_edit = types.TextEdit(range=types.Range(
            types.Position(arg["range"]["start"]["line"], arg["range"]["start"]["character"]),
            types.Position(arg["range"]["end"]["line"], arg["range"]["end"]["character"])), new_text=arg["newText"])
        result = await server.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(
            edit=types.WorkspaceEdit(changes={arg["textDocument"]["uri"]: [text_edit]})))
        return {"applied": bool(result.applied)}

    return server


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        script = json.load(f)
    build(script.get("inline", []), script.get("nextEdit")).start_io()
