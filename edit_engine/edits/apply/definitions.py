"""Stage 2, definitions: a chunk's definitions matched by name to the original's.

``analyse`` takes a chunk and its language, parses the chunk (dedented) and fills in its definitions, the
closed ones (``units``: shown whole, each with the names of the open definitions above it; a definition that a
deeper marker continues is open and only its header is shown) and which lines lie outside them (``items``).
``def_anchor`` takes one closed definition of the chunk and a window of the original and gives the original
rows it replaces, with a note: the definition of the same qualified name at the same indentation (told apart
by its header, then by its body lines, when several), else one that holds most of its body and that the update
no longer names (the same definition, renamed); None when no single one fits. Decorators and attributes the
chunk does not show stay in the original.
"""

from __future__ import annotations

from bisect import bisect_left

from edit_engine.edits import budget
from edit_engine.edits.apply.chunks import Chunk
from edit_engine.edits.apply.source import Definition, Source, definitions, indent_width, norm
from edit_engine.syntax import trees as syntax


def analyse(ch: Chunk, language: str) -> None:
    """Parse a chunk (dedented) and find its closed definitions (``units``) and its other lines (``items``)."""
    m = min(indent_width(x) for x in ch.lines if x.strip())
    text = "\n".join(x[m:] if not x[:m].strip() else x.lstrip() for x in ch.lines)
    ch.defs = definitions(syntax.Document.parse(text, language), m) if syntax.load(language).has_tree else []
    last = len(ch.lines)
    units: list[tuple[int, tuple[str, ...]]] = []

    def walk(parent: int, path: tuple[str, ...]) -> None:
        budget.spend(len(ch.defs))
        kids = [i for i, d in enumerate(ch.defs) if d.parent == parent]
        for pos, i in enumerate(kids):
            d = ch.defs[i]
            # The last definition, running to the chunk's end, continued by a deeper marker: only its header is
            # shown, its body goes on in the original.
            if pos == len(kids) - 1 and d.end >= last and ch.marker_after and ch.after_indent > d.indent:
                walk(i, (*path, d.name))
            elif d.clean:
                units.append((i, path))

    walk(-1, ())
    ch.units = units
    ch.items = [True] * last
    for i, _ in units:
        for r in range(ch.defs[i].start, min(ch.defs[i].end, last)):
            ch.items[r] = False


def def_anchor(src: Source, ch: Chunk, unit: tuple[int, tuple[str, ...]], lo: int, hi: int, strict: bool,
                names: set[str]) -> tuple[int, int, str] | None:
    """The original rows a closed definition of the chunk replaces, and a note; None when no single one."""
    d = ch.defs[unit[0]]
    cands = _namesakes(src, ch, unit)
    if not cands:
        return _renamed(src, ch, d, lo, hi, names)
    cands = [j for j in cands if src.defs[j].clean]  # a broken one's extent is not to be trusted
    inside = [j for j in cands if lo <= src.defs[j].start and src.defs[j].end <= hi]
    if len(inside) > 1 and not strict:
        c = src.container(lo - 1, d.indent) if lo > 0 else -1
        inside = [j for j in inside if src.defs[j].parent == c] or inside
    if len(inside) > 1:
        inside = _alike(src, ch, d, inside)
    if len(inside) != 1:
        return None
    return anchor_at(src, ch, d, src.defs[inside[0]])


def told_apart(src: Source, ch: Chunk, unit: tuple[int, tuple[str, ...]], a: int, b: int) -> int | None:
    """The one original definition of the unit's name, indentation and path whose header lies in rows [a, b)
    (where the chunk's lines were found), or None: the lines around a definition tell apart the ones its own
    lines cannot (``def __init__(self):`` in several classes)."""
    hits = [j for j in _namesakes(src, ch, unit) if src.defs[j].clean and a <= src.defs[j].inner < b]
    return hits[0] if len(hits) == 1 else None


def _namesakes(src: Source, ch: Chunk, unit: tuple[int, tuple[str, ...]]) -> list[int]:
    """Original definitions with the unit's name, indentation and path (the names it is shown under)."""
    i, path = unit
    d = ch.defs[i]
    want = (*path, d.name)
    return [j for j in src.by_name.get(d.name, ()) if src.defs[j].indent == d.indent
            and src.defs[j].qual[-len(want):] == want]


def anchor_at(src: Source, ch: Chunk, d: Definition, o: Definition) -> tuple[int, int, str]:
    """The original rows the chunk's closed definition ``d`` replaces when it rewrites ``o``, and a note."""
    # Decorators / attributes the chunk does not show stay (the marker before it stands for them).
    start, note = (o.start if d.start < d.inner else o.inner), ".".join(o.qual)
    if d.start < d.inner and o.start < o.inner:
        # The chunk shows the last decorators only (its first line is one of them): those above it stay, the
        # marker before it standing for them.
        first = norm(ch.lines[d.start])
        rows = [r for r in range(o.start, o.inner) if src.norm[r] == first]
        if rows:
            start = rows[0]
    end = _shown_end(src, ch, d, o) if ch.marker_after and d.end >= len(ch.lines) else o.end
    if end < o.end:
        note += f" (shown up to its line {end}: the marker after it keeps the rest)"
    return start, end, note


