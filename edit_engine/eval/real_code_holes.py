"""Holes cut with tree-sitter from real files, and the model-free copy baseline that fills them.

The real-code benchmark (``edit-engine eval --benchmark real-code``, built by ``benchmarks/real_code_set.py``)
cuts three kinds of hole from Python files no checkpoint trained on. Each kind is a set of *spans* of a file
(character offsets ``[start, end)``), chosen by one function that both the cutter and the baseline use:

- ``line``: the content of a non-blank, non-comment line whose stripped text has 8-100 characters and that does
  not start inside a string; the span runs from the end of its indentation to the end of the line (its newline
  stays), so the cursor sits at the indentation's end of an otherwise empty line.
- ``expression``: a one-line expression node of 3-60 characters inside a line (text before or after it on the
  line): a call argument (a keyword argument's value), the right-hand side of an assignment, an attribute
  chain (the outermost ``a.b.c``), a subscript, a returned value; never inside a string (f-string fields).
- ``block``: a block body (tree-sitter ``block``) of 1-4 lines that starts on a line of its own, after only
  indentation; the span is the body's text from its first statement, so the cursor sits after the first line's
  indentation and the lines after keep nothing.

A cut removes the span: the document is ``text[:start] + text[end:]``, the cursor ``start``, the hole
``text[start:end]`` (so putting the hole back at the cursor gives the file again, exactly).

The copy baseline (``copy_fill``) fills a hole with the span of the same kind, from the document or the related
files, whose surroundings best match the hole's: the score of a candidate ``[s, e)`` of a text ``t`` is the
longest common suffix of ``t[:s]`` and the text before the hole plus the longest common prefix of ``t[e:]`` and
the text after it, on characters, each capped at ``CONTEXT_CAP``. Candidates are in order (the document first,
then the related files as given; each by position), the first of the best scores wins, and a candidate of the
document that touches the cursor (``start <= offset <= end``, i.e. the hole's own position or a span the cut
changed) is left out. A block copied from another indentation has the lines after its first moved by the
difference of the two columns (without that no copy between levels could match).
"""

from __future__ import annotations

import bisect
import itertools
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import tree_sitter as ts

from edit_engine.engine.proposals import reindent
from edit_engine.eval.holes import parses
from edit_engine.syntax import trees as syntax

KINDS = ("line", "expression", "block")
LINE_CHARS = (8, 100)  # stripped line content
EXPRESSION_CHARS = (3, 60)
BLOCK_LINES = (1, 4)
CONTEXT_CAP = 2000  # characters of context each side that the baseline's score counts
# Call arguments that are not expressions on their own (``*args``, ``**kw``); a keyword argument gives its value.
_NOT_EXPRESSIONS = frozenset({"list_splat", "dictionary_splat", "keyword_argument", "comment", "assignment",
                              "augmented_assignment", "parenthesized_list_splat"})
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Span = tuple[int, int]


@dataclass(frozen=True)
class Source:
    """A parsed file: its text, tree and the byte -> character map of the text (None when it is ASCII)."""

    text: str
    tree: ts.Tree
    _chars: tuple[int, ...] | None
    _strings: tuple[Span, ...]  # character spans of the outermost string and comment nodes, sorted

    @classmethod
    def parse(cls, text: str) -> Source:
        doc = syntax.Document.parse(text, "python")
        if doc.tree is None:
            raise RuntimeError("tree-sitter-python is not installed")
        chars = None if text.isascii() else _byte_to_char(text)
        return cls(text, doc.tree, chars, _outer_strings(doc.tree, chars))

    @property
    def clean(self) -> bool:
        """No ERROR or MISSING node: the cutter takes only such files."""
        return not syntax.broken_nodes(self.tree)

    def char(self, byte: int) -> int:
        return byte if self._chars is None else self._chars[byte]

    def span(self, node: ts.Node) -> Span:
        return self.char(node.start_byte), self.char(node.end_byte)

    def in_string(self, offset: int) -> bool:
        """Whether ``offset`` lies strictly inside a string or comment."""
        i = bisect.bisect_right(self._strings, (offset, len(self.text) + 1)) - 1
        return i >= 0 and self._strings[i][0] < offset < self._strings[i][1]

    def nodes(self) -> Iterable[ts.Node]:
        stack = [self.tree.root_node]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(n.children))


def _outer_strings(tree: ts.Tree, chars: tuple[int, ...] | None) -> tuple[Span, ...]:
    """Character spans of the string and comment nodes not inside another one, sorted."""
    out: list[Span] = []
    stack = [tree.root_node]
    while stack:
        n = stack.pop()
        if n.type in ("string", "comment", "concatenated_string"):
            s, e = n.start_byte, n.end_byte
            out.append((s, e) if chars is None else (chars[s], chars[e]))
            continue
        stack.extend(n.children)
    return tuple(sorted(out))


