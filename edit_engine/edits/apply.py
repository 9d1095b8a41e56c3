"""Apply edit: merge an update snippet written with ``... existing code ...`` markers into a file.

A chat model that edits a file writes only what changes, the rest elided by marker comments::

    # ... existing code ...
    def area(r):
        return math.pi * r ** 2
    # ... existing code ...

``merge(original, update, language)`` puts such a snippet into the file, structure first:

1. **Chunks.** Marker lines (a comment of any supported language holding ``...``: ``# ... existing code ...``,
   ``// ...``, ``/* ... */``, a bare ``... rest of code ...``; ``is_marker``) split the update into chunks. Each
   chunk is a contiguous piece of the new file; each marker stands for original code that stays. Blank lines at a
   chunk's edges are formatting around the markers and are dropped (the original's spacing stays), unless new
   lines at that edge meet original code with no blank line between.
2. **Definitions.** A chunk is parsed with tree-sitter (``edit_engine.syntax.trees``). A complete definition in it
   (``def f``/``class C``, ``function f``, ``fn f``, ``impl T``, ``func (r T) f``...) replaces the original
   definition of the same name at the same indentation; nesting is respected: a method shown under its class
   header, or after a chunk placed inside that class, replaces that class's method. A definition that a deeper
   marker continues (``class C:`` followed by ``    # ...``) is open: only its header is context. A definition
   whose name is new but whose body mostly matches one original definition that the update no longer names is
   that definition renamed. Decorators and attributes stay when the chunk shows the definition without them.
3. **Lines.** Around (or without) definitions, the chunk's first and last context lines are matched on the
   original as blocks of lines, exact first, then ignoring whitespace; unique matches only: in the whole file,
   then between the neighbouring chunks, then inside the definition the previous chunk ended in. Once one line
   is found at a single place, the chunk's outermost matching lines go to their nearest match beside it.
4. **Placing.** The original lines between a chunk's first and last anchored lines are replaced by the chunk;
   unmatched lines at its edges are new lines inserted there. An update that opens without a marker starts the
   file (one that ends without one ends it) when that drops no more lines than the chunk holds and no
   definition. Chunks are placed in order, each after the previous one; a chunk that would change nothing at
   its place while its lines occur elsewhere goes where it changes something. **Span guard**: a place whose
   span would drop many original lines that appear nowhere in the update (outside the original definitions the
   chunk shows whole) — more than ``DROP_FLOOR`` plus ``DROP_RATIO`` times the chunk's own lines — is passed
   over: a definition's context lines become new lines beside it, a chunk placed by lines takes another of its
   candidate places, or is inserted when it defines something new, else refused (``ValueError`` with the span
   and the count). An update without markers is taken literally and not guarded.
5. **What is left.** A chunk with no anchor that defines something new is inserted after the last definition
   at its level before the next placed chunk (or, when it opens the update, before the first). A chunk whose
   lines match several places and none uniquely is ambiguous: the place where it changes something, spanning
   at most twice its lines, most like it wins; among places alike ``choose`` (the diffusion model,
   ``model_chooser``) decides, else the first is taken. A chunk that matches nothing and defines nothing cannot
   be placed (``ValueError`` naming it); an update without any marker that matches nothing replaces the file.

Every placement is recorded (``Placement.kind``: definition, lines, inserted, ambiguous, whole).
"""

from __future__ import annotations

import difflib
import re
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from edit_engine.engine.results import MAX_DOCUMENT_CHARS, Pass
from edit_engine.syntax import trees as syntax

KINDS = ("definition", "lines", "inserted", "ambiguous", "whole")
MAX_CANDIDATES = 16  # ambiguous chunks: placements offered to ``choose`` (the first ones after the previous chunk)

# A chooser gets the chunk's text and, per candidate placement, the original text before and after it; it returns
# the index of the candidate to take.
Chooser = Callable[[str, Sequence[tuple[str, str]]], int]


# ---------------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class Placement:
    """Where one chunk of the update went: it replaced original lines ``[start, end)`` (0-based; equal for an
    insertion) and came from update lines ``[update_start, update_end)``."""

    chunk: int
    kind: str  # KINDS
    start: int
    end: int
    update_start: int
    update_end: int
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"chunk": self.chunk, "kind": self.kind, "start": self.start, "end": self.end,
                "updateStart": self.update_start, "updateEnd": self.update_end, "note": self.note}


@dataclass(frozen=True)
class ApplyResult:
    """The merged file, how each chunk was placed, and the time it took. ``segments``: the merged text in order,
    each piece kept from the original (chunk -1) or written by chunk k; they join to ``text``."""

    text: str
    placements: tuple[Placement, ...]
    elapsed_ms: float
    segments: tuple[tuple[int, str], ...] = ()
    nfe: int = 0  # model passes spent on ambiguous chunks


# ---------------------------------------------------------------------------------------------------- markers
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


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


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
            flush(True, _indent(line))
            before = True
            cur, start = [], i + 1
        else:
            cur.append(line)
    flush(False, -1)
    return chunks, markers


# ---------------------------------------------------------------------------------------------------- definitions
@dataclass(frozen=True)
class Definition:
    """A named definition in a syntax tree. Rows are 0-based; ``start`` includes decorators and attributes,
    ``inner`` is the definition's own first row, ``body`` its body's first row, ``end`` the row after it."""

    name: str
    qual: tuple[str, ...]  # names from the top level down, this one last
    indent: int
    start: int
    inner: int
    body: int
    end: int
    parent: int  # index of the enclosing definition, -1 at the top level
    clean: bool  # no syntax error inside, and a body


