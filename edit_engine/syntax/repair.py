"""Syntax repair: find what a fill broke, and choose the canvas slots to denoise again.

After the last pass the engine parses prefix + fill + suffix (incrementally, from the document's tree). ERROR and
MISSING nodes the document did not have (same kind at the same place once the edit's shift is applied) are the
fill's. ``check`` returns them as character ranges of the fill; ``remask`` turns them into a partly decided canvas
for ``sampler.denoise(..., init=...)``: the slots whose text overlaps a broken node, plus the least confident
slots around each, are masked again; the rest are kept. The engine runs at most ``MAX_ROUNDS`` such rounds.

When the rounds run out and the best fill still breaks the parse, ``salvage`` cuts it back to its longest prefix
that breaks nothing and still holds code (whole lines first, then at token boundaries within the first broken
line): an editor should not insert an edit that breaks code that parsed, when part of it does not.
"""

from __future__ import annotations

import ast
import difflib
import re
import sys
import time
import warnings
from dataclasses import dataclass

import torch
import tree_sitter as ts

from edit_engine.syntax.lru import BoundedLRU
from edit_engine.syntax.trees import Document, broken_nodes

SALVAGE_CHECKS = 16  # at most this many cut points are parsed (longest first) when salvaging a broken fill,
SALVAGE_COMPILES = 4  # and at most this many of the tree-sitter-clean ones compiled (Python: the whole text)
SALVAGE_MS = 25.0  # and no new parse starts after this long (a large document costs ~10-35 ms a parse)
MAX_ROUNDS = 2  # each round costs one scoring pass plus a few denoising passes
WINDOW = 4  # slots either side of a broken range in which the least confident are re-masked too
AROUND = 2  # that many of them
SHARE = 0.5  # never re-mask more than this share of the fill's real slots
ELSEWHERE = 0.25  # an error outside the fill (an unclosed bracket breaking the suffix): re-mask this share


@dataclass(frozen=True)
class Check:
    errors: int  # broken nodes the fill introduced
    ranges: list[tuple[int, int]]  # their overlap with the fill, as character ranges of the fill
    elsewhere: bool  # some introduced error lies outside the fill


def _key(n: ts.Node, old_end: int, delta: int) -> tuple[str, bool, int, int]:
    """A broken node of the old tree as it would sit in the new text (bytes from ``old_end`` on shift)."""
    s, e = n.start_byte, n.end_byte
    return n.type, n.is_missing, s + delta if s >= old_end else s, e + delta if e >= old_end else e


# ``python_error``'s answers by text: a request checks several fills in one document, and each check compiles
# the document's text without the fill as well as with it. The texts kept (they are the keys) take at most
# ``ERRORS_MAX_BYTES``: a few of the compile windows of the largest documents.
ERRORS_MAX_ENTRIES = 8
ERRORS_MAX_BYTES = 16 << 20
_ERRORS: BoundedLRU[str, tuple[int, int] | None] = BoundedLRU(ERRORS_MAX_ENTRIES, ERRORS_MAX_BYTES,
                                                              "compile checks")
_UNKNOWN = (-1, -1)


def python_error(text: str) -> tuple[int, int] | None:
    """Character range of the line where ``ast.parse`` first fails (None if it parses). tree-sitter-python
    accepts wrong indentation; Python does not, so for Python the check asks both. Answers are kept by text
    (``ERRORS_MAX_ENTRIES``, ``ERRORS_MAX_BYTES``)."""
    got = _ERRORS.get(text, _UNKNOWN)
    if got is not _UNKNOWN:
        return got
    found = _python_error(text)
    _ERRORS.put(text, found, sys.getsizeof(text) + 64)
    return found


def _python_error(text: str) -> tuple[int, int] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning for odd escapes in the user's code
            ast.parse(text)
    except SyntaxError as e:
        line = max(1, e.lineno or 1)
        s = 0
        for _ in range(line - 1):
            j = text.find("\n", s)
            if j < 0:
                break
            s = j + 1
        j = text.find("\n", s)
        return s, len(text) if j < 0 else j
    except (ValueError, RecursionError, MemoryError):  # NUL bytes, absurd nesting: no verdict
        return None
    return None


COMPILE_WINDOW_CHARS = 32_768  # a larger document is compiled only around the fill (``_window``)


