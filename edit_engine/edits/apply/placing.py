"""Stages 4 and 5, placing: where each chunk goes (its ``Spot``: the original rows it replaces, its lines).

``place`` takes a chunk, the ``Source``, a window of original rows and the span guard, and gives a spot,
several candidate spots (ambiguous) or None: around its matched definitions (``definitions.def_anchor``), or
by its first and last context lines (``anchoring``); unmatched lines at its edges become new lines, and a
place that would drop many original lines the update does not show is passed over (``Guard``). Over all the
chunks: ``best_chain`` keeps the placed chunks that follow each other in the file, the others are placed again
between them; ``decide`` ranks an ambiguous chunk's places and takes the one clearly ahead, else refuses;
``insert`` puts a chunk that defines something new beside the
definitions at its level; and ``refuse_dropping`` says why a chunk that only the guard turned down is not
applied.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass

from edit_engine.edits import budget
from edit_engine.edits.apply.anchoring import Ends, back, forward, scan, search_windows, toward
from edit_engine.edits.apply.chunks import Chunk
from edit_engine.edits.apply.definitions import anchor_at, def_anchor, told_apart
from edit_engine.edits.apply.source import Source, indent_width, norm

MAX_CANDIDATES = 16  # ambiguous chunks: candidate places weighed (the first ones after the previous chunk)
# An ambiguous chunk goes to the place most like it only when that place's likeness (difflib ratio with the lines
# it replaces) is ahead of the next one's by this much; else it is refused.
CLEAR_MARGIN = 0.05
# A line of the chunk and the original line it would replace, this alike (difflib ratio), read as one line edited
# (``_edit_elsewhere``).
EDIT_LIKENESS = 0.75


@dataclass
class Spot:
    """Where a chunk goes: ``lines`` replace original rows [a, b)."""

    a: int
    b: int
    lines: list[str]
    kind: str
    note: str = ""
    kept: tuple[tuple[int, int], ...] = ()  # original definitions the chunk rewrites whole (rows [start, end))
    edges: tuple[int, int] = (-1, -1)  # candidate places: the chunk lines its ends were found by


# ---------------------------------------------------------------------------------------------------- the span guard
# A chunk may drop original lines (a deletion, or a rewrite shorter than what it replaces), but a place whose span
# drops far more than the chunk writes is more likely a wrong anchoring (ends matched on common lines far apart)
# than an edit. Dropped: a non-blank original line of the span that appears nowhere in the update (ignoring
# whitespace) and is not inside an original definition the chunk shows whole. The limit: a rewrite condensing
# twice the chunk's own lines, plus one deleted block the size of a small function.
DROP_FLOOR = 16  # original lines a chunk may drop beyond DROP_RATIO times its own
DROP_RATIO = 2


@dataclass(frozen=True)
class Guard:
    """The span check of an update: ``shown`` holds its lines without whitespace; ``active`` is False for an
    update without markers (taken literally: it says what the span becomes)."""

    src: Source
    shown: frozenset[str]
    active: bool = True

    def limit(self, ch: Chunk) -> int:
        return DROP_FLOOR + DROP_RATIO * sum(bool(x.strip()) for x in ch.lines)

    def dropped(self, spot: Spot) -> int:
        """Original lines of the spot's span that nothing in the update keeps."""
        norm, shown = self.src.norm, self.shown
        budget.spend(spot.b - spot.a)
        return sum(1 for r in range(spot.a, spot.b) if norm[r] and norm[r] not in shown
                   and not any(s <= r < e for s, e in spot.kept))

    def cut(self, spot: Spot) -> int | None:
        """The row of an original definition's header that the spot replaces while the spot ends inside that
        definition's body (what follows, the chunk's last line among it, stays), with no line of the spot's like
        it (as indented, the same first word: ``def``, ``class``...) to head that body, and other lines the update
        does not show go with it: the body would join the code before it, which the chunk's lines, found at
        the wrong places, more often mean than an edit does (None: no such row). A header alone between two
        lines shown side by side goes: that deletion is what the update says."""
        src = self.src
        budget.spend(len(src.defs))
        for d in src.defs:
            if d.inner >= spot.b:
                break
            if not spot.a <= d.inner < spot.b - 1 < d.end:
                continue
            header = src.lines[d.inner]
            word, ind = header.split(None, 1)[0], indent_width(header)
            if any(x.strip() and indent_width(x) == ind and x.split(None, 1)[0] == word for x in spot.lines):
                continue
            # Only the header goes, the lines around it shown side by side: the update deletes it, as it says.
            if any(src.norm[r] and src.norm[r] not in self.shown for r in range(spot.a, spot.b) if r != d.inner):
                return d.inner
        return None

    def ok(self, ch: Chunk, spot: Spot) -> bool:
        if not self.active or spot.kind in ("inserted", "whole"):
            return True
        limit = self.limit(ch)
        return (spot.b - spot.a <= limit or self.dropped(spot) <= limit) and self.cut(spot) is None


