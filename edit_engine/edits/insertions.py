"""Next edit: insertion rules, rows the history inserted alike at two places or more, inserted again beside the
same neighbour.

A change that only inserts rows (nothing removed, at most ``MAX_ROWS`` rows, one of them not blank) is an
*example*: the rows, and the row just above and just below them in its hunk. The examples that insert the same
rows (as written, less the indentation they share) are anti-unified: the neighbour that most of them, at least
``MIN_EXAMPLES``, have in common is the *anchor*: the same row above them (a docstring's closing ``\"\"\"`` before
``import datetime as dt``), else the same row below, else, above them, the header of a definition (``def``,
``fn``, ``func``, ``function``: a docstring added to each method). Without one there is no rule: an insertion's
place is told by its neighbours, and examples that share none show nothing of where the next one goes.

A rule is a ``sites.Rule`` of kind ``insert``, searched as every other kind is (``propagate.candidates``): each
region row that is the anchor gets the rows beside it, indented as they stood to the anchor in the examples,
unless their first row already stands within ``NEAR_ROWS`` rows there. It holds in other documents too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from edit_engine.edits import budget
from edit_engine.edits.patterns import Analysis, indent_of
from edit_engine.edits.sites import Edit, Region, Rule

MAX_ROWS = 8  # rows an insertion may hold and still be repeated (more: new code, written once)
MIN_EXAMPLES = 2  # examples of one insertion that make it a rule
NEAR_ROWS = 3  # an insertion is not proposed where its first row already stands this close to the anchor
MAX_RULES = 8  # the most recent rules sought in the region
RECENT_CHANGES = 32  # the most recent changes that give examples
_HEADER = re.compile(r"^\s*(?:(?:pub(?:\(\w+\))?|async|export|static|private|public|protected)\s+)*"
                     r"(?:def|fn|func|function)\b.*[:{]\s*$")


@dataclass(frozen=True)
class InsertRule(Rule):
    """``rows`` (indented relative to the anchor by ``shift`` characters, then as written) go below each row
    ``anchor`` (``below``: above it; ``anchor`` None: below each definition header)."""

    kind: ClassVar[str] = "insert"
    rows: tuple[str, ...]
    anchor: str | None
    below: bool
    shift: int
    order: int

    def edits(self, r: Region) -> list[Edit]:
        first = next(x.strip() for x in self.rows if x.strip())
        out: list[Edit] = []
        for row in range(r.first, r.last):
            budget.spend(1)
            line = r.line(row)
            if self.anchor is None:
                if not _HEADER.match(line):
                    continue
            elif line.strip() != self.anchor:
                continue
            if self.below and row + 1 == len(r.starts):
                continue  # the document's last row, with no line end to insert after
            near = range(row + 1, min(r.last, row + 1 + NEAR_ROWS)) if self.below else \
                range(max(0, row - NEAR_ROWS), row)
            if any(r.line(k).strip() == first for k in near):
                continue
            at = r.starts[row + 1] if self.below else r.starts[row]
            base = len(indent_of(line)) + self.shift
            if base < 0:
                continue
            pad = (indent_of(line)[:1] or " ") * base
            out.append(Edit(at, at, "".join((pad + x if x.strip() else "") + "\n" for x in self.rows),
                            self.kind, self.order))
        return out

    def carried(self, defined: Callable[[], set[str]]) -> Rule | None:
        return self


@dataclass(frozen=True)
class Example:
    rows: tuple[str, ...]  # the inserted rows, less the indentation of the first
    above: str
    below: str
    indent: int  # the first inserted row's indentation
    order: int


def _example(added: tuple[str, ...], above: str, below: str, order: int) -> Example | None:
    if not added or len(added) > MAX_ROWS or not any(x.strip() for x in added):
        return None
    while added and not added[0].strip():
        added = added[1:]  # blank rows first: the anchor is what stands above them
        above = ""
    ind = indent_of(added[0])
    if any(x.strip() and not x.startswith(ind) for x in added):
        return None
    return Example(tuple(x[len(ind) :] if x.strip() else "" for x in added), above, below, len(ind), order)


def infer(a: Analysis) -> list[InsertRule]:
    """The history's insertion rules, the most recent first (at most ``MAX_RULES``)."""
    recent = sorted(a.changes, key=lambda c: -c.diff)[:RECENT_CHANGES]
    groups: dict[tuple[str, ...], list[Example]] = {}
    for order, c in enumerate(recent):
        if c.removed:
            continue
        e = _example(c.added, c.before[-1] if c.before else "", c.after[0] if c.after else "", order)
        if e is not None:
            groups.setdefault(e.rows, []).append(e)
    out = []
    for rows, group in groups.items():
        if len(group) < MIN_EXAMPLES:
            continue
        rule = _anchored(rows, group)
        if rule is not None:
            out.append(rule)
    return sorted(out, key=lambda x: x.order)[:MAX_RULES]


def _anchored(rows: tuple[str, ...], group: list[Example]) -> InsertRule | None:
    """The rule of one insertion's examples: by the neighbour most of them share, at least ``MIN_EXAMPLES``
    (None: none)."""
    for below in (True, False):
        by_text: dict[str, list[tuple[Example, str]]] = {}
        for e in group:
            side = e.above if below else e.below
            if len(side.strip()) >= 3:
                by_text.setdefault(side.strip(), []).append((e, side))
        best = max(by_text.values(), key=len, default=[])
        shifts = {e.indent - len(indent_of(x)) for e, x in best}
        if len(best) >= MIN_EXAMPLES and len(shifts) == 1:
            return InsertRule(rows, best[0][1].strip(), below, shifts.pop(), min(e.order for e, _ in best))
    headed = [e for e in group if _HEADER.match(e.above)]
    shifts = {e.indent - len(indent_of(e.above)) for e in headed}
    if len(headed) >= MIN_EXAMPLES and len(shifts) == 1:
        return InsertRule(rows, None, True, shifts.pop(), min(e.order for e in headed))
    return None