_PLAIN = frozenset({
    "function_definition", "class_definition",  # Python
    "function_declaration", "generator_function_declaration", "class_declaration", "abstract_class_declaration",
    "method_definition", "interface_declaration", "type_alias_declaration", "enum_declaration",  # JS / TS (Go too)
    "function_item", "struct_item", "enum_item", "union_item", "trait_item", "mod_item", "macro_definition",
    "const_item", "static_item", "type_item", "function_signature_item",  # Rust
})
_WRAPPERS = {"decorated_definition": "definition", "export_statement": "declaration"}
_VALUES = frozenset({"arrow_function", "function_expression", "function", "generator_function", "class"})


def _text(doc: syntax.Document, node: Any) -> str:
    return doc.data[node.start_byte : node.end_byte].decode("utf-8", "replace")


def _named(doc: syntax.Document, node: Any) -> tuple[Any, str] | None:
    """(the definition node, its name) for a node that defines something, else None."""
    t = node.type
    if t in _WRAPPERS:
        inner = node.child_by_field_name(_WRAPPERS[t])
        return _named(doc, inner) if inner is not None else None
    if t in ("lexical_declaration", "variable_declaration"):  # const f = () => ...
        decl = [c for c in node.named_children if c.type == "variable_declarator"]
        value = decl[0].child_by_field_name("value") if len(decl) == 1 else None
        name = decl[0].child_by_field_name("name") if decl else None
        return (node, _text(doc, name)) if value is not None and value.type in _VALUES and name else None
    if t == "impl_item":
        trait, typ = node.child_by_field_name("trait"), node.child_by_field_name("type")
        head = f"{_text(doc, trait)} for " if trait is not None else ""
        return (node, f"impl {head}{_text(doc, typ)}") if typ is not None else None
    if t == "type_declaration":  # Go
        spec = next((c for c in node.named_children if c.type == "type_spec"), None)
        name = spec.child_by_field_name("name") if spec is not None else None
        return (node, _text(doc, name)) if name is not None else None
    if t == "method_declaration":  # Go: func (r *T) name
        name, recv = node.child_by_field_name("name"), node.child_by_field_name("receiver")
        if name is None:
            return None
        words = _text(doc, recv).strip("()").replace("*", " ").split() if recv is not None else []
        return node, (f"{words[-1]}." if words else "") + _text(doc, name)
    if t in _PLAIN:
        name = node.child_by_field_name("name")
        return (node, _text(doc, name)) if name is not None else None
    return None


def definitions(doc: syntax.Document, indent_base: int = 0) -> list[Definition]:
    """The named definitions of a parsed document, outer before inner: top-level ones and those in their bodies
    (methods, nested functions, impl members). ``indent_base`` is added to every indentation (a dedented chunk)."""
    out: list[Definition] = []
    if doc.tree is None:
        return out
    lines = doc.text.split("\n")
    _collect(doc, lines, doc.tree.root_node.named_children, -1, (), out, indent_base)
    return out


def _collect(doc: syntax.Document, lines: list[str], nodes: list[Any], parent: int, qual: tuple[str, ...],
             out: list[Definition], base: int) -> None:
    attrs: int | None = None  # first row of the attribute items right before a Rust item
    for node in nodes:
        if node.type == "attribute_item":
            attrs = node.start_point.row if attrs is None else attrs
            continue
        found = _named(doc, node)
        if found is None:
            attrs = None
            continue
        inner, name = found
        start = node.start_point.row if attrs is None else min(attrs, node.start_point.row)
        attrs = None
        end = node.end_point.row + (0 if node.end_point.column == 0 and node.end_point.row > start else 1)
        body = inner.child_by_field_name("body")
        hollow = body is not None and body.end_byte <= body.start_byte  # a header whose body is not there
        idx = len(out)
        out.append(Definition(name, (*qual, name), base + _indent(lines[start]), start, inner.start_point.row,
                              body.start_point.row if body is not None else end, end, parent,
                              not node.has_error and not hollow))
        if body is not None:
            _collect(doc, lines, body.named_children, idx, (*qual, name), out, base)


# ---------------------------------------------------------------------------------------------------- the original
def _norm(line: str) -> str:
    return "".join(line.split())