# ---------------------------------------------------------------------------------------------------- one chunk
def place(src: Source, ch: Chunk, lo: int, hi: int, strict: bool, names: set[str],
           last: bool, guard: Guard) -> Spot | list[Spot] | None:
    """A chunk's place in [lo, hi): a spot, several candidate spots (ambiguous; never when ``strict``), or
    None (nothing anchors it). ``strict``: unique in [lo, hi) only. Places that drop too much of the original
    (``guard``) are passed over."""
    anchors: list[tuple[int, int, int, int, str]] = []
    items = list(ch.items)
    for unit in ch.units:
        got = def_anchor(src, ch, unit, lo, hi, strict, names)
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
    spot = _by_lines(src, view, lo, hi, strict, last, guard)
    if isinstance(spot, Spot) and ch.units:
        # Its definitions that could not be told apart by name, told apart by where its lines were found: each
        # replaces that definition as a whole (the lines alone would keep what the chunk no longer shows).
        found = [(ch.defs[u[0]], told_apart(src, ch, u, spot.a, spot.b)) for u in ch.units]
        if all(j is not None for _, j in found):
            placed = [(d.start, min(d.end, len(ch.lines)), *anchor_at(src, ch, d, src.defs[j]))
                      for d, j in found if j is not None]
            if all(x[2] >= y[3] for y, x in zip(placed, placed[1:], strict=False)):
                try:
                    return _around_defs(src, view, placed, lo, hi, last, guard)
                except ValueError:
                    pass  # its lines beside those definitions drop too much: the lines' own place stands
    return spot


def _next_fits(src: Source, ch: Chunk, i: int, step: int, rows: list[int], stop: int) -> list[int]:
    """Rows of chunk line ``i`` followed (``step`` +1) or preceded (-1) by the chunk's next line, when that line
    is outside its definitions and before ``stop`` (the definition's first or last line); all of them else."""
    k = i + step
    if not (0 <= k < len(ch.lines)) or not ch.items[k] or (k >= stop if step > 0 else k < stop):
        return rows
    budget.spend(len(rows))
    return [r for r in rows if src.same(r + step, ch.lines[k])]


def _around_defs(src: Source, ch: Chunk, anchors: list[tuple[int, int, int, int, str]], lo: int, hi: int,
                 last: bool, guard: Guard) -> Spot:
    """A chunk with anchored definitions: its lines before the first one and after the last one are matched
    on the original just before and after them (the nearest match). When that match would drop too much
    (``guard``), those lines are new lines beside the definitions instead (the head's match given up first);
    when even that drops too much (definitions found far apart), ValueError."""
    cs, oa, ce, ob = anchors[0][0], anchors[0][2], anchors[-1][1], anchors[-1][3]
    head = scan(src, ch, 0, cs, [(lo, oa)], 1)
    tail = scan(src, ch, ce, len(ch.lines), [(ob, hi)], -1)
    note = ", ".join(x[4] for x in anchors)
    kept = tuple((x[2], x[3]) for x in anchors)
    spot = Spot(oa, ob, ch.lines, "definition", note, kept)
    for k, (use_head, use_tail) in enumerate(((True, True), (False, True), (True, False), (False, False))):
        i, a = cs, oa
        if use_head and head.edge >= 0:
            # The nearest row of the edge line where the chunk's next line follows too (a repeated line,
            # ``except ValueError:``, is placed by its neighbour).
            rows = _next_fits(src, ch, head.edge, 1, head.rows, cs) or head.rows
            i, a = back(src, ch, head.edge, rows[-1], 0, lo)
        j, b = ce - 1, ob
        if use_tail and tail.edge >= 0:
            rows = _next_fits(src, ch, tail.edge, -1, tail.rows, ce) or tail.rows
            j, q = forward(src, ch, tail.edge, rows[0], len(ch.lines), hi)
            b = q + 1
        spot = _edges(src, ch, Spot(a, b, list(ch.lines), "definition", note, kept), i, j, last)
        if k:
            spot.note = f"{note}; lines beside them placed as new lines (their match dropped too much)"
        if guard.ok(ch, spot):
            return spot
    raise ValueError(f"chunk {ch.index + 1} of the update (lines {ch.start + 1}-{ch.start + len(ch.lines)}, starting "
                     f"{ch.lines[0].strip()[:60]!r}) is not applied: its definitions ({note}) lie apart in the "
                     f"original, and replacing lines {spot.a + 1}-{spot.b} would drop {guard.dropped(spot)} lines that "
                     "appear nowhere in the update; show the definition around them, or a marker between them")


