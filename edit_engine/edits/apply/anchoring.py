"""Stage 3, anchoring: a chunk's lines matched on the original's lines.

Takes a chunk, the ``Source`` and windows of original rows; gives where the chunk's outermost context lines
sit. ``scan`` finds, from the chunk's top or from its bottom, the outermost line found in the first window
(``Ends.edge`` and its rows) and the outermost line found at a single place of one of the windows
(``Ends.unique``): exact matches first, then ignoring whitespace, a line's places narrowed by the lines after
(or before) it while several fit. ``toward`` moves the outermost line to its place nearest that unique one;
``back`` and ``forward`` extend a match over the neighbouring lines that match too; ``search_windows`` gives
the windows to search: the range between the neighbouring chunks, then the body of the definition the previous
chunk ended in. Lines inside the chunk's closed definitions are left to the previous stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edit_engine.edits import budget
from edit_engine.edits.apply.chunks import Chunk
from edit_engine.edits.apply.source import Source, indent_width

# A chunk's outer context line outside the definition around its unique anchor (the end of the function before,
# a line of the next one) still anchors on the row nearest that anchor when at most this many original rows lie
# between them: rows the update deletes, its two shown lines being contiguous.
CONTIGUOUS_GAP = 12


def _block(src: Source, ch: Chunk, i: int, step: int, lo: int, hi: int, stop: int) -> list[int]:
    """Rows in [lo, hi) where chunk line ``i`` is, narrowed by the chunk's next lines (``step`` +1) or previous
    ones (-1) while more than one fits; lines past ``stop`` or inside a definition are not used."""
    rows, _ = src.where(ch.lines[i], lo, hi)
    k = 1
    while len(rows) > 1:
        budget.spend(len(rows))
        j = i + k * step
        if not (0 <= j < len(ch.lines)) or not ch.items[j] or (j >= stop if step > 0 else j < stop):
            break
        nxt = [p for p in rows if lo <= p + k * step < hi and src.same(p + k * step, ch.lines[j])]
        if not nxt:
            break
        rows, k = nxt, k + 1
    return rows


def back(src: Source, ch: Chunk, i: int, p: int, i0: int, lo: int) -> tuple[int, int]:
    """Chunk line ``i`` at row ``p``, moved up over the lines before it that match the rows before ``p``."""
    while i > i0 and ch.items[i - 1] and p > lo and src.same(p - 1, ch.lines[i - 1]):
        budget.spend(1)
        i, p = i - 1, p - 1
    return i, p


def forward(src: Source, ch: Chunk, j: int, q: int, i1: int, hi: int) -> tuple[int, int]:
    while j + 1 < i1 and ch.items[j + 1] and q + 1 < hi and src.same(q + 1, ch.lines[j + 1]):
        budget.spend(1)
        j, q = j + 1, q + 1
    return j, q


@dataclass
class Ends:
    """What one end of a chunk's lines matches: the outermost line found anywhere in the window and its rows
    (``edge``, ``rows``), and the outermost line found at a single row of one of the windows (``unique``:
    line, row; extended over the matching lines beyond it)."""

    edge: int = -1
    rows: list[int] = field(default_factory=list)
    unique: tuple[int, int] | None = None


def scan(src: Source, ch: Chunk, i0: int, i1: int, windows: list[tuple[int, int]], step: int) -> Ends:
    """``Ends`` of chunk lines [i0, i1) from the top (``step`` +1) or the bottom (-1)."""
    out = Ends()
    order = range(i0, i1) if step > 0 else range(i1 - 1, i0 - 1, -1)
    for i in order:
        if not ch.items[i] or not ch.lines[i].strip():
            continue
        for w, (lo, hi) in enumerate(windows):
            rows = _block(src, ch, i, step, lo, hi, i1 if step > 0 else i0)
            if w == 0 and rows and out.edge < 0:
                out.edge, out.rows = i, src.where(ch.lines[i], lo, hi)[0]
            if len(rows) == 1:
                out.unique = back(src, ch, i, rows[0], i0, lo) if step > 0 else forward(src, ch, i, rows[0], i1, hi)
                return out
    return out


def toward(src: Source, ch: Chunk, ends: Ends, lo: int, hi: int, step: int, i0: int, i1: int) -> tuple[int, int]:
    """The chunk's outermost matching line placed by the nearest of its rows on the near side of the unique
    anchor, inside the definition around that anchor at the line's level, else within ``CONTIGUOUS_GAP`` rows of
    the anchor beyond the lines between them; the anchor itself when there is none."""
    assert ends.unique is not None
    u, r = ends.unique
    if (u <= ends.edge) if step > 0 else (u >= ends.edge):
        return u, r
    i = ends.edge
    a, b = src.region(r, indent_width(ch.lines[i]))
    if step > 0:
        near = [p for p in _block(src, ch, i, 1, max(lo, a), r, u) if p < r] or \
            [p for p in _block(src, ch, i, 1, max(lo, r - (u - i) - CONTIGUOUS_GAP), r, u) if p < r]
        return back(src, ch, i, near[-1], i0, lo) if near else (u, r)
    near = [q for q in _block(src, ch, i, -1, r + 1, min(hi, b), u + 1) if q > r] or \
        [q for q in _block(src, ch, i, -1, r + 1, min(hi, r + (i - u) + CONTIGUOUS_GAP + 1), u + 1) if q > r]
    return forward(src, ch, i, near[0], i1, hi) if near else (u, r)


def search_windows(src: Source, ch: Chunk, lo: int, hi: int, strict: bool) -> list[tuple[int, int]]:
    """Where a chunk's lines are looked for: the whole window, then (between neighbours) the body of the
    definition the previous chunk ended in, at the chunk's level and at the level of its first line."""
    out = [(lo, hi)]
    if not strict and lo > 0:
        ind = indent_width(ch.lines[0])
        for level in (ind, ind + 1):
            sc = src.scope(lo - 1, level, lo, hi)
            if sc is not None and sc[0] < sc[1] and sc not in out:
                out.append(sc)
    return out
