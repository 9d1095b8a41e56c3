"""The server's copy of each open document, with a line index that an edit updates instead of rebuilding.

An editor sends every keystroke as an incremental ``didChange``: a range in (line, character) and the text that
replaces it. Converting those positions needs the offset where each line starts. Rebuilding that table in Python
for every change made a keystroke in a 5-million-character document cost most of a second; here the table is a
numpy array that an edit updates from the edited line on (starts before it are kept, starts after it shift by
the change in length, and only the edited lines are scanned again). The text itself is one ``str`` (the engine
takes one), so an edit still copies it, which C does in about a millisecond for 5 million characters.

Each document also keeps its recent edits (``lsp.history``: unified diffs for next-edit requests) and when it was
last edited (``touched``, to rank the other open documents sent with a request as related code).

Positions follow ``edit_engine.syntax.positions`` exactly (LSP line breaks ``\\n``, ``\\r\\n``, ``\\r``; clamping; code
units per encoding); a property test checks that both agree.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edit_engine import protocol
from edit_engine.lsp.history import EditHistory
from edit_engine.syntax.positions import Encoding, code_units, common_prefix, position_to_offset

_BREAK = re.compile(r"\r\n|\r|\n")


def _scan(text: str, start: int, end: int) -> list[int]:
    """Line starts after ``start`` up to ``end`` (inclusive) in ``text``; the character at ``end`` is looked at
    so that a ``\\r\\n`` split by ``end`` is seen whole."""
    return [m.end() for m in _BREAK.finditer(text, start, min(end + 1, len(text))) if m.end() <= end]


def _all_starts(text: str) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Every line start (line 0 at 0), computed with numpy over the code points."""
    try:
        codes = np.frombuffer(text.encode("latin-1"), dtype=np.uint8)
    except UnicodeEncodeError:
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    lf, cr = codes == 10, codes == 13
    ends = lf.copy()
    ends[:-1] |= cr[:-1] & ~lf[1:]  # a '\r' ends a line unless a '\n' follows it
    if len(cr):
        ends[-1] |= cr[-1]
    return np.concatenate(([0], np.flatnonzero(ends) + 1)).astype(np.int64)


class LineIndex:
    """Where each line of a text starts, as character offsets (``edit_engine.syntax.positions.line_starts``)."""

    def __init__(self, text: str) -> None:
        self.starts = _all_starts(text)

    def __len__(self) -> int:
        return len(self.starts)

    def start(self, line: int) -> int:
        return int(self.starts[line])

    def line_of(self, offset: int) -> int:
        """The line an offset is on (an offset between the ``\\r`` and ``\\n`` of a CRLF is on the line it ends)."""
        return int(np.searchsorted(self.starts, offset, side="right")) - 1

    def replace(self, new_text: str, start: int, old_end: int, inserted: int) -> None:
        """Update after ``old[start:old_end]`` was replaced by ``inserted`` characters, giving ``new_text``.

        A line start depends only on the two characters around it, so: starts up to the start of the line
        before the edit stay; starts after the old range shift by the change in length; the ones in between are
        scanned again in ``new_text``.
        """
        s = self.starts
        keep = int(np.searchsorted(s, start - 1, side="right")) if start > 0 else 1
        first = int(s[keep - 1])  # the start of the line holding the character before the edit
        tail = int(np.searchsorted(s, old_end + 1, side="left"))
        new_end = start + inserted
        middle = _scan(new_text, first, new_end)
        delta = new_end - old_end
        if len(middle) == tail - keep:  # as many lines as before: update in place
            s[keep:tail] = middle
            if delta:
                s[tail:] += delta
        else:
            self.starts = np.concatenate((s[:keep], np.asarray(middle, dtype=np.int64), s[tail:] + delta))

    def line_end(self, text: str, line: int) -> int:
        """Offset of the end of ``line``'s content (before its line break)."""
        end = self.start(line + 1) if line + 1 < len(self.starts) else len(text)
        begin = self.start(line)
        while end > begin and text[end - 1] in "\r\n":
            end -= 1
        return end

    def offset(self, text: str, line: int, character: int, encoding: Encoding) -> int:
        """LSP (line, character) to a character offset, clamped as ``positions.position_to_offset`` does."""
        if line < 0 or character < 0:
            raise ValueError(f"negative position ({line}, {character})")
        if line >= len(self.starts):
            return len(text)
        begin, end = self.start(line), self.line_end(text, line)
        if encoding == "utf-32":
            return min(begin + character, end)
        content = text[begin:end]
        if content.isascii() or encoding == "utf-16" and _bmp(content):  # one code unit per character
            return begin + min(character, len(content))
        return begin + position_to_offset(content, 0, character, encoding, starts=[0])

    def position(self, text: str, offset: int, encoding: Encoding) -> tuple[int, int]:
        """Character offset to LSP (line, character), as ``positions.offset_to_position`` does."""
        if not 0 <= offset <= len(text):
            raise ValueError(f"offset {offset} outside the document (length {len(text)})")
        line = self.line_of(offset)
        prefix = text[self.start(line):offset]
        return line, len(prefix) if prefix.isascii() else code_units(prefix, encoding)


