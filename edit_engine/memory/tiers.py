"""Incrementally maintained n-gram caches for documents that change on every keystroke.

Tokens never straddle a line break (every ``"\\n"`` starts a token), so a text is a sequence of line
chunks that lex independently.  When a document changes, only the chunks between the common prefix and
the common suffix of the old and new text are re-lexed, and only the n-grams whose predicted token lies
in that window (or within ``order - 1`` tokens after it, whose contexts reach into it) are removed and
re-added.  A keystroke in a 5,000-line file therefore costs time proportional to the edited line, plus
a few memory compares over the whole text.
"""

from __future__ import annotations

from collections.abc import Sequence

from .lexer import tokenize
from .ngram import DynamicNgrams

__all__ = ["DocumentCounts", "common_prefix_len", "common_suffix_len"]

_BLOCK = 4096


def common_prefix_len(a: str, b: str) -> int:
    """Length of the longest common prefix, by block compares (C ``memcmp`` speed)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i : i + _BLOCK] == b[i : i + _BLOCK]:
        i += _BLOCK
    hi = min(i + _BLOCK, n)
    while i < hi and a[i] == b[i]:
        i += 1
    return min(i, n)


def common_suffix_len(a: str, b: str, limit: int) -> int:
    """Length of the longest common suffix, at most ``limit``."""
    n = min(len(a), len(b), limit)
    i = 0
    la, lb = len(a), len(b)
    while i + _BLOCK <= n and a[la - i - _BLOCK : la - i] == b[lb - i - _BLOCK : lb - i]:
        i += _BLOCK
    while i < n and a[la - i - 1] == b[lb - i - 1]:
        i += 1
    return i


def _split_chunks(tokens: Sequence[str]) -> list[int]:
    """Token counts per line chunk (a chunk starts at a token beginning with a newline)."""
    counts: list[int] = []
    cur = 0
    for i, t in enumerate(tokens):
        if i and t[:1] == "\n":
            counts.append(cur)
            cur = 0
        cur += 1
    counts.append(cur)
    return counts


class DocumentCounts:
    """One text's tokens, kept in step with the n-gram models it contributes to."""

    def __init__(self, language: str, models: Sequence[DynamicNgrams]) -> None:
        self.language = language
        self.models = list(models)
        self.order = max((m.order for m in self.models), default=1)
        self.text = ""
        self.tokens: list[str] = []
        self.line_counts: list[int] = [0]  # tokens per line chunk; chunk 0 may be empty

    def set_text(self, text: str) -> None:
        """Replace the text, updating the models by the changed lines only."""
        old = self.text
        if text == old:
            return
        pre = common_prefix_len(old, text)
        suf = common_suffix_len(old, text, min(len(old), len(text)) - pre)
        p = text.count("\n", 0, pre)  # chunks entirely inside the common prefix
        k = text.count("\n", len(text) - suf)  # chunks entirely inside the common suffix
        n_old_chunks = len(self.line_counts)
        start = text.rfind("\n", 0, pre) if p else 0
        end_new = text.find("\n", len(text) - suf) if k else len(text)
        new_mid = tokenize(text[start:end_new], self.language) if end_new > start else []
        a = sum(self.line_counts[:p])
        old_mid = sum(self.line_counts[p : n_old_chunks - k])
        horizon = self.order - 1
        for m in self.models:
            m.update(self.tokens, a, min(a + old_mid + horizon, len(self.tokens)), -1)
        self.tokens[a : a + old_mid] = new_mid
        for m in self.models:
            m.update(self.tokens, a, min(a + len(new_mid) + horizon, len(self.tokens)), 1)
        mid_counts = _split_chunks(new_mid) if new_mid else []
        if p == 0 and not mid_counts:
            mid_counts = [0]
        self.line_counts[p : n_old_chunks - k] = mid_counts
        self.text = text

    def clear(self) -> None:
        """Remove this text's n-grams from every model."""
        for m in self.models:
            m.update(self.tokens, 0, len(self.tokens), -1)
        self.tokens = []
        self.line_counts = [0]
        self.text = ""
