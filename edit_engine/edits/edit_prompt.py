"""The edit model's prompt: the recent changes as diff rows, the row to rewrite, then the file around it.

An edit model (trained by ``edit-engine train --edits``; ``edit_engine/models/edit``) fills one hole like the
infill model, but its prefix starts with a block that shows what the user just changed::

    ### edits
    @@
    -    total = price * count
    +    total = price * count * rate
    @@
    ...                                   (older changes first; the oldest dropped to fit HISTORY_TOKENS)
    ### next
    -        cost = price * extra          (the row to rewrite, as it stands)
    ### file
    <the file's rows above that row, up to its indentation>

The hole is that row's new text (from its first non-blank character), the suffix the file from the end of the
row on. Training (``train.edits``) and serving (``next_edit``) build the prompt with ``prompt_ids`` alone, so
the token boundaries are the same in both.
"""

from __future__ import annotations

from collections.abc import Sequence

from edit_engine.model.interfaces import TextTokenizer
from edit_engine.model.tokenizer import trim_end, trim_start

EDITS, NEXT, FILE, HUNK = "### edits\n", "### next\n", "### file\n", "@@\n"
HISTORY_TOKENS = 128  # the edits block's budget (the file above takes the rest of the prefix)
ROW_TOKENS = 48  # the rewritten row's budget inside the block
MAX_CHANGES = 6  # the most recent changes shown


def edits_block(changes: Sequence[tuple[Sequence[str], Sequence[str]]], old: str) -> list[str]:
    """The block's text as chunks, oldest change first: each change (removed rows, added rows) one chunk."""
    chunks = [HUNK + "".join(f"-{r}\n" for r in removed) + "".join(f"+{a}\n" for a in added)
              for removed, added in changes[-MAX_CHANGES:] if removed or added]
    return chunks + [NEXT + f"-{old}\n" + FILE]


def prompt_ids(tok: TextTokenizer, changes: Sequence[tuple[Sequence[str], Sequence[str]]], old: str,
               above: str, below: str, max_prefix: int, max_suffix: int) -> tuple[list[int], list[int]]:
    """The prefix and suffix token ids: the edits block (the newest changes that fit ``HISTORY_TOKENS``; the
    old row cut to ``ROW_TOKENS``), the file above (its end, to the prefix budget), and the file below."""
    *hunks, tail = edits_block(changes, old[: 8 * ROW_TOKENS])
    tail_ids = tok.encode(tail)
    if len(tail_ids) > ROW_TOKENS + 16:  # a very long row: keep its start and the block's end markers
        tail_ids = tok.encode(NEXT + "-") + tok.encode(old)[:ROW_TOKENS] + tok.encode("\n" + FILE)
    block: list[int] = []
    for chunk in reversed(hunks):
        ids = tok.encode(chunk)
        if len(block) + len(ids) + len(tail_ids) > HISTORY_TOKENS:
            break
        block = ids + block
    block = tok.encode(EDITS) + block + tail_ids
    room = max(0, max_prefix - len(block))
    above_ids = trim_start(tok, above, tok.encode(above[-6 * room - 8 :])[-room:] if room else [])
    below_ids = trim_end(tok, below, tok.encode(below[: 6 * max_suffix + 8])[:max_suffix])
    return block + above_ids, below_ids