class Source:
    """The original file: its lines, an index of where each line (and each line without whitespace) occurs, and
    its definitions."""

    def __init__(self, lines: list[str], language: str) -> None:
        self.lines = lines
        self.n = len(lines)
        self.norm = [_norm(x) for x in lines]
        self.exact: dict[str, list[int]] = {}
        self.loose: dict[str, list[int]] = {}
        for i, (x, y) in enumerate(zip(lines, self.norm, strict=True)):
            self.exact.setdefault(x, []).append(i)
            self.loose.setdefault(y, []).append(i)
        self.grammar = syntax.load(language)
        self.defs = definitions(syntax.Document.parse("\n".join(lines), language)) if lines else []
        self.by_name: dict[str, list[int]] = {}
        for i, d in enumerate(self.defs):
            self.by_name.setdefault(d.name, []).append(i)

    def same(self, row: int, line: str) -> bool:
        return 0 <= row < self.n and (self.lines[row] == line or self.norm[row] == _norm(line))

    def where(self, line: str, lo: int, hi: int) -> tuple[list[int], bool]:
        """Rows in [lo, hi) holding ``line``: exact matches, else matches ignoring whitespace (second: loose)."""
        for table, key, loose in ((self.exact, line, False), (self.loose, _norm(line), True)):
            rows = table.get(key)
            if rows:
                got = rows[bisect_left(rows, lo) : bisect_left(rows, hi)]
                if got:
                    return got, loose
        return [], False

    def container(self, row: int, indent: int) -> int:
        """The innermost definition around ``row`` indented less than ``indent`` (-1: the top level)."""
        best = -1
        for i, d in enumerate(self.defs):
            if d.start <= row < d.end and d.indent < indent:
                best = i
        return best

    def scope(self, row: int, indent: int, lo: int, hi: int) -> tuple[int, int] | None:
        """[lo, hi) narrowed to the body of ``container(row, indent)``; None at the top level."""
        c = self.container(row, indent) if row >= 0 else -1
        if c < 0:
            return None
        d = self.defs[c]
        return max(lo, d.body), min(hi, d.end)

    def region(self, row: int, indent: int) -> tuple[int, int]:
        """The rows of ``container(row, indent)``; the whole file at the top level."""
        c = self.container(row, indent)
        return (self.defs[c].start, self.defs[c].end) if c >= 0 else (0, self.n)

    def top_level_def_in(self, lo: int, hi: int) -> bool:
        return any(d.parent < 0 and lo <= d.inner < hi for d in self.defs)


# ---------------------------------------------------------------------------------------------------- a chunk
def _analyse(ch: Chunk, language: str) -> None:
    """Parse a chunk (dedented) and find its closed definitions (``units``) and its other lines (``items``)."""
    m = min(_indent(x) for x in ch.lines if x.strip())
    text = "\n".join(x[m:] if not x[:m].strip() else x.lstrip() for x in ch.lines)
    ch.defs = definitions(syntax.Document.parse(text, language), m) if syntax.load(language).has_tree else []
    last = len(ch.lines)
    units: list[tuple[int, tuple[str, ...]]] = []

    def walk(parent: int, path: tuple[str, ...]) -> None:
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


@dataclass
class _Spot:
    """Where a chunk goes: ``lines`` replace original rows [a, b)."""

    a: int
    b: int
    lines: list[str]
    kind: str
    note: str = ""
    kept: tuple[tuple[int, int], ...] = ()  # original definitions the chunk rewrites whole (rows [start, end))


# ---------------------------------------------------------------------------------------------------- the span guard
# A chunk may drop original lines (a deletion, or a rewrite shorter than what it replaces), but a place whose span
# drops far more than the chunk writes is more likely a wrong anchoring (ends matched on common lines far apart)
# than an edit. Dropped: a non-blank original line of the span that appears nowhere in the update (ignoring
# whitespace) and is not inside an original definition the chunk shows whole. The limit: a rewrite condensing
# twice the chunk's own lines, plus one deleted block the size of a small function.
DROP_FLOOR = 16  # original lines a chunk may drop beyond DROP_RATIO times its own
DROP_RATIO = 2


@dataclass(frozen=True)
class _Guard:
    """The span check of an update: ``shown`` holds its lines without whitespace; ``active`` is False for an
    update without markers (taken literally: it says what the span becomes)."""

    src: Source
    shown: frozenset[str]
    active: bool = True

    def limit(self, ch: Chunk) -> int:
        return DROP_FLOOR + DROP_RATIO * sum(bool(x.strip()) for x in ch.lines)

    def dropped(self, spot: _Spot) -> int:
        """Original lines of the spot's span that nothing in the update keeps."""
        norm, shown = self.src.norm, self.shown
        return sum(1 for r in range(spot.a, spot.b) if norm[r] and norm[r] not in shown
                   and not any(s <= r < e for s, e in spot.kept))

    def ok(self, ch: Chunk, spot: _Spot) -> bool:
        if not self.active or spot.kind in ("inserted", "whole"):
            return True
        limit = self.limit(ch)
        return spot.b - spot.a <= limit or self.dropped(spot) <= limit


def _def_anchor(src: Source, ch: Chunk, unit: tuple[int, tuple[str, ...]], lo: int, hi: int, strict: bool,
                names: set[str]) -> tuple[int, int, str] | None:
    """The original rows a closed definition of the chunk replaces, and a note; None when no single one."""
    i, path = unit
    d = ch.defs[i]
    want = (*path, d.name)
    cands = [j for j in src.by_name.get(d.name, ()) if src.defs[j].indent == d.indent
             and src.defs[j].qual[-len(want):] == want]
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
    o = src.defs[inside[0]]
    # Decorators / attributes the chunk does not show stay (the marker before it stands for them).
    return (o.start if d.start < d.inner else o.inner), o.end, ".".join(o.qual)


def _alike(src: Source, ch: Chunk, d: Definition, cands: list[int]) -> list[int]:
    """Original definitions of the same name told apart by the chunk's: the one whose header line reads the
    same, else the one holding the most of its body lines (a single best), else all of them."""
    head = _norm(ch.lines[d.inner])
    same = [j for j in cands if src.norm[src.defs[j].inner] == head]
    if len(same) == 1:
        return same
    body = {_norm(ch.lines[r]) for r in range(max(d.body, d.inner + 1), min(d.end, len(ch.lines)))
            if _telling(ch.lines[r])}
    hits = {j: sum(src.norm[r] in body for r in range(src.defs[j].inner + 1, src.defs[j].end)) for j in cands}
    top = max(hits.values(), default=0)
    best = [j for j, h in hits.items() if h == top]
    return best if top > 0 and len(best) == 1 else cands


