"""Next edit: phrase rules, the history's literal replacements of a few tokens, made again where the same tokens
stand between the same neighbours.

A changed row and the row that replaced it (``patterns.line_pairs``) are compared token by token
(``patterns.tokens``). The tokens from the first that differs to the last, less those both rows begin or end
them with, at most ``MAX_TOKENS`` on either side, are an *example* (the changes of one row go together: an ``f``
prefix and the ``{name}`` it formats): the tokens removed, ``CONTEXT`` tokens on either side that stay, and what
is written instead (``"Can not overwrite"`` -> ``"Cannot overwrite"``, ``filename: str,`` -> ``filename: str |
os.PathLike,``). One identifier swapped for another is a rename, the renames' job, and no example here.

The examples of one replacement (the same tokens removed, the same text written) with the same token next to it
on either side are anti-unified into a rule: the context tokens every example has stay, the others go (at least
one stays on each side, or the row's edge), so a rule keeps what its examples share (``root_path: str,`` and
``filename: str,`` give ``: str,``). A replacement seen once is a rule only when it removes a word of
``MIN_WORD`` letters or more (``cookielib`` -> ``http.cookiejar``): a lone bracket or keyword shows nothing of
where it belongs. A phrase of several tokens with such a word, replaced alike between different neighbours
(``Union[str, PathLike]`` -> ``StrPath``, in a parameter and in a return type), is replaced wherever it stands.

A rule is a ``sites.Rule`` of kind ``phrase``, searched as every other kind is (``propagate.candidates``): on each
row of the region where its tokens stand, context and all, the tokens it removes become the text it writes (an
insertion or a deletion: the text between the context tokens). It holds in other documents too.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from edit_engine.edits import budget
from edit_engine.edits.patterns import Analysis, is_identifier, tokens
from edit_engine.edits.sites import Edit, Region, Rule

CONTEXT = 3  # tokens on each side of a change that an example keeps as its context
MAX_TOKENS = 8  # tokens a change may remove or write and still be a phrase (more: a rewritten row)
MIN_WORD = 4  # letters of a word that makes a change seen once a rule
MAX_RULES = 16  # the most recent rules sought in the region
RECENT_CHANGES = 16  # the most recent changes whose row pairs give examples
MAX_PAIRS = 64  # row pairs compared for examples, the most recent first


@dataclass(frozen=True)
class PhraseRule(Rule):
    """The tokens ``left + old + right`` on one row: ``old`` becomes ``new`` (``old`` or ``new`` empty: the text
    between ``left`` and ``right``). ``start``/``end``: the tokens begin (end) the row; ``order``: the recency
    of its latest example."""

    kind: ClassVar[str] = "phrase"
    left: tuple[str, ...]
    old: tuple[str, ...]
    right: tuple[str, ...]
    new: str
    order: int
    start: bool = False
    end: bool = False

    def edits(self, r: Region) -> list[Edit]:
        seq = self.left + self.old + self.right
        probe = max(seq, key=len)
        text, hi = r.text, r.end
        out: list[Edit] = []
        pos, last_row = text.find(probe, r.starts[r.first], hi), -1
        while pos >= 0:
            row = r.row_of(pos)
            if row != last_row:
                last_row = row
                out += self._in_row(r, row, seq)
            pos = text.find(probe, r.line_end(row), hi)
        return out

    def _in_row(self, r: Region, row: int, seq: tuple[str, ...]) -> list[Edit]:
        line = r.line(row)
        toks = tokens(line)
        budget.spend(1 + len(toks))
        texts = [t[2] for t in toks]
        n, out = len(seq), []
        for k in range(len(texts) - n + 1):
            if tuple(texts[k : k + n]) != seq:
                continue
            if (self.start and k != 0) or (self.end and k + n != len(texts)):
                continue
            i, j = k + len(self.left), k + n - len(self.right)  # the tokens replaced: [i, j)
            if self.old and self.new:  # replaced: the tokens as written
                a, b = toks[i][0], toks[j - 1][1]
            else:  # inserted or deleted: the text between the context tokens
                a = toks[i - 1][1] if self.left else toks[k][0]
                b = toks[j][0] if self.right else toks[k + n - 1][1]
            out.append(Edit(r.starts[row] + a, r.starts[row] + b, self.new, self.kind, self.order))
        return out

    def carried(self, defined: Callable[[], set[str]]) -> Rule | None:
        return self


@dataclass(frozen=True)
class Example:
    left: tuple[str, ...]  # nearest token last
    old: tuple[str, ...]
    right: tuple[str, ...]
    new: str
    start: bool
    end: bool
    order: int


def examples(old_row: str, new_row: str, order: int) -> list[Example]:
    """The phrase change of one row pair (none, or one)."""
    a, b = tokens(old_row), tokens(new_row)
    ta, tb = [t[2] for t in a], [t[2] for t in b]
    if not ta or not tb:
        return []
    budget.spend(len(ta) * len(tb) // 8 + 1)
    ops = [o for o in difflib.SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes() if o[0] != "equal"]
    if not ops:
        return []
    # The changes of one row go together (an ``f`` prefix and the ``{name}`` it formats): one example from the
    # first to the last, less the tokens both sides begin or end with.
    i1, i2, j1, j2 = ops[0][1], ops[-1][2], ops[0][3], ops[-1][4]
    while i1 < i2 and j1 < j2 and ta[i2 - 1] == tb[j2 - 1]:
        i2, j2 = i2 - 1, j2 - 1
    while i1 < i2 and j1 < j2 and ta[i1] == tb[j1]:
        i1, j1 = i1 + 1, j1 + 1
    if i2 - i1 > MAX_TOKENS or j2 - j1 > MAX_TOKENS:
        return []
    if i2 - i1 == 1 and j2 - j1 == 1 and is_identifier(ta[i1]) and is_identifier(tb[j1]):
        return []  # a rename
    if i1 < i2 and j1 < j2:  # tokens replaced: the new tokens as written
        new = new_row[b[j1][0] : b[j2 - 1][1]]
    else:  # tokens inserted or deleted: the new text between the context tokens (or the row's stripped edges)
        new = new_row[b[j1 - 1][1] if j1 > 0 else len(new_row) - len(new_row.lstrip()) :
                      b[j2][0] if j2 < len(b) else len(new_row.rstrip())]
    return [Example(tuple(ta[max(0, i1 - CONTEXT) : i1]), tuple(ta[i1:i2]), tuple(ta[i2 : i2 + CONTEXT]),
                    new, i1 < CONTEXT, i2 + CONTEXT > len(ta), order)]


def _common(seqs: list[tuple[str, ...]], from_end: bool) -> tuple[str, ...]:
    """The context tokens every example has, nearest the change first."""
    out: list[str] = []
    for k in range(min(len(s) for s in seqs)):
        got = {s[len(s) - 1 - k] if from_end else s[k] for s in seqs}
        if len(got) != 1:
            break
        out.append(got.pop())
    return tuple(reversed(out)) if from_end else tuple(out)


def anti_unify(group: list[Example]) -> PhraseRule | None:
    """The rule of one change's examples: the context they share (None: nothing on one side, not the row's edge
    in every example)."""
    left, right = _common([e.left for e in group], True), _common([e.right for e in group], False)
    # The row's edge: every example reaches it on that side with all its context in common.
    start = all(e.start for e in group) and all(len(e.left) == len(left) for e in group)
    end = all(e.end for e in group) and all(len(e.right) == len(right) for e in group)
    if (not left and not start) or (not right and not end):
        return None
    if not group[0].old and not (left and right):
        return None  # an insertion at a row's edge: where it goes is not told by the tokens beside it
    return PhraseRule(left, group[0].old, right, group[0].new, min(e.order for e in group), start, end)


def infer(a: Analysis) -> list[PhraseRule]:
    """The history's phrase rules, the most recent first (at most ``MAX_RULES``)."""
    recent = sorted(a.changes, key=lambda c: -c.diff)[:RECENT_CHANGES]
    pairs = [(order, p) for order, c in enumerate(recent) for p in a.pairs_of(c) if p[0].strip() != p[1].strip()]
    groups: dict[tuple[tuple[str, ...], str], list[Example]] = {}
    for order, (old_row, new_row) in pairs[:MAX_PAIRS]:
        for e in examples(old_row, new_row, order):
            groups.setdefault((e.old, e.new), []).append(e)
    out = []
    for (old, new), group in groups.items():
        worded = any(len(t) >= MIN_WORD and t[0].isalpha() for t in old)
        near: dict[tuple[tuple[str, ...], tuple[str, ...]], list[Example]] = {}
        for e in group:
            near.setdefault((e.left[-1:], e.right[:1]), []).append(e)
        if len(near) > 1 and len(old) >= 2 and worded and new:
            # A phrase of several tokens replaced alike between different neighbours: wherever it stands.
            out.append(PhraseRule((), old, (), new, min(e.order for e in group)))
            continue
        for sub in near.values():
            rule = anti_unify(sub) if len(sub) >= 2 or worded else None
            if rule is not None:
                out.append(rule)
    return sorted(out, key=lambda r: r.order)[:MAX_RULES]
