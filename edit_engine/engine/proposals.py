"""Copy proposals: candidates for a span found in the document and the related files, verified by the model.

Code repeats itself: a line, a block body, an argument or an attribute chain often appears elsewhere in the
same file or its package. For a single-line span (a blank line's statement or header, the rest of a line, an
expression inside one) and for a block body where a body starts, the candidates are the places whose
surroundings best match the hole's:

- spans of the text (code lines on a blank line, and 1-4-line block bodies at a body's start, re-indented; else
  one-line expressions in argument, value, return, subscript and attribute positions, from a tree-sitter query)
  whose text before ends like the hole's or whose text after starts like it, found by their last/first 32, 16,
  8 and 4 characters and scored on the whole match (characters in common either side, each up to
  ``CONTEXT_CHARS``);
- lines found by their neighbouring lines, or holding the code before the cursor (its longest tail found),
  compared with blanks collapsed.

A copy is not proposed where it cannot be meant: a block header on a statement line, a docstring below a body's
first line, a line repeating its neighbour, or (from another file) a name the document never uses. ``verify``
puts the best one into the canvas and asks the model in one batched forward pass: two rows, the even slots masked
in one and the odd in the other, so every token (and the pad that ends the fill) is predicted with half of its
neighbours visible. It is the answer when its context match and the model's score clear ``ACCEPT``; otherwise the
request is denoised as usual.

Bounded: the document is searched ``WINDOW_CHARS`` either side of the span, at most ``MAX_SOURCE_CHARS`` of
related text (whose spans and ``Source`` are kept by content for the next keystrokes: ``CACHE_ENTRIES`` of each,
within ``SPANS_MAX_BYTES`` and ``SOURCES_MAX_BYTES``), each search key looks at ``MAX_SCAN`` places and keeps
``MAX_HITS``.
"""

from __future__ import annotations

import bisect
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch
import tree_sitter as ts

from edit_engine.syntax import planner
from edit_engine.syntax import trees as syntax
from edit_engine.syntax.lru import BoundedLRU

KINDS = ("statement", "header", "rest_of_line", "in_line", "in_brackets")  # single-line code spans that take copies
MAX_SOURCE_CHARS = 1_000_000  # related text searched, in all
WINDOW_CHARS = 20_000  # the document is searched this far either side of the span (about 500 lines)
MAX_SCAN = 4_000  # places a search key is looked at, at most
MAX_HITS = 64  # places found per search tail
MAX_VERIFY = 1  # candidates scored by the model (two canvas rows each)
MAX_FILL_CHARS = 200
CONTEXT_CHARS = 2000  # each side of the context match is counted up to this many characters
MIN_ANCHOR = 3
HOLE = "\x00"  # the hole's line in the document's own ``Source``  # a search tail (text before the cursor on its line) is at least this long


@dataclass(frozen=True)
class Accept:
    """When a copy is accepted: its context match (characters) and the model's mean log-probability over its
    tokens and the pad after them. Measured on held-out code (docs/results-archive-2026-12-05.md): the packaged model's scores
    hardly separate right copies from wrong ones (ranking candidates by them lowered exact match), so the
    context ranks and the model only vetoes copies it finds very unlikely."""

    match: int = 10
    mean: float = -8.0


ACCEPT = Accept()
_BLANKS = re.compile(r"\s+")
_DOCSTRING = re.compile(r"^[rRbBuU]?(\"\"\"|\'\'\'|\"|\')")
_BOUNDARY = re.compile(r"[\s=(\[{,:+\-*/%<>!&|^~@]")
_OPEN, _CLOSE = "([{", ")]}"  # a header plan takes a line that opens a bracket too (its next line is deeper)


@dataclass(frozen=True)
class Candidate:
    """A fill copied from somewhere: ``text`` goes between the prefix and the suffix, as the document has them."""

    text: str
    left: int  # characters of the text before that match the hole's (blanks collapsed)
    right: int  # the same after
    count: int = 1  # places that proposed this text
    origin: str = "document"  # document | related

    @property
    def score(self) -> int:
        return self.left + self.right


