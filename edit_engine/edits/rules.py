"""Next edit: tree rules, inferred from the history's changed rows by anti-unification.

A changed row and the row that replaced it (``patterns.line_pairs``) are parsed on their own with tree-sitter.
The smallest pair of nodes that holds the change (from the roots down, while the two trees differ in one child
only) is an *example*: ``t.Optional[str]`` -> ``str | None``. Its *template* puts a hole where a subtree of the
old node stands unchanged in the new one (``t.Optional[?0]`` -> ``?0 | None``).

The examples of one template are anti-unified into a *rule*: a hole that every example fills with the same
text stays that text, so the rule keeps concrete what its examples share and generalises only where they differ
(``f(a, ?0)`` -> ``f(a, ?0, strict=True)`` from ``f(a, x)`` and ``f(a, y)``: ``f`` and ``a`` stay). A template
seen once is no rule: one example shows nothing to generalise over, and the line edits repeat it as it stands.

A rule is a ``sites.Rule`` of kind ``rule``, searched as every other kind is (``propagate.candidates``):
``TreeRule.edits`` finds the region's nodes of its type whose tree matches its old side (a hole binds any
subtree, the same hole the same text, a concrete hole only its text; tokens compare as written, blanks between
them do not) and rewrites each from the new side with the holes' bindings. It holds in other documents too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias

from edit_engine.edits import budget
from edit_engine.edits.patterns import Analysis, text_of
from edit_engine.edits.sites import Edit, Region, Rule, node_span, node_text
from edit_engine.syntax import trees as syntax

MIN_EXAMPLES = 2  # examples of one template that make it a rule
MAX_RULES = 8  # the most recent rules sought in the region
RECENT_CHANGES = 16  # the most recent changes whose row pairs give examples
MAX_PAIRS = 64  # row pairs parsed for examples, the most recent first (a parse of a row takes tens of microseconds)
MAX_ROW_CHARS = 400  # a longer row is not parsed for an example
# Nodes that are whole statements or lists of them: an example there is a rewritten row, the line edits' job.
_TOO_WIDE = frozenset({"module", "program", "source_file", "block", "expression_statement", "ERROR",
                       "statement_block", "declaration_list", "translation_unit"})
_OPENERS = frozenset({"(", "[", "{", "<"})  # a node that opens with one of these is a bracketed list
# What a row is completed with so that it parses on its own (a definition's header needs a body).
_COMPLETIONS = {"python": ("", "\n    pass")}
_OTHER_COMPLETIONS = ("", "}", " {}")

# A template's old side: a hole (its index), a token (its type and text) or a node (its type and children).
Pattern: TypeAlias = int | tuple[str, str] | tuple[str, tuple["Pattern", ...]]


@dataclass(frozen=True)
class TreeRule(Rule):
    """``old`` (a ``Pattern`` rooted at a node of ``type``) becomes ``new`` (text pieces and hole indices);
    ``fixed[k]``: the text hole ``k`` must hold (None: any); ``order``: the recency of its latest example;
    ``sought``: the node types of all the history's tree rules (the region is walked once for them all)."""

    kind: ClassVar[str] = "rule"
    type: str
    old: Pattern
    new: tuple[str | int, ...]
    fixed: tuple[str | None, ...]
    order: int
    sought: frozenset[str] = frozenset()

    def match(self, doc: syntax.Document, node: Any) -> dict[int, str] | None:
        """The holes' texts where ``node`` matches the old side, or None."""
        binds: dict[int, str] = {}
        if not _unify(self.old, node, doc, binds):
            return None
        if any(t is not None and binds.get(k) != t for k, t in enumerate(self.fixed)):
            return None
        return binds

    def rewrite(self, binds: dict[int, str]) -> str:
        return "".join(p if isinstance(p, str) else binds[p] for p in self.new)

    def edits(self, r: Region) -> list[Edit]:
        """Each node of the region that matches, rewritten."""
        if r.doc.tree is None:
            return []
        out: list[Edit] = []
        for n in r.nodes(self.sought or frozenset({self.type})):
            if n.type != self.type or (binds := self.match(r.doc, n)) is None:
                continue
            start, end = node_span(r, n)
            text = self.rewrite(binds)
            if text != node_text(r, n):
                out.append(Edit(start, end, text, self.kind, self.order))
        return out

    def carried(self, defined: Callable[[], set[str]]) -> Rule | None:
        return self


@dataclass(frozen=True)
class Example:
    key: tuple[str, str]  # the template's two sides as text, holes written ``?k``
    type: str
    old: Pattern
    new: tuple[str | int, ...]
    holes: tuple[str, ...]  # each hole's text in this example
    order: int


def _unify(p: Pattern, node: Any, doc: syntax.Document, binds: dict[int, str]) -> bool:
    budget.spend(1)
    if isinstance(p, int):
        text = text_of(doc, node)
        return binds.setdefault(p, text) == text
    kind, rest = p
    if node.type != kind:
        return False
    if isinstance(rest, str):
        return not node.children and text_of(doc, node) == rest
    return len(node.children) == len(rest) and all(_unify(q, c, doc, binds) for q, c in zip(rest, node.children, strict=True))