def _by_lines(src: Source, ch: Chunk, lo: int, hi: int, strict: bool,
              last: bool, guard: Guard) -> Spot | list[Spot] | None:
    """A chunk placed by its first and last context lines: from a line found at a single place, its outermost
    matching lines are placed by their nearest rows; without one, or when that place drops too much of the
    original (``guard``), every place of its first line that does not is a candidate (ambiguous)."""
    n = len(ch.lines)
    windows = search_windows(src, ch, lo, hi, strict)
    head, tail = scan(src, ch, 0, n, windows, 1), scan(src, ch, 0, n, windows, -1)
    if head.edge < 0:
        return None
    if head.unique is not None and tail.unique is not None:
        i, p = toward(src, ch, head, lo, hi, 1, 0, n)
        j, q = toward(src, ch, tail, lo, hi, -1, 0, n)
        if p == q and i < j and head.unique[1] > tail.unique[1]:
            # Two of the chunk's lines at one row, placed from unique lines found in the wrong order: its ends
            # were found at places that do not go together.
            if strict:
                return None
            raise ValueError(f"chunk {ch.index + 1} of the update (lines {ch.start + 1}-{ch.start + n}, starting "
                             f"{ch.lines[0].strip()[:60]!r}) does not fit one place: its first and last lines are "
                             f"found at places that do not go together (both at line {p + 1}); show a line more of "
                             "context")
        spot = _edges(src, ch, _blank_edges(src, ch, Spot(p, q + 1, ch.lines, "lines"), i, j), i, j, last) \
            if p <= q and i <= j else None
        if spot is not None and guard.ok(ch, spot):
            other = _edit_elsewhere(src, ch, head, tail, last, guard, spot)
            if other is not None:
                if strict:
                    return None
                raise ValueError(f"chunk {ch.index + 1} of the update (lines {ch.start + 1}-{ch.start + n}, starting "
                                 f"{ch.lines[0].strip()[:60]!r}) reads two ways: it deletes lines at line {spot.a + 1}"
                                 f", or edits a line in place at line {other.a + 1}; show a line more of context")
            twice = _deletes_an_edge(src, ch, spot, i, j)
            if twice is not None:
                raise _two_readings(ch, twice)
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


def _nonblank(lines: list[str]) -> int:
    return sum(bool(x.strip()) for x in lines)


def _edit_elsewhere(src: Source, ch: Chunk, head: Ends, tail: Ends, last: bool, guard: Guard,
                    spot: Spot) -> Spot | None:
    """Another place for a chunk that deletes lines at its spot (its lines fewer than the rows they replace,
    found apart by their nearest match to a unique line): one where its ends are found too, as many lines as
    it holds, each line it changes alike to the one it replaces: there the chunk edits lines in place, and an
    edited line that now reads like a line elsewhere is what anchored it here. That place (None: none)."""
    if _nonblank(src.lines[spot.a : spot.b]) <= _nonblank(spot.lines) or (len(head.rows) < 2 and len(tail.rows) < 2):
        return None
    for c in _candidates(src, ch, head, tail, last):
        if not (c.b <= spot.a or c.a >= spot.b) or src.lines[c.a : c.b] == ch.lines or not guard.ok(ch, c):
            continue
        old = [x for x in src.lines[c.a : c.b] if x.strip()]
        new = [x for x in c.lines if x.strip()]
        if len(old) != len(new):
            continue
        budget.spend(len(old))
        changed = [(x, y) for x, y in zip(old, new, strict=True) if norm(x) != norm(y)]
        if changed and all(difflib.SequenceMatcher(None, x.strip(), y.strip(), autojunk=False).ratio() >= EDIT_LIKENESS
                           for x, y in changed):
            return c
    return None