def _window(doc: Document, start: int, end: int) -> tuple[int, int]:
    """Where Python's compile check looks: the whole text, or in a large document the top-level statements
    the span ``[start, end)`` touches, whole lines (``ast.parse`` holds the interpreter lock, a second for
    500 k characters; an error a fill makes shows in the statements around it)."""
    text = doc.text
    if len(text) <= COMPILE_WINDOW_CHARS or doc.tree is None:
        return 0, len(text)
    a, b = start, end
    sb = len(text[:start].encode("utf-8", "surrogatepass"))
    eb = sb + len(text[start:end].encode("utf-8", "surrogatepass"))
    touching = [n for n in doc.tree.root_node.children if n.end_byte >= sb and n.start_byte <= eb]
    if touching:
        a, b = min(a, doc.char(touching[0].start_byte)), max(b, doc.char(touching[-1].end_byte))
    a = text.rfind("\n", 0, a) + 1
    nl = text.find("\n", b)
    return a, len(text) if nl < 0 else nl


def _compile_check(doc: Document, start: int, end: int, fill: str) -> tuple[int, int] | None:
    """A Python error the fill introduced, as a character range of the new text (None if none)."""
    a, b = _window(doc, start, end)
    new = python_error(doc.text[a:start] + fill + doc.text[end:b])
    if new is None:
        return None
    new = (new[0] + a, new[1] + a)
    old = python_error(doc.text[a:b])
    if old is not None:
        old = (old[0] + a, old[1] + a)
        delta = len(fill) - (end - start)
        shifted = (old[0] + delta if old[0] >= end else old[0], old[1] + delta if old[1] >= end else old[1])
        if shifted == new:
            return None
    return new


def check(doc: Document, start: int, end: int, fill: str, compile_check: bool = True) -> Check:
    """What replacing ``doc.text[start:end]`` by ``fill`` breaks (nothing for a document without a grammar).
    ``compile_check=False``: the tree-sitter parse only (incremental, so cheap in a large document; Python's own
    compile check parses the text, or in a large document the statements around the fill)."""
    tree = doc.parse_with(start, end, fill)
    if tree is None or doc.tree is None:
        return Check(0, [], False)
    extra = (_compile_check(doc, start, end, fill)
             if compile_check and doc.grammar.compile_check == "python" else None)
    more = Check(0, [], False)
    if extra is not None:  # the broken line, clipped to the fill; outside it counts as "elsewhere"
        a, b = max(extra[0], start) - start, min(extra[1], start + len(fill)) - start
        more = Check(1, [(a, b)] if a < b else [], a >= b)
    if not tree.root_node.has_error:
        return more
    sb = len(doc.text[:start].encode("utf-8", "surrogatepass"))
    old_eb = sb + len(doc.text[start:end].encode("utf-8", "surrogatepass"))
    fill_b = fill.encode("utf-8", "surrogatepass")
    delta = len(fill_b) - (old_eb - sb)
    had = {_key(n, old_eb, delta) for n in broken_nodes(doc.tree)}
    ranges: list[tuple[int, int]] = []
    errors, elsewhere = 0, False
    for n in broken_nodes(tree):
        if (n.type, n.is_missing, n.start_byte, n.end_byte) in had:
            continue
        errors += 1
        s, e = n.start_byte, n.end_byte
        if n.is_missing:  # zero width: the slots either side
            s, e = s - 1, e + 1
        s, e = max(s, sb), min(e, sb + len(fill_b))
        if s >= e and not (n.is_missing and sb <= n.start_byte <= sb + len(fill_b)):
            elsewhere = True
            continue
        cs = len(fill_b[: s - sb].decode("utf-8", "ignore"))
        ce = len(fill_b[: max(e, s) - sb].decode("utf-8", "ignore"))
        ranges.append((cs, max(ce, cs + 1)))
    return Check(errors + more.errors, ranges + more.ranges, elsewhere or more.elsewhere)


def to_raw(ranges: list[tuple[int, int]], raw: str, fill: str) -> list[tuple[int, int]]:
    """Map character ranges of the finished ``fill`` back to the model's ``raw`` text (post-processing cuts,
    re-indents and adds text; the characters they share are aligned with difflib)."""
    if raw == fill:
        return ranges
    blocks = difflib.SequenceMatcher(None, fill, raw, autojunk=False).get_matching_blocks()
    out = []
    for a, b in ranges:
        hits = [r + (i - f) for f, r, n in blocks for i in range(max(a, f), min(b, f + n))]
        if hits:
            out.append((min(hits), max(hits) + 1))
            continue
        # Nothing shared (the range is text post-processing added): the raw text nearest before it.
        near = [r + n for f, r, n in blocks if f + n <= a]
        p = max(near) if near else 0
        out.append((max(0, p - 1), min(len(raw), p + 1)))
    return out


def slot_spans(pieces: list[str]) -> list[tuple[int, int]]:
    """Character range of each slot's text in the concatenated raw fill."""
    spans, pos = [], 0
    for p in pieces:
        spans.append((pos, pos + len(p)))
        pos += len(p)
    return spans