def _renamed(src: Source, ch: Chunk, d: Definition, lo: int, hi: int, names: set[str]) -> tuple[int, int, str] | None:
    """A definition with a new name whose body lines (two at least, and half of those that can tell places
    apart) sit in one original definition (same indentation) that the update does not name any more: that
    definition, renamed."""
    body = [ch.lines[r] for r in range(max(d.body, d.inner + 1), min(d.end, len(ch.lines)))
            if _telling(ch.lines[r])]
    if not body:
        return None
    peers = [j for j, o in enumerate(src.defs) if o.indent == d.indent and lo <= o.start and o.end <= hi
             and o.name not in names]  # in file order, and apart: the same indentation
    starts = [src.defs[j].body for j in peers]
    hits: dict[int, int] = {}
    for line in body:
        rows, _ = src.where(line, lo, hi)
        if len(rows) > 32:  # a line found everywhere says nothing
            continue
        found = set()
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
    return (o.start if d.start < d.inner else o.inner), o.end, f"{'.'.join(o.qual)} renamed to {d.name}"


def _telling(line: str) -> bool:
    """A line that can tell one place from another: some word in it, not just brackets and punctuation."""
    return len(_norm(line)) >= 4 and any(c.isalnum() for c in line)


def _block(src: Source, ch: Chunk, i: int, step: int, lo: int, hi: int, stop: int) -> list[int]:
    """Rows in [lo, hi) where chunk line ``i`` is, narrowed by the chunk's next lines (``step`` +1) or previous
    ones (-1) while more than one fits; lines past ``stop`` or inside a definition are not used."""
    rows, _ = src.where(ch.lines[i], lo, hi)
    k = 1
    while len(rows) > 1:
        j = i + k * step
        if not (0 <= j < len(ch.lines)) or not ch.items[j] or (j >= stop if step > 0 else j < stop):
            break
        nxt = [p for p in rows if lo <= p + k * step < hi and src.same(p + k * step, ch.lines[j])]
        if not nxt:
            break
        rows, k = nxt, k + 1
    return rows


def _back(src: Source, ch: Chunk, i: int, p: int, i0: int, lo: int) -> tuple[int, int]:
    """Chunk line ``i`` at row ``p``, moved up over the lines before it that match the rows before ``p``."""
    while i > i0 and ch.items[i - 1] and p > lo and src.same(p - 1, ch.lines[i - 1]):
        i, p = i - 1, p - 1
    return i, p


def _forward(src: Source, ch: Chunk, j: int, q: int, i1: int, hi: int) -> tuple[int, int]:
    while j + 1 < i1 and ch.items[j + 1] and q + 1 < hi and src.same(q + 1, ch.lines[j + 1]):
        j, q = j + 1, q + 1
    return j, q


@dataclass
class _Ends:
    """What one end of a chunk's lines matches: the outermost line found anywhere in the window and its rows
    (``edge``, ``rows``), and the outermost line found at a single row of one of the windows (``unique``:
    line, row; extended over the matching lines beyond it)."""

    edge: int = -1
    rows: list[int] = field(default_factory=list)
    unique: tuple[int, int] | None = None


def _scan(src: Source, ch: Chunk, i0: int, i1: int, windows: list[tuple[int, int]], step: int) -> _Ends:
    """``_Ends`` of chunk lines [i0, i1) from the top (``step`` +1) or the bottom (-1)."""
    out = _Ends()
    order = range(i0, i1) if step > 0 else range(i1 - 1, i0 - 1, -1)
    for i in order:
        if not ch.items[i] or not ch.lines[i].strip():
            continue
        for w, (lo, hi) in enumerate(windows):
            rows = _block(src, ch, i, step, lo, hi, i1 if step > 0 else i0)
            if w == 0 and rows and out.edge < 0:
                out.edge, out.rows = i, src.where(ch.lines[i], lo, hi)[0]
            if len(rows) == 1:
                out.unique = _back(src, ch, i, rows[0], i0, lo) if step > 0 else _forward(src, ch, i, rows[0], i1, hi)
                return out
    return out


def _toward(src: Source, ch: Chunk, ends: _Ends, lo: int, hi: int, step: int, i0: int, i1: int) -> tuple[int, int]:
    """The chunk's outermost matching line placed by the nearest of its rows on the near side of the unique
    anchor, inside the definition around that anchor at the line's level; the anchor itself when there is none."""
    assert ends.unique is not None
    u, r = ends.unique
    if (u <= ends.edge) if step > 0 else (u >= ends.edge):
        return u, r
    i = ends.edge
    a, b = src.region(r, _indent(ch.lines[i]))
    if step > 0:
        near = [p for p in _block(src, ch, i, 1, max(lo, a), r, u) if p < r]
        return _back(src, ch, i, near[-1], i0, lo) if near else (u, r)
    near = [q for q in _block(src, ch, i, -1, r + 1, min(hi, b), u + 1) if q > r]
    return _forward(src, ch, i, near[0], i1, hi) if near else (u, r)