def _shown_end(src: Source, ch: Chunk, d: Definition, o: Definition) -> int:
    """Where a definition that the chunk ends with, a marker after it, stops replacing the original one ``o``:
    when the chunk's last line is a line of ``o``'s body found at one place (told apart by its indentation
    and the chunk's lines before it, when it is found at several), with more of ``o`` after it, the
    chunk shows ``o``'s beginning and the marker stands for the rest (the row after that line); else ``o``'s
    end (the chunk shows the whole definition). A last line that tells nothing (``\"\"\"``, ``)``) counts when
    the last telling line before it is found so and the lines between follow it in ``o`` as in the chunk."""
    end = next((i for i in range(len(ch.lines) - 1, d.inner, -1) if ch.lines[i].strip()), -1)
    # A last line that tells nothing (a docstring's closing quotes, a bracket) is placed by the last telling line
    # before it, the lines between standing right after that one in the original too.
    last = next((i for i in range(end, d.inner, -1) if _telling(ch.lines[i])), -1)
    if last < 0:
        return o.end
    key = norm(ch.lines[last])
    budget.spend(o.end - o.inner)
    rows = [r for r in range(o.inner + 1, o.end) if src.norm[r] == key]
    if len(rows) > 1:  # several places: told apart by indentation, then by the chunk's lines before its last one
        rows = [r for r in rows if src.lines[r] == ch.lines[last]] or rows
    k = 1
    while len(rows) > 1 and last - k > d.inner:
        budget.spend(len(rows))
        rows = [r for r in rows if r - k > o.inner and src.norm[r - k] == norm(ch.lines[last - k])]
        k += 1
    tail = end - last
    if len(rows) == 1 and all(src.same(rows[0] + k, ch.lines[last + k]) for k in range(1, tail + 1)) and \
            any(src.norm[r] for r in range(rows[0] + tail + 1, o.end)):
        return rows[0] + tail + 1
    return _after_docstring(src, ch, d, o, end)


def _after_docstring(src: Source, ch: Chunk, d: Definition, o: Definition, end: int) -> int:
    """A definition shown with its docstring and nothing after it (a docstring rewritten) stops replacing ``o``
    after ``o``'s own docstring when ``o`` has code after it: a function is never rewritten into a docstring
    alone. ``o``'s end otherwise."""
    body = [x.strip() for x in ch.lines[max(d.body, d.inner + 1) : end + 1] if x.strip()]
    if not body or body[0][:3] not in ('"""', "'''") or body[-1][-3:] != body[0][:3] or \
            (len(body) == 1 and len(body[0]) < 6) or any(x.count(body[0][:3]) % 2 for x in body[1:-1]):
        return o.end
    quote = body[0][:3]
    r = max(o.body, o.inner + 1)
    if r >= o.end or not src.lines[r].strip().startswith(quote):
        return o.end
    first = src.lines[r].strip()
    if not (len(first) >= 6 and first.endswith(quote)):
        r += 1
        while r < o.end and quote not in src.lines[r]:
            r += 1
    return r + 1 if r + 1 < o.end and any(src.norm[x] for x in range(r + 1, o.end)) else o.end


def _alike(src: Source, ch: Chunk, d: Definition, cands: list[int]) -> list[int]:
    """Original definitions of the same name told apart by the chunk's: the one whose header line reads the
    same, else the one holding the most of its body lines (a single best), else all of them."""
    head = norm(ch.lines[d.inner])
    same = [j for j in cands if src.norm[src.defs[j].inner] == head]
    body = {norm(ch.lines[r]) for r in range(max(d.body, d.inner + 1), min(d.end, len(ch.lines)))
            if _telling(ch.lines[r])}
    budget.spend(sum(src.defs[j].end - src.defs[j].inner for j in cands))
    hits = {j: sum(src.norm[r] in body for r in range(src.defs[j].inner + 1, src.defs[j].end)) for j in cands}
    top = max(hits.values(), default=0)
    best = [j for j, h in hits.items() if h == top]
    if len(same) == 1 and 0 < hits[same[0]] < top:
        return cands  # the header points at one, the body lines at another: not told apart
    if len(same) == 1 and (hits[same[0]] or top == 0 or len(best) > 1):
        return same
    # The one header that reads the same holds none of the chunk's body lines while another holds them: the
    # chunk rewrites that other one's header (to a form the first already has).
    return best if top > 0 and len(best) == 1 else cands


def _renamed(src: Source, ch: Chunk, d: Definition, lo: int, hi: int, names: set[str]) -> tuple[int, int, str] | None:
    """A definition with a new name whose body lines (two at least, and half of those that can tell places
    apart) sit in one original definition (same indentation) that the update does not name any more: that
    definition, renamed."""
    body = [ch.lines[r] for r in range(max(d.body, d.inner + 1), min(d.end, len(ch.lines)))
            if _telling(ch.lines[r])]
    if not body:
        return None
    budget.spend(len(src.defs) + len(body))
    peers = [j for j, o in enumerate(src.defs) if o.indent == d.indent and lo <= o.start and o.end <= hi
             and o.name not in names]  # in file order, and apart: the same indentation
    starts = [src.defs[j].body for j in peers]
    hits: dict[int, int] = {}
    for line in body:
        rows, _ = src.where(line, lo, hi)
        if len(rows) > 32:  # a line found everywhere says nothing
            continue
        found = set()
        budget.spend(len(rows))
        for r in rows:
            k = bisect_left(starts, r + 1) - 1
            if k >= 0 and r < src.defs[peers[k]].end:
                found.add(peers[k])
        for j in found:
            hits[j] = hits.get(j, 0) + 1
    best = [j for j, c in hits.items() if c >= 2 and 2 * c >= len(body)]
    if len(best) != 1:
        return None
    o = src.defs[best[0]]
    end = _shown_end(src, ch, d, o) if ch.marker_after and d.end >= len(ch.lines) else o.end
    return (o.start if d.start < d.inner else o.inner), end, f"{'.'.join(o.qual)} renamed to {d.name}"


def _telling(line: str) -> bool:
    """A line that can tell one place from another: some word in it, not just brackets and punctuation."""
    return len(norm(line)) >= 4 and any(c.isalnum() for c in line)