def _two_readings(ch: Chunk, twice: str) -> ValueError:
    """The refusal of a chunk whose place would delete another copy of its edge line ``twice``."""
    return ValueError(f"chunk {ch.index + 1} of the update (lines {ch.start + 1}-{ch.start + len(ch.lines)}, "
                      f"starting {ch.lines[0].strip()[:60]!r}) reads two ways: {twice.strip()[:60]!r} stands twice "
                      "there, and the original lines between could be kept or deleted; show a line more of context, "
                      "or a marker where code stays")


def _deletes_an_edge(src: Source, ch: Chunk, spot: Spot, i: int, j: int) -> str | None:
    """Among the rows the spot would delete (those of its span the chunk's lines do not keep) stands another copy
    of the chunk's first or last matched line, and the chunk read with that copy as its edge, deleting less,
    leaves a file that parses as well as the original: which was meant is not known (the spot's own edges were
    found apart, each by its nearest match to a unique line). That line (None: no such reading)."""
    span, lines = src.norm[spot.a : spot.b], [norm(x) for x in spot.lines]
    top, bottom = norm(ch.lines[i]), norm(ch.lines[j])
    if not {top, bottom} & set(span) - {""}:
        return None
    budget.spend(len(span) * len(lines))
    kept = {a + k for a, _, size in difflib.SequenceMatcher(None, span, lines, autojunk=False).get_matching_blocks()
            for k in range(size)}
    for r, x in enumerate(span):
        if r in kept or not x or x not in (top, bottom):
            continue
        a, b = (spot.a + r, spot.b) if x == top else (spot.a, spot.a + r + 1)
        budget.spend(src.n)
        if src.parses(src.lines[:a] + spot.lines + src.lines[b:]) is not False:
            return src.lines[spot.a + r]
    return None


def _candidates(src: Source, ch: Chunk, head: Ends, tail: Ends, last: bool) -> list[Spot]:
    """Every place of the chunk's first matching line, each to the nearest place of its last one after it."""
    out: list[Spot] = []
    i, j = head.edge, tail.edge
    for p in head.rows:
        later = [r for r in tail.rows if r >= p + (j > i)]
        if later:
            spot = _edges(src, ch, Spot(p, later[0] + 1, ch.lines, "ambiguous"), i, j, last)
            spot.edges = (i, j)
            out.append(spot)
        if len(out) >= MAX_CANDIDATES:
            break
    return out


def _rank(src: Source, ch: Chunk, cands: list[Spot]) -> list[tuple[float, Spot]]:
    """Candidate places, most likely first: those where the chunk changes something, spanning no more than
    twice its lines, most like it (characters in common with the lines it replaces); ties in file order."""
    def keep(pool: list[Spot], test: Callable[[Spot], bool]) -> list[Spot]:
        return [c for c in pool if test(c)] or pool

    pool = keep(cands, lambda c: src.lines[c.a : c.b] != ch.lines)
    pool = keep(pool, lambda c: c.b - c.a <= 2 * len(ch.lines))
    text = "\n".join(ch.lines)
    budget.spend(sum(1 + (c.b - c.a) * len(ch.lines) for c in pool))
    scored = [(difflib.SequenceMatcher(None, "\n".join(src.lines[c.a : c.b]), text, autojunk=False).ratio(), c)
              for c in pool]
    return sorted(scored, key=lambda x: -x[0])