def remask(canvas: torch.Tensor, conf: torch.Tensor, spans: list[tuple[int, int]], raw_ranges: list[tuple[int, int]],
           elsewhere: bool, real: torch.Tensor, mask_id: int) -> torch.Tensor:
    """A copy of ``canvas`` (C,) with the slots chosen for another round masked.

    ``conf`` (C,): the model's probability of each slot's token; ``spans``: each slot's character range in the raw
    fill (empty for pads); ``real`` (C,) bool: slots holding a real token.
    """
    n_real = int(real.sum())
    if n_real == 0:
        return canvas.clone()
    limit = max(1, int(SHARE * n_real))
    conf = conf.float().masked_fill(~real, float("inf"))
    chosen: set[int] = set()
    for a, b in raw_ranges:
        inside = [j for j, (s, e) in enumerate(spans) if real[j] and s < b and e > a]
        if not inside:
            continue
        lo, hi = max(0, inside[0] - WINDOW), min(len(spans), inside[-1] + WINDOW + 1)
        if len(inside) > limit:  # a large ERROR node: only its least confident slots
            inside = sorted(inside, key=lambda j: float(conf[j]))[:limit]
        chosen.update(inside)
        around = [j for j in range(lo, hi) if j not in chosen and bool(real[j])]
        chosen.update(sorted(around, key=lambda j: float(conf[j]))[:AROUND])
    if elsewhere or not chosen:
        k = max(1, int(ELSEWHERE * n_real))
        chosen.update(int(j) for j in torch.topk(-conf, min(k, n_real)).indices)
    if len(chosen) > limit:
        chosen = set(sorted(chosen, key=lambda j: float(conf[j]))[:limit])
    out = canvas.clone()
    out[sorted(chosen)] = mask_id
    return out


def least_likely(conf: torch.Tensor, real: torch.Tensor, share: float) -> torch.Tensor:
    """Bool (C,): the ``share`` (at least one) of real slots with the lowest probability (rewrite mode)."""
    n_real = int(real.sum())
    k = max(1, int(share * n_real)) if n_real else 0
    out = torch.zeros_like(real)
    if k:
        out[torch.topk(-conf.float().masked_fill(~real, float("inf")), k).indices] = True
    return out


_CUT = re.compile(r"\w+|[^\w\s]")  # a word or one punctuation character: the cut points within a line


def _holds_code(text: str, comment: str | None) -> bool:
    """A line that is neither blank nor only a line comment."""
    return any(ln.strip() and not (comment and ln.lstrip().startswith(comment)) for ln in text.splitlines())


def cut_points(body: str) -> list[int]:
    """Where ``salvage`` may cut ``body`` (a fill without its trailing whitespace), longest first: after each
    whole line but the last, and after each word or punctuation character of the first line that is not blank.
    Never ``len(body)`` itself and never 0."""
    lines = [m.end() for m in re.finditer(r"\n", body)]  # offsets just past each newline
    first = re.search(r"[^\s]", body)
    a = body.rfind("\n", 0, first.start()) + 1 if first else 0
    b = body.find("\n", a)
    within = [m.end() for m in _CUT.finditer(body, a, b if b >= 0 else len(body))]
    return sorted({p for p in lines + within if 0 < p < len(body)}, reverse=True)


def salvage(doc: Document, start: int, end: int, fill: str, limit: int = SALVAGE_CHECKS,
            budget_ms: float = SALVAGE_MS, close: str = "") -> str | None:
    """The longest prefix of ``fill`` whose replacement of ``doc.text[start:end]`` breaks nothing in the parse
    (``check`` finds no error) and that still holds code, keeping the fill's trailing whitespace (its line
    break); None when no such prefix is found within ``limit`` tree-sitter parses (``SALVAGE_COMPILES`` of them
    compiled, none started after ``budget_ms``). Multi-line fills are cut at line ends before anything within
    their first line of code; a single-line fill at the ends of its words and punctuation. ``close``: the
    plan's ``close`` (a header's ":"), which every cut keeps at its end."""
    body = fill.rstrip()
    tail = fill[len(body):]
    if close and body.endswith(close):
        body, tail = body[: len(body) - len(close)].rstrip(), close + tail
    comment = doc.grammar.line_comment
    tried = compiled = 0
    t0 = time.perf_counter()
    full = doc.grammar.compile_check == "python"
    for p in cut_points(body):  # longest first: the later lines' ends come before the first line's cuts
        head = body[:p].rstrip()
        if not _holds_code(head, comment):
            continue
        if tried >= limit or (time.perf_counter() - t0) * 1e3 > budget_ms:
            break
        tried += 1
        cand = head + tail
        if check(doc, start, end, cand, compile_check=False).errors:
            continue
        if not full or check(doc, start, end, cand).errors == 0:
            return cand
        compiled += 1
        if compiled >= SALVAGE_COMPILES:
            break
    return None
