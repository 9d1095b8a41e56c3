"""A language server whose inline completions are scripted: the client tests' way to show a suggestion whose
words they choose, where what the model would say is not the point.

    python tests/scripted_lsp.py ANSWERS.json    # {"inline": ["first answer", "second", ...]}

The n-th ``textDocument/inlineCompletion`` is answered with the n-th text (the last one repeats), inserted at
the cursor; an empty text answers with no item.
"""

from __future__ import annotations

import json
import sys

from lsprotocol import types
from pygls.lsp.server import LanguageServer


def build(answers: list[str]) -> LanguageServer:
    server = LanguageServer("scripted-lsp", "1")
    asked = [0]

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION)
    def inline(params: types.InlineCompletionParams) -> types.InlineCompletionList:
        text = answers[min(asked[0], len(answers) - 1)]
        asked[0] += 1
        if not text:
            return types.InlineCompletionList(items=[])
        at = types.Range(params.position, params.position)
        return types.InlineCompletionList(items=[types.InlineCompletionItem(insert_text=text, range=at)])

    return server


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        build(json.load(f)["inline"]).start_io()