def _parse_row(row: str, language: str) -> syntax.Document | None:
    """The row (stripped) parsed on its own, completed so that it parses; None when it does not."""
    text = row.strip()
    if not text or len(text) > MAX_ROW_CHARS:
        return None
    for tail in _COMPLETIONS.get(language, _OTHER_COMPLETIONS):
        budget.spend(1 + len(text) // 64)
        doc = syntax.Document.parse(text + tail, language)
        if doc.tree is None:
            return None
        if not doc.tree.root_node.has_error:
            return doc
    return None


def _changed_pair(old: syntax.Document, new: syntax.Document) -> tuple[Any, Any]:
    """The smallest nodes holding the change: down from the roots while one child pair differs. A bracketed
    list (arguments, parameters, a tuple) is no node of its own: its parent is taken, so that the callee of a
    changed argument list is part of the rule."""
    a, b = old.tree.root_node, new.tree.root_node  # type: ignore[union-attr]
    up: tuple[Any, Any] | None = None
    while a.type == b.type and len(a.children) == len(b.children):
        budget.spend(1)
        differ = [(x, y) for x, y in zip(a.children, b.children, strict=True) if text_of(old, x) != text_of(new, y)]
        if len(differ) != 1:
            break
        up, (a, b) = (a, b), differ[0]
    if up is not None and a.children and a.children[0].type in _OPENERS:
        return up
    return a, b


def _example(old_row: str, new_row: str, language: str, order: int) -> Example | None:
    old, new = _parse_row(old_row, language), _parse_row(new_row, language)
    if old is None or new is None:
        return None
    a, b = _changed_pair(old, new)
    if a.type in _TOO_WIDE or text_of(old, a) == text_of(new, b):
        return None
    kept: dict[str, None] = {}  # texts of the new node's named subtrees: what the change carried over

    def carried(n: Any) -> None:
        budget.spend(1)
        if n is not b and n.is_named:
            kept.setdefault(text_of(new, n))
        for c in n.children:
            carried(c)

    carried(b)
    holes: list[str] = []

    def pattern(n: Any) -> Pattern:
        budget.spend(1)
        text = text_of(old, n)
        if n is not a and n.is_named and text.strip() and text in kept:
            if text not in holes:
                holes.append(text)
            return holes.index(text)
        if not n.children:
            return n.type, text
        return n.type, tuple(pattern(c) for c in n.children)

    old_side = pattern(a)
    if not holes:
        return None  # a literal replacement: the line edits repeat it
    pieces: list[str | int] = []
    pos = b.start_byte

    def fill(n: Any) -> None:
        nonlocal pos
        text = text_of(new, n)
        if n is not b and n.is_named and text in holes:
            pieces.append(new.data[pos : n.start_byte].decode("utf-8", "surrogatepass"))
            pieces.append(holes.index(text))
            pos = n.end_byte
            return
        for c in n.children:
            fill(c)

    fill(b)
    pieces.append(new.data[pos : b.end_byte].decode("utf-8", "surrogatepass"))
    if not any(isinstance(p, int) for p in pieces):
        return None
    new_side = tuple(p for p in pieces if p != "")
    key = (_written(old_side), "".join(p if isinstance(p, str) else f"?{p}" for p in new_side))
    return Example(key, a.type, old_side, new_side, tuple(holes), order)


def _written(p: Pattern) -> str:
    if isinstance(p, int):
        return f"?{p}"
    kind, rest = p
    return rest if isinstance(rest, str) else " ".join(_written(q) for q in rest)


def anti_unify(examples: Sequence[Example]) -> TreeRule:
    """The rule of one template's examples: a hole every example fills alike is fixed to that text."""
    first = examples[0]
    fixed = tuple(t if all(e.holes[k] == t for e in examples) else None for k, t in enumerate(first.holes))
    return TreeRule(first.type, first.old, first.new, fixed, min(e.order for e in examples))


def infer(a: Analysis, language: str) -> list[TreeRule]:
    """The history's rules, the most recent first (at most ``MAX_RULES``); a rule whose holes are all fixed
    (its examples alike) is left to the line edits."""
    if not syntax.load(language).has_tree:
        return []
    recent = sorted(a.changes, key=lambda c: -c.diff)[:RECENT_CHANGES]
    by_key: dict[tuple[str, str], list[Example]] = {}
    pairs = [(order, p) for order, c in enumerate(recent) for p in a.pairs_of(c) if p[0].strip() != p[1].strip()]
    for order, (old_row, new_row) in pairs[:MAX_PAIRS]:
        if e := _example(old_row, new_row, language, order):
            by_key.setdefault(e.key, []).append(e)
    rules = [anti_unify(g) for g in by_key.values() if len(g) >= MIN_EXAMPLES]
    rules = sorted((r for r in rules if any(t is None for t in r.fixed)), key=lambda r: r.order)[:MAX_RULES]
    sought = frozenset(r.type for r in rules)
    return [dataclasses.replace(r, sought=sought) for r in rules]
