"""Next edit: layout rules, the formatter's next change when the history shows the user laying code out as it does.

A change that keeps its tokens (commas aside) and only lays them out anew, a long call wrapped one argument per
line or a short one joined, is *layout*. When such a change of the history is exactly what black writes for its
removed rows (Python; the removed rows dedented and formatted with the width they had, for a line length of
``LINE_LENGTHS``, the first that fits), the user is formatting the file the way black does: the rule's edits are
black's other changes of the same kind. The document is formatted block by block at that line length (each
top-level statement or definition; inside a class or definition of over ``MAX_BLOCK_ROWS`` rows, each statement
of its body, dedented): a run of rows black writes otherwise is an edit when it too only lays out the same
tokens (black's other changes, quotes and blank lines, are not what the history showed). A block is formatted
once for all the requests that see it unchanged (``formatted``, a cache of ``CACHED_BLOCKS``), so the block being
typed in is the one formatted again. The blocks are read from the cursor on (a change behind it is not proposed),
until ``MAX_BLOCKS_FOUND`` of them have layout edits; a request formats new blocks for at most ``FORMAT_S`` (a
long file is formatted over a few requests).

A rule is a ``sites.Rule`` of kind ``layout``, the weakest: where another kind's edit overlaps, that one wins. A
block black cannot read (a syntax error, a string whose rows stand left of the block) gets no layout edits, nor
does a block over ``MAX_BLOCK_CHARS``. The rule does not carry to other documents (each file is formatted when it
is touched). Only a layout change with rows joined or split shows the formatter: spacing alone on a row (two
blanks before a comment) is what any tool or person writes.
"""

from __future__ import annotations

import difflib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from edit_engine.edits import budget
from edit_engine.edits.patterns import Analysis, indent_of, token_texts
from edit_engine.edits.sites import Edit, Region, Rule

LINE_LENGTHS = (88, 79, 100, 120)  # black's default first, then the other common settings
MAX_BLOCK_ROWS = 150  # a longer class or definition is formatted statement by statement of its body
MAX_BLOCK_CHARS = 20_000  # a longer block is not formatted (black reads about 1,000 rows in 0.2 s here)
MAX_DEPTH = 100  # brackets open at once in a block that is formatted (black's time grows with the square of it:
#                  900 nested calls take 1.1 s; code people write nests a few)
CACHED_BLOCKS = 512  # blocks formatted kept (at most 2 * MAX_BLOCK_CHARS characters each, 20 MB in all)
FORMAT_S = 0.5  # seconds a request may spend formatting blocks not yet formatted; the others wait for the next
MAX_BLOCKS_FOUND = 4  # blocks with layout edits sought after the cursor (the first hunk there is the proposal)
MAX_SHOWN = 4  # the most recent layout changes tried as examples


def layout_only(removed: tuple[str, ...] | list[str], added: tuple[str, ...] | list[str]) -> bool:
    """Rows replaced by rows of the same tokens (commas aside: a trailing comma comes and goes with a wrap),
    laid out anew; blank rows alone are not a layout change."""
    old, new = _tokens(removed), _tokens(added)
    return bool(old) and old == new and [x.strip() for x in removed] != [x.strip() for x in added]


def _tokens(rows: tuple[str, ...] | list[str]) -> list[str]:
    return [t for x in rows for t in token_texts(x) if t != ","]


def _black(text: str, line_length: int) -> str | None:
    """``text`` as black formats it, quotes left as they are (a change of quotes is no layout), or None where
    black cannot read it."""
    import black  # imported when a layout rule is tried: most requests never need it

    try:
        return black.format_str(text, mode=black.Mode(line_length=line_length, string_normalization=False))
    except Exception:  # black's errors are its own classes, one per way the source fails to parse
        return None


def _shown_length(removed: tuple[str, ...], added: tuple[str, ...]) -> int | None:
    """The line length at which black writes ``added`` for ``removed`` (formatted as a block at the first
    row's indentation, ``formatted``), or None."""
    ind = len(indent_of(removed[0]))
    budget.spend(sum(map(len, removed)))
    for n in LINE_LENGTHS:
        if formatted(removed, ind, n) == added:
            return n
    return None