def _edges(src: Source, ch: Chunk, spot: Spot, i: int, j: int, last: bool) -> Spot:
    """Lines before the chunk's first anchored line (``i``) or after its last (``j``) are new lines. An update
    that opens without a marker starts the file: new lines at its start replace the file's first lines when
    those are no more than the chunk holds and hold no definition. One that ends without a marker ends it: new
    lines at its end replace the file's last lines likewise, and the original lines after it go when they are
    no more than the chunk holds and all indented (the rest of the block the chunk ends in)."""
    n = len(ch.lines)
    if i > 0 and ch.index == 0 and not ch.marker_before and spot.a <= n and not src.top_level_def_in(0, spot.a):
        spot.a = 0
    ends_file = last and not ch.marker_after
    if ends_file and all(not x.strip() for x in src.lines[spot.b :]):
        spot.b = src.n  # the original's blank lines at its end: the update's end says what the file ends with
    if ch.marker_before and ch.blanks[0] >= 2 and 0 < spot.a < src.n and src.lines[spot.a].strip() and \
            src.lines[spot.a] != spot.lines[0]:
        # Fewer blank lines (two at least) after the marker than the original has before the line the chunk
        # rewrites: the update narrows that spacing.
        have = _blank_run(src, spot.a - 1, -1)
        if have > ch.blanks[0]:
            spot.a -= have - ch.blanks[0]
    if last and not ch.marker_after and src.n - spot.b <= n:
        rest = src.lines[spot.b :]
        if (j < n - 1 and not src.top_level_def_in(spot.b, src.n)) or (
                any(x.strip() for x in rest) and all(not x.strip() or x[:1].isspace() for x in rest)):
            spot.b = src.n
    # New lines at an edge keep the blank lines the update put between them and the marker, unless the
    # original has blank lines there already.
    lead = ch.blanks[0] if i > 0 and 0 < spot.a and src.lines[spot.a - 1].strip() else 0
    trail = ch.blanks[1] if j < n - 1 and spot.b < src.n and src.lines[spot.b].strip() else 0
    if ends_file and spot.b == src.n:
        trail = ch.blanks[1]  # the update ends the file: its blank lines at the end are the file's
    if not trail and ch.marker_after and src.lines[spot.a : spot.b] != ch.lines:
        # More blank lines before the marker than the original has there before its next line: the update
        # widens the spacing (two blank lines after imports, say), where it changes something else too.
        have = _blank_run(src, spot.b, 1)
        if spot.b + have < src.n and 0 < have < ch.blanks[1]:
            trail = ch.blanks[1] - have
    if lead or trail:
        spot.lines = [""] * lead + spot.lines + [""] * trail
    return spot


# New lines at an edge of a chunk, with only blank lines between them and the marker, replace the original lines
# between the matched line and the original's blank lines when those are this like them (difflib ratio) and about
# as many: the blank lines are the chunk's context too, weak, so they anchor only beside the strong line matched.
REPLACE_LIKENESS = 0.6


def _blank_edges(src: Source, ch: Chunk, spot: Spot, i: int, j: int) -> Spot:
    """A chunk whose new lines at an edge (after its last matched line ``j``, before its first ``i``) stand
    between that line and blank lines: on the original's side of the matched line, the lines up to its blank
    lines are what the new ones rewrite when they are like them (``REPLACE_LIKENESS``); else they stay and the
    new lines are inserted (``_edges``)."""
    n = len(ch.lines)
    end = _closed_block(src, ch, spot.b)
    if end > spot.b and src.lines[spot.b - 1] == ch.lines[j] and src.lines[spot.a : spot.b] != ch.lines:
        spot.b = end
    elif j < n - 1 and ch.blanks[1] and ch.marker_after:
        new = ch.lines[j + 1 :]
        r = spot.b
        while r < src.n and src.lines[r].strip() and r - spot.b <= len(new):
            r += 1
        if r > spot.b and (r == src.n or not src.lines[r].strip()) and _alike(src.lines[spot.b : r], new):
            spot.b = r
    if i > 0 and ch.blanks[0] and ch.marker_before:
        new = ch.lines[:i]
        r = spot.a
        while r > 0 and src.lines[r - 1].strip() and spot.a - r <= len(new):
            r -= 1
        if r < spot.a and (r == 0 or not src.lines[r - 1].strip()) and _alike(src.lines[r : spot.a], new):
            spot.a = r
    return spot


def _closed_block(src: Source, ch: Chunk, b: int) -> int:
    """Where the original's block the chunk ends in closes, when the chunk closes it: the chunk ends with blank
    lines before a marker less indented than its last line, and the original rows from ``b`` on are not blank
    and at least as deep as that line, up to a blank row (at most ``DROP_FLOOR`` of them). Those rows are the
    rest of the block the chunk shows ending: they go (``_blank_edges`` takes them only where the chunk's last
    matched line stands exactly as it is, and the chunk changes something else there too: lines that merely
    stand as they are do not delete the ones after them). ``b`` itself otherwise."""
    depth = indent_width(ch.lines[-1])
    if not (ch.blanks[1] and ch.marker_after and 0 <= ch.after_indent < depth):
        return b
    r = b
    while r < src.n and src.lines[r].strip() and indent_width(src.lines[r]) >= depth and r - b < DROP_FLOOR:
        r += 1
    return r if r > b and (r == src.n or not src.lines[r].strip()) else b