def _windows(src: Source, ch: Chunk, lo: int, hi: int, strict: bool) -> list[tuple[int, int]]:
    """Where a chunk's lines are looked for: the whole window, then (between neighbours) the body of the
    definition the previous chunk ended in, at the chunk's level and at the level of its first line."""
    out = [(lo, hi)]
    if not strict and lo > 0:
        ind = _indent(ch.lines[0])
        for level in (ind, ind + 1):
            sc = src.scope(lo - 1, level, lo, hi)
            if sc is not None and sc[0] < sc[1] and sc not in out:
                out.append(sc)
    return out


def _place(src: Source, ch: Chunk, lo: int, hi: int, strict: bool, names: set[str],
           last: bool, guard: _Guard) -> _Spot | list[_Spot] | None:
    """A chunk's place in [lo, hi): a spot, several candidate spots (ambiguous; never when ``strict``), or
    None (nothing anchors it). ``strict``: unique in [lo, hi) only. Places that drop too much of the original
    (``guard``) are passed over."""
    anchors: list[tuple[int, int, int, int, str]] = []
    items = list(ch.items)
    for unit in ch.units:
        got = _def_anchor(src, ch, unit, lo, hi, strict, names)
        d = ch.defs[unit[0]]
        if got is not None and (not anchors or got[0] >= anchors[-1][3]):
            anchors.append((d.start, min(d.end, len(ch.lines)), *got))
        elif any(src.defs[j].indent == d.indent for j in src.by_name.get(d.name, ())):
            # An original definition of that name that could not be told apart: its lines anchor like others.
            items[d.start : d.end] = [True] * (min(d.end, len(items)) - d.start)
    view = Chunk(ch.index, ch.lines, ch.start, ch.marker_before, ch.marker_after, ch.after_indent, ch.blanks,
                 ch.defs, ch.units, items)
    if anchors:
        return _around_defs(src, view, anchors, lo, hi, last, guard)
    return _by_lines(src, view, lo, hi, strict, last, guard)


def _around_defs(src: Source, ch: Chunk, anchors: list[tuple[int, int, int, int, str]], lo: int, hi: int,
                 last: bool, guard: _Guard) -> _Spot:
    """A chunk with anchored definitions: its lines before the first one and after the last one are matched
    on the original just before and after them (the nearest match). When that match would drop too much
    (``guard``), those lines are new lines beside the definitions instead (the head's match given up first)."""
    cs, oa, ce, ob = anchors[0][0], anchors[0][2], anchors[-1][1], anchors[-1][3]
    head = _scan(src, ch, 0, cs, [(lo, oa)], 1)
    tail = _scan(src, ch, ce, len(ch.lines), [(ob, hi)], -1)
    note = ", ".join(x[4] for x in anchors)
    kept = tuple((x[2], x[3]) for x in anchors)
    spot = _Spot(oa, ob, ch.lines, "definition", note, kept)
    for k, (use_head, use_tail) in enumerate(((True, True), (False, True), (True, False), (False, False))):
        i, a = cs, oa
        if use_head and head.edge >= 0:
            i, a = _back(src, ch, head.edge, head.rows[-1], 0, lo)
        j, b = ce - 1, ob
        if use_tail and tail.edge >= 0:
            j, q = _forward(src, ch, tail.edge, tail.rows[0], len(ch.lines), hi)
            b = q + 1
        spot = _edges(src, ch, _Spot(a, b, list(ch.lines), "definition", note, kept), i, j, last)
        if k:
            spot.note = f"{note}; lines beside them placed as new lines (their match dropped too much)"
        if guard.ok(ch, spot):
            return spot
    return spot


def _by_lines(src: Source, ch: Chunk, lo: int, hi: int, strict: bool,
              last: bool, guard: _Guard) -> _Spot | list[_Spot] | None:
    """A chunk placed by its first and last context lines: from a line found at a single place, its outermost
    matching lines are placed by their nearest rows; without one, or when that place drops too much of the
    original (``guard``), every place of its first line that does not is a candidate (ambiguous)."""
    n = len(ch.lines)
    windows = _windows(src, ch, lo, hi, strict)
    head, tail = _scan(src, ch, 0, n, windows, 1), _scan(src, ch, 0, n, windows, -1)
    if head.edge < 0:
        return None
    if head.unique is not None and tail.unique is not None:
        i, p = _toward(src, ch, head, lo, hi, 1, 0, n)
        j, q = _toward(src, ch, tail, lo, hi, -1, 0, n)
        spot = _edges(src, ch, _Spot(p, q + 1, ch.lines, "lines"), i, j, last) if p <= q and i <= j else None
        if spot is not None and guard.ok(ch, spot):
            if src.lines[spot.a : spot.b] != ch.lines or len(head.rows) < 2:
                loose = src.lines[p] != ch.lines[i] or src.lines[q] != ch.lines[j]
                spot.note = "ignoring whitespace" if loose else ""
                return spot
            # It would change nothing there, and its first line is found elsewhere too: an edit is meant, at the
            # one other place (spanning no more than twice its lines) where it would change something.
            others = [c for c in _candidates(src, ch, head, tail, last)
                      if src.lines[c.a : c.b] != ch.lines and c.b - c.a <= 2 * n and guard.ok(ch, c)]
            if len(others) == 1:
                others[0].kind, others[0].note = "lines", "the one place where it changes something"
                return others[0]
            return spot
    if strict:
        return None
    return [c for c in _candidates(src, ch, head, tail, last) if guard.ok(ch, c)] or None