def _byte_to_char(text: str) -> tuple[int, ...]:
    """Character offset of every byte offset of ``text``'s UTF-8 form (a byte inside a character maps to it)."""
    widths = [len(ch.encode("utf-8", "surrogatepass")) for ch in text]
    out: list[int] = []
    for i, w in enumerate(widths):
        out.extend([i] * w)
    out.append(len(text))
    return tuple(out)


# ---------------------------------------------------------------------------------------------------- spans
def line_spans(src: Source) -> list[Span]:
    """Line holes: from the end of a line's indentation to its end (the newline not included)."""
    out: list[Span] = []
    pos = 0
    for line in src.text.split("\n"):
        body = line.strip()
        if body and not body.startswith("#") and LINE_CHARS[0] <= len(body) <= LINE_CHARS[1]:
            start = pos + len(line) - len(line.lstrip())
            if not src.in_string(start):
                out.append((start, pos + len(line)))
        pos += len(line) + 1
    return out


def _expression_nodes(src: Source) -> Iterable[ts.Node]:
    for n in src.nodes():
        t = n.type
        if t == "argument_list":
            for c in n.named_children:
                value = c.child_by_field_name("value") if c.type == "keyword_argument" else c
                if value is not None:
                    yield value
        elif t in ("assignment", "augmented_assignment"):
            r = n.child_by_field_name("right")
            if r is not None:
                yield r
        elif t == "return_statement":
            yield from n.named_children
        elif t == "subscript":
            yield n
        elif t == "attribute":
            p = n.parent
            if p is None or p.type != "attribute" or p.child_by_field_name("object") != n:
                yield n


def expression_spans(src: Source) -> list[Span]:
    """Expression holes: one-line expression nodes of 3-60 characters with other text on their line."""
    found: set[Span] = set()
    for n in _expression_nodes(src):
        if n.type in _NOT_EXPRESSIONS or n.start_point.row != n.end_point.row:
            continue
        s, e = src.span(n)
        if not EXPRESSION_CHARS[0] <= e - s <= EXPRESSION_CHARS[1] or src.in_string(s):
            continue
        ls = src.text.rfind("\n", 0, s) + 1
        le = src.text.find("\n", e)
        le = len(src.text) if le < 0 else le
        if src.text[ls:s].strip() or src.text[e:le].strip():
            found.add((s, e))
    return sorted(found)


def block_spans(src: Source) -> list[Span]:
    """Block holes: bodies of 1-4 lines that start on a line of their own."""
    out: list[Span] = []
    for n in src.nodes():
        if n.type != "block" or not n.children:
            continue
        rows = n.end_point.row - n.start_point.row + 1
        if not BLOCK_LINES[0] <= rows <= BLOCK_LINES[1]:
            continue
        s, e = src.span(n)
        ls = src.text.rfind("\n", 0, s) + 1
        if src.text[ls:s].strip():  # a body on its header's line (``if x: return``)
            continue
        body = src.text[s:e].rstrip()
        if body:
            out.append((s, s + len(body)))
    return out


SPANS: dict[str, Callable[[Source], list[Span]]] = {
    "line": line_spans, "expression": expression_spans, "block": block_spans}


# ---------------------------------------------------------------------------------------------------- cutting
@dataclass(frozen=True)
class Cut:
    """One hole: ``document`` is the file without ``hole``, which sat at ``offset``."""

    kind: str
    document: str
    offset: int
    hole: str

    def restore(self) -> str:
        return self.document[: self.offset] + self.hole + self.document[self.offset :]


def cut(text: str, kind: str, span: Span) -> Cut:
    s, e = span
    return Cut(kind, text[:s] + text[e:], s, text[s:e])


def draw(pools: dict[str, list[tuple[str, Span]]], n: int, rng: random.Random) -> list[tuple[str, str, Span]]:
    """Up to ``n`` (group, key, span) draws without replacement, the groups (packages) taking turns in name order;
    each group's pool is shuffled by ``rng`` first. ``pools``: group -> [(key, span)]."""
    order = {}
    for g in sorted(pools):
        pool = list(pools[g])
        rng.shuffle(pool)
        order[g] = pool
    out: list[tuple[str, str, Span]] = []
    for turn in itertools.zip_longest(*order.values()):
        for g, item in zip(order, turn, strict=True):
            if item is not None and len(out) < n:
                out.append((g, item[0], item[1]))
    return out