def _bmp(s: str) -> bool:
    """No character outside the Basic Multilingual Plane (one UTF-16 code unit each)."""
    return len(s.encode("utf-16-le", "surrogatepass")) == 2 * len(s)


_clock = itertools.count()  # orders edits across documents (most recently edited first)


def _common_ends(a: str, b: str) -> tuple[int, int]:
    """The lengths of the longest common prefix of ``a`` and ``b`` and of the longest common suffix of what
    follows it (``positions.common_prefix``: slice comparisons in C)."""
    prefix = common_prefix(a, b)
    return prefix, common_prefix(a[prefix:][::-1], b[prefix:][::-1])


@dataclass
class Document:
    """The server's copy of an open document (the engine gets ``text``; ``version`` guards staleness)."""

    uri: str
    text: str
    version: int
    language: str
    index: LineIndex = field(init=False, repr=False)
    history: EditHistory = field(init=False, repr=False)
    touched: int = field(init=False, repr=False)  # when it was opened or last edited (``_clock``)

    def __post_init__(self) -> None:
        self.index = LineIndex(self.text)
        self.history = EditHistory(self.uri.rstrip("/").rsplit("/", 1)[-1] or "file")
        self.touched = next(_clock)

    def offset(self, line: int, character: int, encoding: Encoding) -> int:
        return self.index.offset(self.text, line, character, encoding)

    def position(self, offset: int, encoding: Encoding) -> tuple[int, int]:
        return self.index.position(self.text, offset, encoding)

    def apply(self, change: Any, encoding: Encoding) -> None:
        """Apply one ``TextDocumentContentChangeEvent`` (incremental, or the whole text), and record it in the
        history (a whole text as the change between its common prefix and suffix with the old one)."""
        old = self.text
        self.touched = next(_clock)
        rng = getattr(change, "range", None)
        if rng is None:
            self.text = str(change.text)
            self.index = LineIndex(self.text)
            prefix, suffix = _common_ends(old, self.text)
            self._record(old, prefix, len(old) - suffix, self.text[prefix: len(self.text) - suffix])
            return
        start = self.offset(rng.start.line, rng.start.character, encoding)
        end = self.offset(rng.end.line, rng.end.character, encoding)
        if end < start:
            start, end = end, start
        inserted = str(change.text)
        self.text = old[:start] + inserted + old[end:]
        self.index.replace(self.text, start, end, len(inserted))
        self._record(old, start, end, inserted)

    def _record(self, old: str, start: int, end: int, inserted: str) -> None:
        if max(len(old), len(self.text)) > protocol.MAX_DOCUMENT_CHARS:  # never sent to the model
            self.history.clear()
        else:
            self.history.record(old, start, end, inserted, self.text)


def apply_change(text: str, change: Any, encoding: Encoding) -> str:
    """``text`` after one ``TextDocumentContentChangeEvent`` (incremental or whole)."""
    doc = Document("", text, 0, "")
    doc.apply(change, encoding)
    return doc.text