def _alike(old: list[str], new: list[str]) -> bool:
    """About as many lines, as like each other as ``REPLACE_LIKENESS``, with or without their end-of-line
    comments (a rewritten line that gained a long comment is still the line it rewrites)."""
    if abs(len(old) - len(new)) > 1:
        return False
    budget.spend(2 * len(old) * len(new) + 1)
    return any(difflib.SequenceMatcher(None, "\n".join(a), "\n".join(b), autojunk=False).ratio() >= REPLACE_LIKENESS
               for a, b in ((old, new), ([_code(x) for x in old], [_code(x) for x in new])))


def _code(line: str) -> str:
    """A line without its end-of-line comment (``#`` or ``//`` after a blank), the blanks before it dropped."""
    cut = min((k for k in (line.find(" #"), line.find(" //")) if k >= 0), default=len(line))
    return line[:cut].rstrip()


def _blank_run(src: Source, p: int, step: int) -> int:
    """Blank original lines from row ``p`` on (``step`` +1) or back (-1)."""
    k = 0
    while 0 <= p + k * step < src.n and not src.lines[p + k * step].strip():
        k += 1
    return k


def insert(src: Source, ch: Chunk, lo: int, hi: int) -> Spot:
    """A chunk that anchors nowhere but defines something new: after the last definition at its level in
    [lo, hi) (inside the definition the previous chunk ended in, or the one its open headers name), with the
    spacing used between those definitions; when it opens the update, before the first one. ValueError when
    the original has one of its definitions (same name and indentation: a rewrite of one this chunk could not
    tell apart), or when it is indented with nothing at its level to go beside."""
    for k, _ in ch.units:  # a definition the original has: a rewrite of one it could not tell apart
        d = ch.defs[k]
        same = [o.start + 1 for o in (src.defs[j] for j in src.by_name.get(d.name, ())) if o.indent == d.indent]
        if same:
            rows = ", ".join(map(str, same[:6])) + (", ..." if len(same) > 6 else "")
            raise ValueError(f"chunk {ch.index + 1} of the update (lines {ch.start + 1}-{ch.start + len(ch.lines)}, "
                             f"starting {ch.lines[0].strip()[:60]!r}) rewrites {d.name!r}, which the original "
                             f"defines at {len(same)} places it cannot tell apart (lines {rows}): show the "
                             "definition around it (its class header), or a line only that place has")
    for k, _ in ch.units:  # a name the original binds by assignment: a rewrite of that, not a new definition
        d = ch.defs[k]
        bound = re.compile(rf"^\s*{re.escape(d.name)}\s*(?::[^=]*)?=(?!=)")
        budget.spend(src.n)
        row = next((r for r, x in enumerate(src.lines) if bound.match(x)), None)
        if row is not None:
            raise ValueError(f"chunk {ch.index + 1} of the update (lines {ch.start + 1}-{ch.start + len(ch.lines)}, "
                             f"starting {ch.lines[0].strip()[:60]!r}) anchors nowhere and defines {d.name!r}, which "
                             f"the original assigns at line {row + 1}: show the lines around it")
    d0, path = ch.defs[ch.units[0][0]], ch.units[0][1]
    cont = -1
    if path:
        named = [j for j in src.by_name.get(path[-1], ()) if src.defs[j].qual[-len(path):] == path
                 and lo <= src.defs[j].end and src.defs[j].start < hi]
        cont = named[0] if len(named) == 1 else -1
    elif lo > 0:
        cont = src.container(lo - 1, d0.indent)
    budget.spend(len(src.defs))
    sibs = [o for o in src.defs if o.parent == cont and o.indent == d0.indent and lo <= o.start and o.end <= hi]
    where = "at the top level" if cont < 0 else f"in {'.'.join(src.defs[cont].qual)}"
    if cont < 0 and d0.indent > 0 and not sibs:
        raise ValueError(f"chunk {ch.index + 1} of the update (lines {ch.start + 1}-{ch.start + len(ch.lines)}, "
                         f"starting {ch.lines[0].strip()[:60]!r}) anchors nowhere and defines {d0.name!r} indented, "
                         "inside something the original does not show at that level: show the definition around it")
    if not ch.marker_before and sibs:  # the update opens with it: before the first definition
        o = sibs[0]
        gap = _blank_run(src, o.start - 1, -1) or 1
        return Spot(o.start, o.start, ch.lines + [""] * gap, "inserted", f"before {o.name} {where}")
    if sibs:
        o = sibs[-1]
        gap = _blank_run(src, o.end, 1) or _blank_run(src, o.start - 1, -1) or 1
        return Spot(o.end, o.end, [""] * gap + ch.lines, "inserted", f"after {o.name} {where}")
    p = min(hi, src.defs[cont].end) if cont >= 0 else (hi if lo > 0 or hi < src.n else src.n)
    prev = src.lines[p - 1].rstrip() if p > 0 else ""
    gap = 0 if not prev or prev.endswith(src.grammar.block_openers) else 1
    return Spot(p, p, [""] * gap + ch.lines, "inserted", f"at line {p + 1} {where}")