@dataclass(frozen=True)
class Verdict:
    """The model's judgement of one candidate (``verify``)."""

    candidate: Candidate
    mean: float  # mean log-probability of its tokens and the pad after them
    worst: float  # the least likely of them
    tokens: int

    @property
    def accepted(self) -> bool:
        return self.candidate.score >= ACCEPT.match and self.mean >= ACCEPT.mean


# ---------------------------------------------------------------------------------------------------- sources
class Source:
    """A text searched for copies, normalised once: its code lines stripped and joined by one blank (``flat``),
    so that context matches ignore indentation and line breaks. ``starts[i]``: where line ``rows[i]`` begins in
    ``flat``."""

    def __init__(self, text: str, origin: str) -> None:
        self.origin = origin
        self.lines: list[str] = []  # stripped code lines
        self.rows: list[int] = []  # their row in ``text``
        self.starts: list[int] = []
        parts: list[str] = []
        pos = 0
        for row, line in enumerate(text.split("\n")):
            s = line.strip()
            if not s:
                continue
            self.lines.append(s)
            self.rows.append(row)
            self.starts.append(pos)
            parts.append(s)
            pos += len(s) + 1
        self.flat = " ".join(parts) + " "
        self.at_start = {p: i for i, p in enumerate(self.starts)}
        self.at_end = {p + len(ln): i for i, (p, ln) in enumerate(zip(self.starts, self.lines, strict=True))}


CACHE_ENTRIES = 64  # related files' ``Source``s kept, and their span tables of each kind
# A ``Source``'s resident bytes: its ``flat`` text (``sys.getsizeof``) plus this much per code line (the stripped
# line, its row and start, two table entries). Measured with tracemalloc on 240 k characters of stdlib modules
# repeated (310-360 bytes per line besides ``flat``), of one-line statements (315-330), of comments (362) and
# of non-ASCII code (369).
SOURCE_BYTES_PER_LINE = 384
SOURCES_MAX_BYTES = 32 << 20  # some three million characters of related code (7-19 bytes a character)
_SOURCES: BoundedLRU[tuple[int, str], Source] = BoundedLRU(CACHE_ENTRIES, SOURCES_MAX_BYTES, "related sources")


def source_bytes(src: Source) -> int:
    """Estimated resident bytes of a ``Source``."""
    return sys.getsizeof(src.flat) + SOURCE_BYTES_PER_LINE * len(src.lines)


def source(text: str, origin: str) -> Source:
    """The normalised ``Source`` of a related file, kept for the next keystrokes (by content; least recently
    used first out, ``CACHE_ENTRIES`` and ``SOURCES_MAX_BYTES``)."""
    key = (hash(text), origin)
    got = _SOURCES.get(key)
    if got is None:
        got = Source(text, origin)
        _SOURCES.put(key, got, source_bytes(got))
    return got


def _flat(text: str) -> str:
    return " ".join(s for s in (ln.strip() for ln in text.split("\n")) if s)