def _candidates(src: Source, ch: Chunk, head: _Ends, tail: _Ends, last: bool) -> list[_Spot]:
    """Every place of the chunk's first matching line, each to the nearest place of its last one after it."""
    out: list[_Spot] = []
    i, j = head.edge, tail.edge
    for p in head.rows:
        later = [r for r in tail.rows if r >= p + (j > i)]
        if later:
            out.append(_edges(src, ch, _Spot(p, later[0] + 1, ch.lines, "ambiguous"), i, j, last))
        if len(out) >= MAX_CANDIDATES:
            break
    return out


def _rank(src: Source, ch: Chunk, cands: list[_Spot]) -> list[tuple[float, _Spot]]:
    """Candidate places, most likely first: those where the chunk changes something, spanning no more than
    twice its lines, most like it (characters in common with the lines it replaces); ties in file order."""
    def keep(pool: list[_Spot], test: Callable[[_Spot], bool]) -> list[_Spot]:
        return [c for c in pool if test(c)] or pool

    pool = keep(cands, lambda c: src.lines[c.a : c.b] != ch.lines)
    pool = keep(pool, lambda c: c.b - c.a <= 2 * len(ch.lines))
    text = "\n".join(ch.lines)
    scored = [(difflib.SequenceMatcher(None, "\n".join(src.lines[c.a : c.b]), text, autojunk=False).ratio(), c)
              for c in pool]
    return sorted(scored, key=lambda x: -x[0])


def _edges(src: Source, ch: Chunk, spot: _Spot, i: int, j: int, last: bool) -> _Spot:
    """Lines before the chunk's first anchored line (``i``) or after its last (``j``) are new lines. An update
    that opens without a marker starts the file: new lines at its start replace the file's first lines when
    those are no more than the chunk holds and hold no definition. One that ends without a marker ends it: new
    lines at its end replace the file's last lines likewise, and the original lines after it go when they are
    no more than the chunk holds and all indented (the rest of the block the chunk ends in)."""
    n = len(ch.lines)
    if i > 0 and ch.index == 0 and not ch.marker_before and spot.a <= n and not src.top_level_def_in(0, spot.a):
        spot.a = 0
    if last and not ch.marker_after and src.n - spot.b <= n:
        rest = src.lines[spot.b :]
        if (j < n - 1 and not src.top_level_def_in(spot.b, src.n)) or (
                any(x.strip() for x in rest) and all(not x.strip() or x[:1].isspace() for x in rest)):
            spot.b = src.n
    # New lines at an edge keep the blank lines the update put between them and the marker, unless the
    # original has blank lines there already.
    lead = ch.blanks[0] if i > 0 and 0 < spot.a and src.lines[spot.a - 1].strip() else 0
    trail = ch.blanks[1] if j < n - 1 and spot.b < src.n and src.lines[spot.b].strip() else 0
    if lead or trail:
        spot.lines = [""] * lead + spot.lines + [""] * trail
    return spot


def _blank_run(src: Source, p: int, step: int) -> int:
    """Blank original lines from row ``p`` on (``step`` +1) or back (-1)."""
    k = 0
    while 0 <= p + k * step < src.n and not src.lines[p + k * step].strip():
        k += 1
    return k


def _insert(src: Source, ch: Chunk, lo: int, hi: int) -> _Spot:
    """A chunk that anchors nowhere but defines something new: after the last definition at its level in
    [lo, hi) (inside the definition the previous chunk ended in, or the one its open headers name), with the
    spacing used between those definitions; when it opens the update, before the first one."""
    d0, path = ch.defs[ch.units[0][0]], ch.units[0][1]
    cont = -1
    if path:
        named = [j for j in src.by_name.get(path[-1], ()) if src.defs[j].qual[-len(path):] == path
                 and lo <= src.defs[j].end and src.defs[j].start < hi]
        cont = named[0] if len(named) == 1 else -1
    elif lo > 0:
        cont = src.container(lo - 1, d0.indent)
    sibs = [o for o in src.defs if o.parent == cont and o.indent == d0.indent and lo <= o.start and o.end <= hi]
    where = "at the top level" if cont < 0 else f"in {'.'.join(src.defs[cont].qual)}"
    if not ch.marker_before and sibs:  # the update opens with it: before the first definition
        o = sibs[0]
        gap = _blank_run(src, o.start - 1, -1) or 1
        return _Spot(o.start, o.start, ch.lines + [""] * gap, "inserted", f"before {o.name} {where}")
    if sibs:
        o = sibs[-1]
        gap = _blank_run(src, o.end, 1) or _blank_run(src, o.start - 1, -1) or 1
        return _Spot(o.end, o.end, [""] * gap + ch.lines, "inserted", f"after {o.name} {where}")
    p = min(hi, src.defs[cont].end) if cont >= 0 else (hi if lo > 0 or hi < src.n else src.n)
    prev = src.lines[p - 1].rstrip() if p > 0 else ""
    gap = 0 if not prev or prev.endswith(src.grammar.block_openers) else 1
    return _Spot(p, p, [""] * gap + ch.lines, "inserted", f"at line {p + 1} {where}")


# ---------------------------------------------------------------------------------------------------- merging
GUESSED = ("python", "javascript", "typescript", "tsx", "rust", "go")  # in this order on a tie
GUESS_CHARS = 20_000