# ---------------------------------------------------------------------------------------------------- every chunk
def best_chain(spots: list[Spot | None]) -> list[Spot | None]:
    """The largest set of placed chunks that follow each other in the file (the others are placed again
    between them)."""
    idx = [k for k, s in enumerate(spots) if s is not None]
    best: dict[int, tuple[int, int]] = {}  # chunk -> (chain length, previous chunk)
    for x, k in enumerate(idx):
        budget.spend(x + 1)
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


def refuse_dropping(src: Source, ch: Chunk, lo: int, hi: int, names: set[str], last: bool, guard: Guard) -> None:
    """Raise ValueError when the chunk has places that only the span guard turned down (the error says what
    the nearest of them would drop); return when it has none at all."""
    got = place(src, ch, lo, hi, False, names, last, Guard(src, guard.shown, False))
    spots = got if isinstance(got, list) else [got] if got is not None else []
    if not spots:
        return
    s = min(spots, key=lambda c: c.b - c.a)
    head = f"chunk {ch.index + 1} of the update (lines {ch.start + 1}-{ch.start + len(ch.lines)}, starting " \
           f"{ch.lines[0].strip()[:60]!r}) is not applied: its anchoring would replace original lines {s.a + 1}-{s.b}"
    row = guard.cut(s)
    if row is not None and guard.dropped(s) <= guard.limit(ch):
        raise ValueError(f"{head}, among them line {row + 1} ({src.lines[row].strip()[:60]!r}) but not the rest of "
                         "that definition; show more lines around the edit, or that definition whole")
    raise ValueError(f"{head} and drop {guard.dropped(s)} of them that appear nowhere in the update (at most "
                     f"{guard.limit(ch)} for a chunk of its size); put a '... existing code ...' marker where "
                     "original code stays, or show more lines around the edit")


def decide(src: Source, ch: Chunk, cands: list[Spot]) -> Spot:
    """An ambiguous chunk's place: the one candidate left by ``_rank``'s tests, or the one clearly most like the
    chunk (its likeness ahead of the next by ``CLEAR_MARGIN``). Raises ValueError where several remain alike:
    a merge is never a guess."""
    ranked = _rank(src, ch, cands)
    if len(ranked) > 1 and ranked[0][0] - ranked[1][0] < CLEAR_MARGIN:
        rows = ", ".join(str(c.a + 1) for _, c in ranked[:6]) + (", ..." if len(ranked) > 6 else "")
        raise ValueError(f"chunk {ch.index + 1} of the update (lines {ch.start + 1}-{ch.start + len(ch.lines)}, "
                         f"starting {ch.lines[0].strip()[:60]!r}) fits {len(ranked)} places of the original alike "
                         f"(at lines {rows}): show more lines around the edit, or a line only that place has")
    spot = ranked[0][1]
    twice = _deletes_an_edge(src, ch, spot, *spot.edges) if spot.edges[0] >= 0 else None
    if twice is not None:
        raise _two_readings(ch, twice)
    if len(cands) == 1:
        spot.kind, spot.note = "lines", "the one place where both its ends are found"
    else:
        spot.note = f"{len(cands)} candidate places; the one most like it (line {spot.a + 1})"
    return spot