def make_cases(split: str, packages: dict[str, dict[str, str]], versions: dict[str, str], per_kind: int,
               related: int = 8, seed: int = 0) -> list[dict[str, object]]:
    """A split's cases: ``per_kind`` holes of each kind (``draw``: the packages take turns; the generator is
    seeded by ``seed``, the split and the kind) from the files of ``packages`` (package -> path -> text) that
    both tree-sitter (no ERROR or MISSING node) and Python's parser accept, each with its ``related`` files
    (``related_files``, among those files). Cases are dicts with the fields of ``benchmarks/real_code_set.py``'s
    JSON lines."""
    clean = {name: {p: t for p, t in sorted(files.items()) if usable(t)} for name, files in packages.items()}
    parsed = {(name, p): Source.parse(t) for name, files in clean.items() for p, t in files.items()}
    cases: list[dict[str, object]] = []
    for kind in KINDS:
        pools = {name: [(p, span) for p in files for span in SPANS[kind](parsed[name, p])]
                 for name, files in clean.items()}
        for i, (name, path, span) in enumerate(draw(pools, per_kind, random.Random(f"{seed}-{split}-{kind}"))):
            c = cut(clean[name][path], kind, span)
            others = {p: t for p, t in clean[name].items() if p != path}
            cases.append({"id": f"{split}-{kind}-{i:03d}", "split": split, "package": name,
                          "version": versions.get(name, ""), "path": path, "kind": kind, "document": c.document,
                          "offset": c.offset, "hole": c.hole, "line": c.document.count("\n", 0, c.offset),
                          "related": related_files(c.document, others, limit=related) if related else []})
    return cases


def usable(text: str) -> bool:
    """Whether holes are cut from ``text``: tree-sitter parses it without an error and so does Python."""
    return Source.parse(text).clean and parses(text)


def identifiers(text: str) -> set[str]:
    return set(_IDENT.findall(text))


def related_files(document: str, others: dict[str, str], limit: int = 8, max_chars: int = 300_000) -> list[str]:
    """The keys of ``others`` (path -> text) sharing the most identifiers with ``document`` (ties: path order),
    at most ``limit`` files and ``max_chars`` characters together (a file that would pass it is skipped)."""
    ids = identifiers(document)
    ranked = sorted(others, key=lambda p: (-len(ids & identifiers(others[p])), p))
    out: list[str] = []
    total = 0
    for p in ranked:
        if len(out) == limit:
            break
        if total + len(others[p]) <= max_chars:
            out.append(p)
            total += len(others[p])
    return out


# ---------------------------------------------------------------------------------------------------- baseline
def common_prefix(a: str, i: int, b: str, j: int, cap: int = CONTEXT_CAP) -> int:
    """Length of the common prefix of ``a[i:]`` and ``b[j:]``, at most ``cap`` (slice comparisons, bisected)."""
    n = min(len(a) - i, len(b) - j, cap)
    if n <= 0 or a[i] != b[j]:
        return 0
    if a[i : i + n] == b[j : j + n]:
        return n
    lo, hi = 1, n  # a[i:i+lo] == b[j:j+lo]; a[i:i+hi] != b[j:j+hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[i : i + mid] == b[j : j + mid]:
            lo = mid
        else:
            hi = mid
    return lo


def common_suffix(a: str, i: int, b: str, j: int, cap: int = CONTEXT_CAP) -> int:
    """Length of the common suffix of ``a[:i]`` and ``b[:j]``, at most ``cap``."""
    n = min(i, j, cap)
    if n <= 0 or a[i - 1] != b[j - 1]:
        return 0
    if a[i - n : i] == b[j - n : j]:
        return n
    lo, hi = 1, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[i - mid : i] == b[j - mid : j]:
            lo = mid
        else:
            hi = mid
    return lo


def _column(text: str, offset: int) -> int:
    return offset - (text.rfind("\n", 0, offset) + 1)


@dataclass(frozen=True)
class Copy:
    """The baseline's pick: the text it fills with, where it came from (-1: the document; else the index of the
    related file) and its score."""

    text: str
    source: int
    start: int
    score: int


def copy_fill(kind: str, document: str, offset: int, related: Sequence[str] = (),
              parse: Callable[[str], Source] = Source.parse) -> Copy | None:
    """The copy baseline's fill for a hole of ``kind`` at ``offset`` of ``document`` (None: no candidate)."""
    spans = SPANS[kind]
    best: Copy | None = None
    for k, text in enumerate([document, *related]):
        src = parse(text)
        for s, e in spans(src):
            if k == 0 and s <= offset <= e:
                continue
            score = common_suffix(text, s, document, offset) + common_prefix(text, e, document, offset)
            if best is None or score > best.score:
                best = Copy(text[s:e], k - 1, s, score)
    if best is not None and kind == "block":
        text = document if best.source < 0 else related[best.source]
        best = Copy(reindent(best.text, _column(document, offset) - _column(text, best.start)), best.source,
                    best.start, best.score)
    return best