def _common_suffix(a: str, end: int, b: str) -> int:
    n, lim = 0, min(end, len(b), CONTEXT_CHARS)
    while n < lim and a[end - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return n


def _common_prefix(a: str, start: int, b: str) -> int:
    n, lim = 0, min(len(a) - start, len(b), CONTEXT_CHARS)
    while n < lim and a[start + n] == b[n]:
        n += 1
    return n


def _balanced(text: str) -> bool:
    depth = 0
    quote = ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth < 0:
                return False
    return depth == 0 and not quote


def _cut(rest: str, tail: str) -> str | None:
    """The candidate in ``rest`` (a source line after its anchor): up to where ``tail`` (the hole's line after
    the cursor, stripped) starts with balanced brackets before it (its first 12 characters, else its first
    character when that closes or separates), or the whole rest when ``tail`` is empty."""
    rest = rest.rstrip()
    if not tail:
        return rest if _balanced(rest) or rest.endswith((":", "(", "[", "{", ",")) else None
    for key in (tail[:12], tail[0]) if tail[0] in ")]},:;" and len(tail) > 1 else (tail[:12],):
        j = rest.find(key)
        while j >= 0:
            if _balanced(rest[:j]):
                return rest[:j]
            j = rest.find(key, j + 1)
    return None


# ---------------------------------------------------------------------------------------------------- spans
# Expressions a user types whole: call arguments and keyword values, right-hand sides, returned values,
# subscripts and outermost attribute chains.
_EXPRESSIONS = {"python": """
(argument_list (_) @e)
(keyword_argument value: (_) @e)
(assignment right: (_) @e)
(augmented_assignment right: (_) @e)
(return_statement (_) @e)
(subscript) @e
(attribute) @e
"""}
_LINE = re.compile(r"^[ \t]*(\S[^\n]*?)[ \t]*$", re.M)
_BLOCKS = {"python": "(block) @e"}
BLOCK_ROWS = 4
_QUERIES: dict[tuple[str, str], object] = {}


@dataclass(frozen=True)
class Spans:
    """Where a text's candidate spans start and end (character offsets): ``by_start[s]`` the ends of the spans
    starting at ``s``, ``by_end[e]`` the starts of those ending at ``e``."""

    by_start: dict[int, list[int]]
    by_end: dict[int, list[int]]

    @classmethod
    def of(cls, spans: Iterable[tuple[int, int]]) -> Spans:
        by_start: dict[int, list[int]] = {}
        by_end: dict[int, list[int]] = {}
        for a, b in spans:
            by_start.setdefault(a, []).append(b)
            by_end.setdefault(b, []).append(a)
        return cls(by_start, by_end)


def line_spans(text: str) -> Spans:
    """Every non-blank line's code, indentation and trailing blanks left out."""
    return Spans.of(m.span(1) for m in _LINE.finditer(text) if not m.group(1).startswith("#"))


def expression_spans(doc: syntax.Document, window: tuple[int, int] | None = None) -> Spans:
    """The one-line expressions of ``doc`` (``_EXPRESSIONS``) of at most ``MAX_FILL_CHARS`` characters; none
    for a language without the query. ``window``: only those inside these character offsets, counted from its
    start."""
    return _query_spans(doc, _EXPRESSIONS, 1, window)


def block_spans(doc: syntax.Document, window: tuple[int, int] | None = None) -> Spans:
    """The block bodies of ``doc`` of 1 to ``BLOCK_ROWS`` lines that start on a line of their own (``window``:
    as ``expression_spans``)."""
    spans = _query_spans(doc, _BLOCKS, BLOCK_ROWS, window)
    text = doc.text[window[0] : window[1]] if window else doc.text
    keep = [(a, b) for a, ends in spans.by_start.items() for b in ends
            if not text[text.rfind("\n", 0, a) + 1 : a].strip()]
    return Spans.of((a, a + len(text[a:b].rstrip())) for a, b in keep)


def _query_spans(doc: syntax.Document, queries: dict[str, str], rows: int,
                 window: tuple[int, int] | None) -> Spans:
    src = queries.get(doc.language)
    if src is None or doc.tree is None:
        return Spans({}, {})
    key = (doc.language, src)
    q = _QUERIES.get(key)
    if q is None:
        q = _QUERIES[key] = ts.Query(doc.tree.language, src)
    c0, c1 = window or (0, len(doc.text))
    ascii_text = doc.text.isascii()
    b0 = c0 if ascii_text else len(doc.text[:c0].encode("utf-8", "surrogatepass"))
    b1 = b0 + (c1 - c0 if ascii_text else len(doc.text[c0:c1].encode("utf-8", "surrogatepass")))
    cursor = ts.QueryCursor(q)  # type: ignore[arg-type]
    cursor.set_byte_range(b0, b1)
    nodes = cursor.captures(doc.tree.root_node).get("e", [])
    if not ascii_text:  # character offset (in the window) of each byte of it: count the bytes that start one
        lead = np.frombuffer(doc.data[b0:b1], dtype=np.uint8) & 0xC0 != 0x80
        chars = np.concatenate([[0], np.cumsum(lead)])
    out = []
    for n in nodes:
        if n.end_point.row - n.start_point.row >= rows or not 0 < n.end_byte - n.start_byte <= MAX_FILL_CHARS \
                or n.start_byte < b0 or n.end_byte > b1:
            continue
        a, b = n.start_byte - b0, n.end_byte - b0
        out.append((a, b) if ascii_text else (int(chars[a]), int(chars[b])))
    return Spans.of(out)


# A span table's resident bytes per key of its two tables (an int, a list of ints, the dict's slot). Measured
# with tracemalloc on 240 k characters of stdlib modules repeated, of one-line statements and of non-ASCII code,
# line, block and expression spans: 144-203 bytes per key (290-390 per span).
SPAN_BYTES_PER_KEY = 208
# The tables of a few requests' related text (``MAX_SOURCE_CHARS`` each): expressions take 6-13 bytes a
# character of code, 26-50 for dense one-line statements; lines 6-12, blocks 0-7.
SPANS_MAX_BYTES = 64 << 20
_SPANS: BoundedLRU[tuple[int, str, str], Spans] = BoundedLRU(CACHE_ENTRIES, SPANS_MAX_BYTES, "related spans")


def spans_bytes(spans: Spans) -> int:
    """Estimated resident bytes of a span table."""
    return 512 + SPAN_BYTES_PER_KEY * (len(spans.by_start) + len(spans.by_end))


def _related_spans(text: str, language: str, kind: str) -> Spans:
    """A related file's spans, kept for the next keystrokes (by content; least recently used first out,
    ``CACHE_ENTRIES`` and ``SPANS_MAX_BYTES``)."""
    key = (hash(text), language, kind)
    got = _SPANS.get(key)
    if got is None:
        got = line_spans(text) if kind == "line" else \
            (block_spans if kind == "block" else expression_spans)(syntax.Document.parse(text, language))
        _SPANS.put(key, got, spans_bytes(got))
    return got


def _matched_spans(text: str, spans: Spans, before: str, after: str,
                   hole: int | None) -> list[tuple[int, int, int, int]]:
    """The spans of ``text`` whose text before ends like ``before`` or whose text after starts like ``after``
    (found by their last/first 32, 16, 8, 4 characters), scored by the whole match; ``hole``: the cursor's
    offset when ``text`` is the document itself (spans touching it are left out)."""
    picked: set[tuple[int, int]] = set()
    for k in (32, 16, 8, 4):
        if len(picked) >= MAX_HITS:
            break
        for key, table, shift in ((before[-k:], spans.by_start, k), (after[:k], spans.by_end, 0)):
            if len(key) < k:
                continue
            pos = scanned = 0
            while len(picked) < MAX_HITS and scanned < MAX_SCAN and (j := text.find(key, pos)) >= 0:
                pos, scanned = j + 1, scanned + 1
                at = j + shift
                for other in table.get(at, ()):
                    s, e = (at, other) if shift else (other, at)
                    if hole is None or not s <= hole <= e:
                        picked.add((s, e))
    return [(s, e, _common_suffix(text, s, before), _common_prefix(text, e, after)) for s, e in sorted(picked)]


# ---------------------------------------------------------------------------------------------------- candidates
class _Found:
    """The candidates found so far, by text (the best context match of each kept), and the rules a copy must
    pass to be one."""

    def __init__(self, pl: planner.Plan, head: str, prefix: str, near: set[str], window: str) -> None:
        self.pl, self.head, self.prefix, self.near, self.window = pl, head, prefix, near, window
        self.blank = pl.on_blank_line
        self.common = syntax.load(pl.language).common_words
        self.words: set[str] | None = None  # the document's words, found when a related copy needs them
        self.found: dict[str, Candidate] = {}

    def add(self, body: str, left: int, right: int, origin: str) -> None:
        pl, blank = self.pl, self.blank
        fill = _fit(body, self.head, pl)
        if not fill.strip() or len(fill) > MAX_FILL_CHARS or (pl.close and not fill.endswith((pl.close, *_OPEN))):
            return
        if pl.kind == "statement" and fill.rstrip().endswith(":"):  # a header needs a deeper line after it
            return
        if blank and _DOCSTRING.match(fill.strip()) and not _body_start(self.prefix):  # a docstring opens a body
            return
        if blank and fill.strip() in self.near:  # a line repeating its neighbour is rarely meant
            return
        if origin == "related":
            if self.words is None:
                self.words = set(_WORD.findall(self.window))
            if not _names_known(fill, self.words, self.common):
                return
        old = self.found.get(fill)
        if old is None:
            self.found[fill] = Candidate(fill, left, right, 1, origin)
        else:
            best = max((old.left + old.right, old.left, old.right), (left + right, left, right))
            self.found[fill] = Candidate(fill, best[1], best[2], old.count + 1, old.origin)

    def best(self, limit: int) -> list[Candidate]:
        return sorted(self.found.values(), key=lambda c: -c.score)[:limit]  # ties: the first found (stable sort)


def candidates(text: str, pl: planner.Plan, related: Iterable[str] = (), limit: int = 8,
               doc: syntax.Document | None = None) -> list[Candidate]:
    """The copy candidates for the span ``pl`` of ``text``, best context match first (none for other spans).
    ``doc``: the document's syntax tree, when the caller has it."""
    if pl.kind not in KINDS or not pl.code or not (pl.single_line or pl.kind == "statement"):
        return []
    w0, w1 = max(0, pl.start - WINDOW_CHARS), min(len(text), pl.end + WINDOW_CHARS)  # the document searched
    window = text[w0:w1]
    prefix, suffix = text[w0 : pl.start], text[pl.end : w1]
    line_start = prefix.rfind("\n") + 1
    head = prefix[line_start:]
    nl = suffix.find("\n")
    tail = suffix if nl < 0 else suffix[:nl]
    blank = pl.on_blank_line  # a line's code is proposed; otherwise an expression (or the rest of a line)
    rest = suffix[len(tail) :]
    prev_lines = [ln.strip() for ln in prefix[max(0, line_start - 4000) : line_start].split("\n") if ln.strip()]
    next_lines = [ln.strip() for ln in rest[:4000].split("\n") if ln.strip()]
    found = _Found(pl, head, prefix, {HOLE, *prev_lines[-1:], *next_lines[:1]}, window)
    add = found.add

    # Spans of the text (lines on a blank line, and block bodies at a body's start; else expressions), matched
    # on the raw characters either side.
    kinds = _span_kinds(pl, prefix)
    if doc is None and kinds != ["line"]:
        doc = syntax.Document.parse(text, pl.language)
    column = len(head)
    budget = MAX_SOURCE_CHARS
    texts: list[tuple[str, str]] = [("document", window)]
    for r in related:
        if budget <= 0:
            break
        texts.append(("related", r[:budget]))
        budget -= len(r)
    for origin, src_text in texts:
        for kind in kinds:
            if origin == "document":
                spans = line_spans(window) if kind == "line" else \
                    (block_spans if kind == "block" else expression_spans)(doc, (w0, w1))  # type: ignore[arg-type]
            else:
                spans = _related_spans(src_text, pl.language, kind)
            hole = pl.start - w0 if origin == "document" else None
            for a, b, left, right in _matched_spans(src_text, spans, prefix, suffix, hole):
                body = src_text[a:b]
                if kind == "block":
                    body = reindent(body, column - (a - src_text.rfind("\n", 0, a) - 1))
                add(body, left, right, origin)
    kept = [t for o, t in texts if o == "related"]
    # Lines found by their neighbours or by the code before the cursor, matched without indentation.
    # The document with the hole's line as a mark no text matches: its neighbours must not match through it.
    sources = [Source(prefix[:line_start] + HOLE + rest, "document")] + [source(r, "related") for r in kept]
    before = _flat(prefix[:line_start]) + " "
    after = " " + _flat(rest)
    for src in sources:
        if blank:
            hits = _blank_line(src, before, after, found.near)
        elif head.strip():
            hits = _after_code(src, head.strip(), tail.strip(), before, after)
        else:
            continue
        for body, left, right in hits:
            add(body, left, right, src.origin)
    return found.best(limit)


_STRING = re.compile(r"(\"\"\"|\'\'\'|\"|\')(?:\\.|(?!\1).)*?\1", re.S)
_NAME = re.compile(r"(?<![.\w])[A-Za-z_]\w*")
_WORD = re.compile(r"[A-Za-z_]\w*")
_TARGETS = re.compile(r"\s*[A-Za-z_]\w*(\s*,\s*[A-Za-z_]\w*)*\s*(:[^=]*)?=(?!=)")


def _names_known(fill: str, words: set[str], common: frozenset[str]) -> bool:
    """Every name a copy from another file uses (not an attribute, not inside a string) is a word of the
    document or of the language's common words: ``return x + y`` copied into ``def add(a, b)`` is not. The
    names an assignment at its start binds may be new."""
    code = _STRING.sub("", fill)
    bound = _TARGETS.match(code)
    if bound:
        code = code[bound.end() :]
    for name in set(_NAME.findall(code)):
        if name not in common and name not in words:
            return False
    return True


def _span_kinds(pl: planner.Plan, prefix: str) -> list[str]:
    """The spans copied for a plan: lines on a blank line (and block bodies where a body starts), else
    expressions."""
    if not pl.on_blank_line:
        return ["expression"]
    g = syntax.load(pl.language)
    at_body = pl.kind == "statement" and g.header_end and _last_code(prefix).endswith(g.header_end)
    return ["line", "block"] if at_body else ["line"]


def _body_start(prefix: str) -> bool:
    """The cursor's line is the first of a block or of the file (only a header or nothing above it)."""
    last = _last_code(prefix)
    return not last or last.rstrip().endswith(":")


def _last_code(text: str) -> str:
    for ln in reversed(text.split("\n")[-50:]):
        if ln.strip() and not ln.strip().startswith("#"):
            return ln.rstrip()
    return ""


def reindent(body: str, by: int) -> str:
    """``body``'s lines after the first moved ``by`` columns (right when positive, never past their text)."""
    if by == 0 or "\n" not in body:
        return body
    first, *rest = body.split("\n")
    moved = []
    for ln in rest:
        lead = len(ln) - len(ln.lstrip(" "))
        moved.append(" " * max(0, lead + by) + ln[lead:] if ln.strip() else ln)
    return "\n".join([first, *moved])


def _fit(body: str, head: str, pl: planner.Plan) -> str:
    """A copied line's code placed at the cursor: on a blank line, after the plan's indentation."""
    if head.strip():
        return body
    indent = pl.indent or ""
    return (indent[len(head) :] if indent.startswith(head) else "") + body.strip()


def _after_code(src: Source, code: str, tail: str, before: str, after: str) -> list[tuple[str, int, int]]:
    """Copies for a cursor after ``code`` on its line: the source's places holding the longest tail of
    ``code`` (the whole line's code must start a line), continued to where ``tail`` starts."""
    flat = src.flat
    anchors = [code] + [code[m.end() :] for m in _BOUNDARY.finditer(code) if len(code) - m.end() >= MIN_ANCHOR]
    line_before = before + code
    out: list[tuple[str, int, int]] = []
    for anchor in anchors:
        pos = scanned = 0
        while len(out) < MAX_HITS and scanned < MAX_SCAN:
            j = flat.find(anchor, pos)
            if j < 0:
                break
            pos, scanned = j + 1, scanned + 1
            i = bisect.bisect_right(src.starts, j) - 1
            if i < 0 or (anchor == code and src.starts[i] != j):
                continue
            line = src.lines[i]
            e = j + len(anchor)
            line_end = src.starts[i] + len(line)
            if e > line_end:
                continue
            fill = _cut(line[e - src.starts[i] :], tail)
            if fill is None or not fill.strip():
                continue
            left = _common_suffix(flat, j, line_before[: len(line_before) - len(anchor)]) + len(anchor)
            right = _common_prefix(flat, e + len(fill), tail + after) if tail else \
                _common_prefix(flat, line_end, after)
            out.append((fill, left, right))
        if out:
            break  # the longest tail found wins; shorter ones only when it is nowhere else
    return out


def _blank_line(src: Source, before: str, after: str, near: set[str]) -> list[tuple[str, int, int]]:
    """Copies for a blank line: the lines whose text before (or after) ends (or starts) like the hole's, found
    by their last (first) few characters, longest keys first, then scored on the whole match. ``near``: the
    hole's neighbouring code lines, never proposed (a line repeating its neighbour is rarely meant)."""
    flat = src.flat
    rows: set[int] = set()

    def take(i: int | None) -> None:
        if i is not None and src.lines[i] not in near and not src.lines[i].startswith("#"):
            rows.add(i)

    for k in (24, 12, 6):
        if len(rows) >= MAX_HITS:
            break
        for key, table, shift in ((before[-k:], src.at_start, k), (after[:k], src.at_end, 0)):
            pos = scanned = 0
            while len(key) == k and len(rows) < MAX_HITS and scanned < MAX_SCAN and (j := flat.find(key, pos)) >= 0:
                pos, scanned = j + 1, scanned + 1
                take(table.get(j + shift))
    out = []
    for i in sorted(rows):
        start = src.starts[i]
        line = src.lines[i]
        out.append((line, _common_suffix(flat, start, before), _common_prefix(flat, start + len(line), after)))
    return out


# ---------------------------------------------------------------------------------------------------- verification
def verify(model: object, contexts: Callable[[int, int], object], rows: list[list[int]], pad_id: int,
           mask_id: int) -> list[tuple[float, float]]:
    """The model's (mean, worst) log-probability of each token list in ``rows`` followed by one pad, from one
    batched pass: two canvas rows per list, the even slots masked in one and the odd in the other, so each
    token is predicted with half of its neighbours visible. ``contexts(n, width)``: the request's context for
    ``n`` canvas rows of ``width`` slots (an exact cache repeated, or an open model's layout)."""
    width = max(len(r) for r in rows) + 1
    canvases, masks = [], []
    for r in rows:
        full = r + [pad_id] * (width - len(r))
        for parity in (0, 1):
            m = [j <= len(r) and j % 2 == parity for j in range(width)]
            canvases.append([mask_id if mj else t for t, mj in zip(full, m, strict=True)])
            masks.append(m)
    dev = model.device  # type: ignore[attr-defined]
    canvas = torch.tensor(canvases, dtype=torch.long, device=dev)
    batch = contexts(len(canvases), width)
    with torch.no_grad():
        logp = torch.log_softmax(model.canvas_logits(canvas, batch).float(), -1)  # type: ignore[attr-defined]
    truth = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows for _ in (0, 1)], device=dev)
    picked = logp.gather(-1, truth.unsqueeze(-1)).squeeze(-1)  # (2R, W)
    mask = torch.tensor(masks, dtype=torch.bool, device=dev)
    out = []
    for i, r in enumerate(rows):
        vals = torch.cat([picked[2 * i][mask[2 * i]], picked[2 * i + 1][mask[2 * i + 1]]])
        assert vals.numel() == len(r) + 1
        out.append((float(vals.mean()), float(vals.min())))
    return out
