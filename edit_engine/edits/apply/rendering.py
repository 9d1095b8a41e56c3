"""The entry points and the merged text: ``merge`` and ``stream``.

Both take the original, the update, a language (or ``auto``: ``guess_language``) and an optional ``should_stop``.
The texts are checked (size, valid Unicode) and split into lines, and ``_plan`` runs the stages over them: the
update into chunks (``chunks``), each chunk's definitions (``definitions.analyse``), each chunk's place
(``placing``: first each alone, then in order between the chunks placed in sequence). ``_render`` writes the
original with the first k chunks put in their places, in the original's line ends; ``merge`` gives the
``ApplyResult`` (the text, a ``Placement`` per chunk, the segments, the time) and ``stream``
a ``Pass`` per chunk placed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from edit_engine.edits import budget
from edit_engine.edits.apply.chunks import Chunk, split_update
from edit_engine.edits.apply.definitions import analyse
from edit_engine.edits.apply.placing import (
    Guard,
    Spot,
    best_chain,
    decide,
    insert,
    place,
    refuse_dropping,
)
from edit_engine.edits.apply.source import Source, broken_line, indent_width, norm
from edit_engine.engine.results import MAX_DOCUMENT_CHARS, Pass
from edit_engine.syntax import trees as syntax

KINDS = ("definition", "lines", "inserted", "ambiguous", "whole")
MAX_CHUNKS = 1_000  # chunks an update may hold (each is placed against the others: more is a whole-file rewrite)
STREAM_PASSES = 32  # passes ``stream`` yields at most (each renders the whole file)


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


# ---------------------------------------------------------------------------------------------------- the texts
# In this order on a tie. Not TSX: its grammar loops on some Python (each parse would run to its deadline),
# and JSX parses as JavaScript.
GUESSED = ("python", "javascript", "typescript", "rust", "go")
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
    """Raise ValueError for a text over the size limit (``MAX_DOCUMENT_CHARS``, the engine's) or not valid
    Unicode."""
    limit = MAX_DOCUMENT_CHARS
    if len(text) > limit:
        raise ValueError(f"the {name} has {len(text):,} characters, over the limit of {limit:,}")
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


# ---------------------------------------------------------------------------------------------------- merging
@dataclass
class _Plan:
    src: Source
    chunks: list[Chunk]
    spots: list[Spot]
    eol: str
    final: bool
    language: str
    text: str = ""  # the merged text, and its segments (``_render``), once every chunk is placed
    segments: tuple[tuple[int, str], ...] = ()


def _plan(original: str, update: str, language: str, should_stop: Callable[[], bool] | None = None) -> _Plan:
    """Every chunk placed, within the work budget (``budget.limit``). Raises ValueError (``OverBudget``
    past the budget) and ``budget.Stopped`` when ``should_stop`` says so."""
    _check("original", original)
    _check("update", update)
    try:
        with budget.scope(budget.limit(original, update), "apply", should_stop):
            plan = _place_all(original, update, language)
    except RecursionError:
        raise ValueError("the original or the update nests too deeply to analyse") from None
    plan.text, plan.segments = _render(plan)
    if plan.text == original:
        raise ValueError("the update changes nothing: each of its chunks already stands in the original as it is. "
                         "If it deletes lines, its context lines also stand side by side elsewhere: show a line or "
                         "two more around the deletion")
    _check_doubled(plan)
    _check_parse(original, plan)
    return plan


# Header lines by their words, not by the parsed definitions: a chunk cut inside a multi-line header, or a header
# quoted in a docstring, is doubled all the same (the parsed definitions caught 9 fewer on the development set).
_HEADER = re.compile(r"^\s*(?:(?:pub(?:\([a-z]+\))?|export|async|static|public|private|protected)\s+)*"
                     r"(?:def|class|fn|func|function|impl|struct|enum|trait|interface)\b")


def _check_doubled(plan: _Plan) -> None:
    """Raise ValueError when a chunk's placement leaves a definition header written twice side by side: the
    chunk holds it once and so do the original lines kept just beside it (a few rows away, in the same block),
    once. The chunk then rewrote a definition but went beside it instead of over it."""
    if all(s.kind == "whole" for s in plan.spots):
        return
    src = plan.src
    for ch, s in zip(plan.chunks, plan.spots, strict=True):
        heads = [x for x in dict.fromkeys(s.lines) if _HEADER.match(x)]  # in the chunk's order
        reach = len(s.lines) + 2
        for x in heads:
            if src.lines.count(x) != 1 or ch.lines.count(x) != 1:
                continue
            r, ind, at = src.lines.index(x), indent_width(x), s.lines.index(x)
            if s.a <= r < s.b:
                continue  # the span it replaces holds it
            between = src.lines[r + 1 : s.a] + s.lines[:at] if r < s.a else s.lines[at + 1 :] + src.lines[s.b : r]
            if len(between) > reach or any(y.strip() and indent_width(y) < ind for y in between):
                continue  # far, or in another block (an if/else defining it each way)
            raise ValueError(f"chunk {ch.index + 1} of the update (lines {ch.start + 1}-{ch.start + len(ch.lines)})"
                             f" would leave {x.strip()[:60]!r} twice, its own copy beside the original's: it "
                             "rewrites that definition but does not anchor over it; nothing was changed (show "
                             "a line or two more around the change)")


def _check_parse(original: str, plan: _Plan) -> None:
    """Raise ValueError when the original parses and the merged file does not (Python's parser for Python,
    tree-sitter for the others): a chunk placed beside the wrong lines leaves code cut apart or doubled, and a
    refusal (show more lines around the change) is better than a file broken unseen. An update without markers
    (taken literally) is not checked."""
    if all(s.kind == "whole" for s in plan.spots):
        return
    if broken_line(original, plan.language) is not None:
        return
    where = broken_line(plan.text, plan.language)
    if where is not None:
        raise ValueError(f"the merged file would not parse (line {where}) where the original does: a chunk may "
                         "have gone beside the wrong lines; nothing was changed (show a line or two more around the "
                         "change)")


def _place_all(original: str, update: str, language: str) -> _Plan:
    if language == "auto":
        language = guess_language(original or update)
    eol = "\r\n" if "\r\n" in original and original.count("\r\n") == original.count("\n") else "\n"
    olines, final = _split(original)
    ulines, ufinal = _split(update)
    chunks, markers = split_update(ulines)
    if not chunks:
        raise ValueError("the update holds only marker lines (or nothing): there is no code to apply")
    if len(chunks) > MAX_CHUNKS:
        raise ValueError(f"the update has {len(chunks):,} chunks between its markers, over the limit of "
                         f"{MAX_CHUNKS:,}: apply it in parts")
    budget.spend(len(olines) + len(ulines))
    src = Source(olines, language)
    for ch in chunks:
        analyse(ch, language)
    names = {d.name for ch in chunks for d in ch.defs}
    guard = Guard(src, frozenset(norm(x) for x in ulines), markers > 0)
    first = [place(src, ch, 0, src.n, True, names, k == len(chunks) - 1, guard) for k, ch in enumerate(chunks)]
    spots = best_chain([s if isinstance(s, Spot) else None for s in first])
    for k, ch in enumerate(chunks):
        if spots[k] is not None:
            continue
        lo = max((s.b for s in spots[:k] if s is not None), default=0)
        hi = min((s.a for s in spots[k + 1 :] if s is not None), default=src.n)
        got = place(src, ch, lo, hi, False, names, k == len(chunks) - 1, guard)
        if isinstance(got, list):
            got = decide(src, ch, got)
        if got is None and ch.units:
            got = insert(src, ch, lo, hi)
        if got is None and markers == 0:
            got = Spot(0, src.n, ch.lines, "whole", "no marker and nothing matches: the update is the file")
        if got is None:
            refuse_dropping(src, ch, lo, hi, names, k == len(chunks) - 1, guard)
            raise ValueError(f"chunk {k + 1} of the update (lines {ch.start + 1}-{ch.start + len(ch.lines)}, "
                             f"starting {ch.lines[0].strip()[:60]!r}) cannot be placed: none of its lines match the "
                             "original between its neighbours and it defines nothing new")
        spots[k] = got
    placed = [s for s in spots if s is not None]
    if placed[-1].b == src.n and not chunks[-1].marker_after:  # the update ends the file: its last newline too
        final = ufinal
    return _Plan(src, chunks, placed, eol, final, language)


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


def merge(original: str, update: str, language: str = "python",
          should_stop: Callable[[], bool] | None = None) -> ApplyResult:
    """Merge ``update`` (a snippet with ``... existing code ...`` markers) into ``original`` (the package doc
    says how). ``language``: a grammar name or LSP id, or ``auto`` (``guess_language``).
    Raises ValueError: a text over ``MAX_DOCUMENT_CHARS`` or not valid Unicode, an update of markers only, a
    chunk that cannot be placed or fits several places alike, an update needing more work than ``budget.limit``. ``should_stop``: read
    between steps; when it says so, ``budget.Stopped`` is raised."""
    t0 = time.perf_counter()
    plan = _plan(original, update, language, should_stop)
    return ApplyResult(plan.text, _placements(plan), (time.perf_counter() - t0) * 1e3, plan.segments)


def stream(original: str, update: str, language: str = "python",
           should_stop: Callable[[], bool] | None = None) -> Iterator[Pass]:
    """``merge`` as the engine's streams go: a ``Pass`` per chunk (per group of chunks past ``STREAM_PASSES``),
    its text the file with that many chunks placed (``masked``: chunks still to place); the last is final and
    its text is ``merge``'s."""
    plan = _plan(original, update, language, should_stop)
    total = len(plan.spots)
    step = -(-total // STREAM_PASSES)
    shown = [k for k in range(1, total + 1) if k % step == 0 or k == total]
    for n, k in enumerate(shown):
        text = plan.text if k == total else _render(plan, k)[0]
        yield Pass(n, text, total - k, k == total, 0, 0, len(original), "complete" if k == total else "")