def guess_language(text: str) -> str:
    """The grammar (of ``GUESSED``) that parses the start of ``text`` with the fewest bytes in error; python
    when none is installed or the text is empty."""
    head = text[:GUESS_CHARS]
    if len(text) > GUESS_CHARS and "\n" in head:
        head = head[: head.rfind("\n") + 1]
    best, fewest = "python", -1
    for lang in GUESSED:
        doc = syntax.Document.parse(head, lang)
        if doc.tree is None:
            continue
        bad = sum(n.end_byte - n.start_byte + n.is_missing for n in syntax.broken_nodes(doc.tree))
        if fewest < 0 or bad < fewest:
            best, fewest = lang, bad
    return best


def _check(name: str, text: str) -> None:
    if len(text) > MAX_DOCUMENT_CHARS:
        raise ValueError(f"the {name} has {len(text):,} characters, over the limit of {MAX_DOCUMENT_CHARS:,}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"the {name} holds a lone surrogate (U+{ord(text[e.start]):04X} at character "
                         f"{e.start}); send valid Unicode") from None


def _split(text: str) -> tuple[list[str], bool]:
    """Lines without their line ends (a trailing ``\\r`` dropped), and whether the text ends with a newline."""
    if not text:
        return [], False
    lines = text.split("\n")
    final = lines[-1] == ""
    if final:
        lines.pop()
    return [x[:-1] if x.endswith("\r") else x for x in lines], final


@dataclass
class _Plan:
    src: Source
    chunks: list[Chunk]
    spots: list[_Spot]
    eol: str
    final: bool
    nfe: int


def _best_chain(spots: list[_Spot | None]) -> list[_Spot | None]:
    """The largest set of placed chunks that follow each other in the file (the others are placed again
    between them)."""
    idx = [k for k, s in enumerate(spots) if s is not None]
    best: dict[int, tuple[int, int]] = {}  # chunk -> (chain length, previous chunk)
    for x, k in enumerate(idx):
        sk = spots[k]
        assert sk is not None
        best[k] = (1, -1)
        for m in idx[:x]:
            sm = spots[m]
            assert sm is not None
            if sm.b <= sk.a and best[m][0] + 1 > best[k][0]:
                best[k] = (best[m][0] + 1, m)
    keep: set[int] = set()
    k = max(best, key=lambda c: best[c][0], default=-1)
    while k >= 0:
        keep.add(k)
        k = best[k][1]
    return [s if k in keep else None for k, s in enumerate(spots)]


def _plan(original: str, update: str, language: str, choose: Chooser | None) -> _Plan:
    _check("original", original)
    _check("update", update)
    if language == "auto":
        language = guess_language(original or update)
    eol = "\r\n" if "\r\n" in original and original.count("\r\n") == original.count("\n") else "\n"
    olines, final = _split(original)
    ulines, ufinal = _split(update)
    chunks, markers = split_update(ulines)
    if not chunks:
        raise ValueError("the update holds only marker lines (or nothing): there is no code to apply")
    src = Source(olines, language)
    for ch in chunks:
        _analyse(ch, language)
    names = {d.name for ch in chunks for d in ch.defs}
    guard = _Guard(src, frozenset(_norm(x) for x in ulines), markers > 0)
    first = [_place(src, ch, 0, src.n, True, names, k == len(chunks) - 1, guard) for k, ch in enumerate(chunks)]
    spots = _best_chain([s if isinstance(s, _Spot) else None for s in first])
    nfe = 0
    for k, ch in enumerate(chunks):
        if spots[k] is not None:
            continue
        lo = max((s.b for s in spots[:k] if s is not None), default=0)
        hi = min((s.a for s in spots[k + 1 :] if s is not None), default=src.n)
        got = _place(src, ch, lo, hi, False, names, k == len(chunks) - 1, guard)
        if isinstance(got, list):
            got, used = _decide(src, eol, ch, got, choose)
            nfe += used
        if got is None and ch.units:
            got = _insert(src, ch, lo, hi)
        if got is None and markers == 0:
            got = _Spot(0, src.n, ch.lines, "whole", "no marker and nothing matches: the update is the file")
        if got is None:
            _refuse_dropping(src, ch, lo, hi, names, k == len(chunks) - 1, guard)
            raise ValueError(f"chunk {k + 1} of the update (lines {ch.start + 1}-{ch.start + len(ch.lines)}, "
                             f"starting {ch.lines[0].strip()[:60]!r}) cannot be placed: none of its lines match the "
                             "original between its neighbours and it defines nothing new")
        spots[k] = got
    placed = [s for s in spots if s is not None]
    if placed[-1].b == src.n and not chunks[-1].marker_after:  # the update ends the file: its last newline too
        final = ufinal
    return _Plan(src, chunks, placed, eol, final, nfe)


def _refuse_dropping(src: Source, ch: Chunk, lo: int, hi: int, names: set[str], last: bool, guard: _Guard) -> None:
    """Raise ValueError when the chunk has places that only the span guard turned down (the error says what
    the nearest of them would drop); return when it has none at all."""
    got = _place(src, ch, lo, hi, False, names, last, _Guard(src, guard.shown, False))
    spots = got if isinstance(got, list) else [got] if got is not None else []
    if not spots:
        return
    s = min(spots, key=lambda c: c.b - c.a)
    raise ValueError(f"chunk {ch.index + 1} of the update (lines {ch.start + 1}-{ch.start + len(ch.lines)}, starting "
                     f"{ch.lines[0].strip()[:60]!r}) is not applied: its anchoring would replace original lines "
                     f"{s.a + 1}-{s.b} and drop {guard.dropped(s)} of them that appear nowhere in the update (at most "
                     f"{guard.limit(ch)} for a chunk of its size); put a '... existing code ...' marker where "
                     "original code stays, or show more lines around the edit")


def _decide(src: Source, eol: str, ch: Chunk, cands: list[_Spot], choose: Chooser | None) -> tuple[_Spot, int]:
    """An ambiguous chunk's place (``_rank``; among places that rank the same, ``choose`` decides, else the
    first), and the model passes spent."""
    ranked = _rank(src, ch, cands)
    best = [c for r, c in ranked if r == ranked[0][0]]
    pick, how, used = 0, "the closest", 0
    if len(best) > 1 and choose is not None:
        def text(rows: list[str]) -> str:
            return "".join(x + eol for x in rows)

        got = choose(text(ch.lines), [(text(src.lines[: s.a]), text(src.lines[s.b :])) for s in best])
        pick, how, used = (got if 0 <= got < len(best) else 0), "the model's pick", 1
    elif len(best) > 1:
        how = "the first"
    spot = best[pick]
    if len(cands) == 1:
        spot.kind, spot.note = "lines", "the one place where both its ends are found"
    else:
        spot.note = f"{len(cands)} candidate places; {how} of {len(best)} alike (line {spot.a + 1})"
    return spot, used


def _render(plan: _Plan, upto: int | None = None) -> tuple[str, tuple[tuple[int, str], ...]]:
    """The merged text with the first ``upto`` chunks placed (all by default), and its segments."""
    src, eol = plan.src, plan.eol
    segs: list[tuple[int, list[str]]] = []
    pos = 0
    for k, s in enumerate(plan.spots[:upto]):
        segs.append((-1, src.lines[pos : s.a]))
        segs.append((k, s.lines))
        pos = s.b
    segs.append((-1, src.lines[pos:]))
    total = sum(len(rows) for _, rows in segs)
    out: list[tuple[int, str]] = []
    seen = 0
    for k, rows in segs:
        if not rows:
            continue
        seen += len(rows)
        piece = eol.join(rows) + (eol if seen < total or plan.final else "")
        out.append((k, piece))
    return "".join(p for _, p in out), tuple(out)


def _placements(plan: _Plan) -> tuple[Placement, ...]:
    return tuple(Placement(k, s.kind, s.a, s.b, ch.start, ch.start + len(ch.lines), s.note)
                 for k, (ch, s) in enumerate(zip(plan.chunks, plan.spots, strict=True)))


def merge(original: str, update: str, language: str = "python", choose: Chooser | None = None) -> ApplyResult:
    """Merge ``update`` (a snippet with ``... existing code ...`` markers) into ``original`` (the module doc
    says how). ``language``: a grammar name or LSP id, or ``auto`` (``guess_language``). ``choose`` picks among
    the candidate places of an ambiguous chunk that rank the same (default: the first).
    Raises ValueError: a text over ``MAX_DOCUMENT_CHARS`` or not valid Unicode, an update of markers only, a
    chunk that cannot be placed."""
    t0 = time.perf_counter()
    plan = _plan(original, update, language, choose)
    text, segments = _render(plan)
    return ApplyResult(text, _placements(plan), (time.perf_counter() - t0) * 1e3, segments, plan.nfe)


def stream(original: str, update: str, language: str = "python", choose: Chooser | None = None) -> Iterator[Pass]:
    """``merge`` as the engine's streams go: a ``Pass`` per chunk, its text the file with that many chunks
    placed (``masked``: chunks still to place); the last is final and its text is ``merge``'s."""
    plan = _plan(original, update, language, choose)
    total = len(plan.spots)
    for k in range(1, total + 1):
        text, _ = _render(plan, k)
        yield Pass(k - 1, text, total - k, k == total, plan.nfe, 0, len(original), "complete" if k == total else "")


# ---------------------------------------------------------------------------------------------------- the model
SCORE_TOKENS = 32  # an ambiguous chunk is scored on its first tokens at each candidate place


def chooser(rt: Any, use_model: bool) -> Chooser | None:
    """``model_chooser(rt)`` when ``use_model`` and the model denoises a canvas, else None (the first place)."""
    return model_chooser(rt) if use_model and rt.canvas else None


def model_chooser(rt: Any) -> Chooser:
    """A ``Chooser`` that asks the diffusion model (an ``engine.runtime.Runtime``): at each candidate place the
    chunk's first tokens are masked between the original text before the place and the rest of the chunk and
    the original after it, and the place where the model finds them most likely (mean log-probability, one
    batched forward pass) wins."""
    import torch

    tok, model = rt.tokenizer, rt.model

    def choose(chunk: str, contexts: Sequence[tuple[str, str]]) -> int:
        ids = tok.encode(chunk)
        k = max(1, min(len(ids), SCORE_TOKENS, model.cfg.max_canvas))
        shown = tok.decode(ids[:k])
        rest = chunk[len(shown) :] if chunk.startswith(shown) else chunk
        pairs = [rt.context_ids(before, rest + after) for before, after in contexts]
        cache = model.encode_context([p for p, _ in pairs], [s for _, s in pairs], k)
        canvas = torch.full((len(pairs), k), tok.mask_id, dtype=torch.long, device=model.device)
        with torch.no_grad():
            logp = torch.log_softmax(model.canvas_logits(canvas, cache).float(), -1)
        target = torch.tensor(ids[:k] or [tok.pad_id], device=model.device)
        score = logp[:, torch.arange(k, device=model.device), target].mean(-1)
        return int(score.argmax())

    return choose
