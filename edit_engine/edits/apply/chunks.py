"""Stage 1, chunks: the update split at its marker lines.

``split_update`` takes the update's lines and gives its ``Chunk``s and its count of marker lines. A chunk is a
contiguous piece of the new file; each marker stands for original code that stays. Blank lines at a chunk's
edges are dropped and counted (the original's spacing stays unless new lines meet original code there); a
chunk knows whether a marker comes before and after it and how deep the one after it is indented.
``is_marker`` says which lines are markers: a comment of any supported language holding dots and marker words,
or a bare ``... existing code ...``. A chunk's definitions (``defs``, ``units``, ``items``) are filled in by
the next stage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from edit_engine.edits.apply.source import Definition, indent_width

_MARKER = re.compile(r"^\s*(?P<open><!--|/\*+|//+|#+)?\s*(?P<body>.*?)\s*(?:\*+/|-->)?\s*$")
_DOTS = re.compile(r"\.{3,}|…")
# Words of a marker comment. A comment that starts with dots may hold any of these; one that only ends with dots,
# or a bare line without comment syntax, needs one of the strong ones.
_STRONG = frozenset({"existing", "rest", "unchanged", "remaining", "omitted", "elided", "unmodified", "code"})
_WORDS = _STRONG | frozenset({"same", "previous", "other", "keep", "kept", "as", "before", "of", "the", "file",
                              "function", "functions", "method", "methods", "class", "body", "implementation",
                              "imports", "here", "lines", "stays", "is", "etc", "and", "more", "fields"})


def is_marker(line: str) -> bool:
    """Whether ``line`` stands for elided original code: a comment whose text is dots and marker words
    (``# ... existing code ...``, ``// ...``, ``/* ... rest of code ... */``, ``<!-- ... -->``), or a bare
    ``... existing code ...``. A bare ``...`` is code (Python's Ellipsis), not a marker."""
    if "..." not in line and "…" not in line or len(line) > 160:
        return False
    m = _MARKER.match(line)
    if m is None:
        return False
    body = m.group("body")
    if not _DOTS.search(body):
        return False
    words = re.findall(r"[a-z]+", body.lower())
    if len(words) > 8 or any(w not in _WORDS for w in words):
        return False
    starts, ends = body.startswith(("...", "…")), body.endswith(("...", "…"))
    strong = any(w in _STRONG for w in words)
    if m.group("open"):
        return starts or (ends and strong)
    return starts and ends and strong


# ---------------------------------------------------------------------------------------------------- chunks
@dataclass
class Chunk:
    """Consecutive update lines between markers, blank edge lines dropped. ``start``: its first line's index in
    the update; ``after_indent``: the indentation of the marker that follows it (-1: none)."""

    index: int
    lines: list[str]
    start: int
    marker_before: bool
    marker_after: bool
    after_indent: int = -1
    blanks: tuple[int, int] = (0, 0)  # blank lines dropped before and after it
    defs: list[Definition] = field(default_factory=list)
    units: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)  # closed definitions, open names above
    items: list[bool] = field(default_factory=list)  # per line: outside every closed definition

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def split_update(lines: list[str]) -> tuple[list[Chunk], int]:
    """The update's chunks and its count of marker lines."""
    chunks: list[Chunk] = []
    cur: list[str] = []
    start, markers, before = 0, 0, False

    def flush(after: bool, after_indent: int) -> None:
        s, e = 0, len(cur)
        while s < e and not cur[s].strip():
            s += 1
        while e > s and not cur[e - 1].strip():
            e -= 1
        if s < e:
            chunks.append(Chunk(len(chunks), cur[s:e], start + s, before, after, after_indent, (s, len(cur) - e)))

    for i, line in enumerate(lines):
        if is_marker(line):
            markers += 1
            flush(True, indent_width(line))
            before = True
            cur, start = [], i + 1
        else:
            cur.append(line)
    flush(False, -1)
    return chunks, markers