def infer(a: Analysis, language: str) -> list[Rule]:
    """A layout rule when one of the history's recent layout changes that join or split rows is black's, at
    the line length it shows."""
    if language != "python":
        return []
    shown = [c for c in a.changes if c.removed and c.added and len(c.removed) != len(c.added)
             and layout_only(c.removed, c.added)][-MAX_SHOWN:]
    for c in reversed(shown):
        n = _shown_length(c.removed, c.added)
        if n is not None:
            return [LayoutRule(n)]
    return []


@dataclass(frozen=True)
class LayoutRule(Rule):
    """The runs of rows black lays out anew (at ``line_length``), each with black's rows."""

    kind: ClassVar[str] = "layout"
    line_length: int
    order: int = 0

    def edits(self, r: Region) -> list[Edit]:
        if r.doc.tree is None or "\r" in r.text:
            return []
        out: list[Edit] = []
        until = time.perf_counter() + FORMAT_S
        found = 0
        for first, stop, indent in _blocks(r, r.doc.tree.root_node, 0, r.row_of(r.cursor)):
            if found >= MAX_BLOCKS_FOUND:
                break
            budget.spend(stop - first)
            mine = tuple(r.line(k) for k in range(first, stop))
            got = formatted(mine, indent, self.line_length, time.perf_counter() < until)
            if got is None:
                continue
            before = len(out)
            for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, mine, got, autojunk=False).get_opcodes():
                if tag == "replace" and layout_only(mine[i1:i2], got[j1:j2]):
                    start, end = r.starts[first + i1], r.line_end(first + i2 - 1)
                    out.append(Edit(start, end, "\n".join(got[j1:j2]), self.kind, self.order))
            found += len(out) > before
        return out


def _blocks(r: Region, node: Any, indent: int, row: int) -> Iterator[tuple[int, int, int]]:
    """Rows ``[first, stop)`` of the statements below ``node`` that meet the region and end at row ``row`` or
    after it, in order, with their indentation: a statement whole, or a long class or definition by the
    statements of its body."""
    for child in node.named_children:
        first, stop = child.start_point[0], child.end_point[0] + 1
        if stop <= max(r.first, row) or first >= r.last or child.type == "comment":
            continue
        body = child.child_by_field_name("body") if child.type != "decorated_definition" else \
            (child.child_by_field_name("definition") or child).child_by_field_name("body")
        if stop - first > MAX_BLOCK_ROWS and body is not None and body.type == "block":
            inner = body.named_children[0].start_point[1] if body.named_children else indent
            yield from _blocks(r, body, inner, row)
        else:
            yield first, stop, indent


_cache: OrderedDict[tuple[tuple[str, ...], int, int], tuple[str, ...] | None] = OrderedDict()
_lock = threading.Lock()


def formatted(rows: tuple[str, ...], indent: int, line_length: int, new: bool = True) -> tuple[str, ...] | None:
    """``rows`` (one statement, indented by ``indent``) as black writes them, from the cache, else (``new``)
    formatted and kept; None: not formatted, black cannot read them, a row stands left of the indentation (in a
    string) or is indented with tabs, or the block is over ``MAX_BLOCK_CHARS`` or nests over ``MAX_DEPTH``
    brackets."""
    key = (rows, indent, line_length)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    if not new:
        return None
    got = _format(rows, indent, line_length)
    with _lock:
        _cache[key] = got
        while len(_cache) > CACHED_BLOCKS:
            _cache.popitem(last=False)
    return got


def _format(rows: tuple[str, ...], indent: int, line_length: int) -> tuple[str, ...] | None:
    if sum(len(x) + 1 for x in rows) > MAX_BLOCK_CHARS or line_length - indent <= 20 or \
            any(x.strip() and (len(x) - len(x.lstrip()) < indent or "\t" in x[: len(x) - len(x.lstrip())])
                for x in rows):
        return None  # too long, too deep, or rows left of the block or indented with tabs (black writes spaces)
    if _depth(rows) > MAX_DEPTH:
        return None
    got = _black("\n".join(x[indent:] for x in rows) + "\n", line_length - indent)
    if got is None:
        return None
    return tuple(" " * indent + x if x.strip() else x for x in got.rstrip("\n").split("\n"))


def _depth(rows: tuple[str, ...]) -> int:
    """The most brackets open at once in ``rows`` (strings not told apart: an upper bound is enough)."""
    depth = most = 0
    for ch in "".join(rows):
        if ch in "([{":
            depth += 1
            most = max(most, depth)
        elif ch in ")]}":
            depth -= 1
    return most
