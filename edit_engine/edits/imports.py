"""Next edit: a name imported twice. When the history imports a name from a module (``from collections.abc import
Sequence``) that an older import statement of the document still binds from another (``from typing import
Sequence``), the older binding goes: the name from that statement's list (with its comma and line break),
or the whole statement when each of its names goes.

Python only, read from the tree-sitter tree: the import statements at the module's top level (not under ``if``
or ``try``, where importing a name two ways is the point) that parse, ``from m import`` ones (a module import
binds a module; ``from __future__`` is no import). A statement is the history's when the history added that
name's row with that module (a row of a parenthesized list: the module of the list it stands in); a name
imported from the same module by both is left alone (the history moved it). A rule is a ``sites.Rule`` of kind
``import``; it does not carry to other documents.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from edit_engine.edits import budget
from edit_engine.edits.patterns import Analysis, Change, import_source, imported_names, in_import_list
from edit_engine.edits.sites import Edit, Region, Rule, node_span, node_text


def infer(a: Analysis, language: str) -> list[Rule]:
    """The rule of the names the history imported, with the modules it imported them from."""
    if language != "python" or not a.imported:
        return []
    added = {(name, module) for c in a.changes for name, module in _sources(c)}
    pairs = frozenset((n, m) for n, m in added if n in a.imported)
    return [TwiceImportedRule(pairs)] if pairs else []


def _sources(c: Change) -> list[tuple[str, str]]:
    """(name, module) of each name an added row of the change imports."""
    listed = in_import_list(c)
    # The module of the parenthesized list the change stands in.
    module = next((m for row in reversed(c.before) if (m := import_source(row))), "") if listed else ""
    out: list[tuple[str, str]] = []
    for row in c.added:
        source = import_source(row)
        if source is not None or module:
            out += [(n, source or module) for n in imported_names(row, listed and source is None)]
    return out


@dataclass(frozen=True)
class TwiceImportedRule(Rule):
    """Each name of ``pairs`` (name, module the history imported it from) leaves the document's other top-level
    ``from`` imports that bind it."""

    kind: ClassVar[str] = "import"
    pairs: frozenset[tuple[str, str]]

    def edits(self, r: Region) -> list[Edit]:
        if r.doc.tree is None:
            return []
        names = {n for n, _ in self.pairs}
        found: list[tuple[Any, str, list[tuple[str, int, int]]]] = []  # statement, module, (bound, start, end)
        for node in r.doc.tree.root_node.children:
            budget.spend(1)
            source = node.child_by_field_name("module_name")
            if node.type != "import_from_statement" or source is None or node.has_error:
                continue
            items = []
            for item in node.children_by_field_name("name"):
                alias = item.child_by_field_name("alias") if item.type == "aliased_import" else None
                items.append((node_text(r, alias or item), *node_span(r, item)))
            found.append((node, node_text(r, source), items))
        twice = {b for _, module, items in found for b, *_ in items if b in names and (b, module) in self.pairs}
        out: list[Edit] = []
        for node, module, items in found:
            gone = [k for k, (b, *_) in enumerate(items) if b in twice and (b, module) not in self.pairs]
            if gone:
                out += _without(r, node, items, gone, self.kind, self.order)
        return out


def _without(r: Region, node: Any, items: list[tuple[str, int, int]], gone: list[int], kind: str,
             order: int) -> list[Edit]:
    """The edits that take the names ``gone`` (indices of ``items``: bound name, start, end) out of the import
    statement ``node`` (the whole statement when all of them go): the rows of a parenthesized list that hold
    only names that go are deleted; another run of names that go is cut up to the next name kept, or, at the
    list's end, from the name kept before it, with the commas and the line breaks between them."""
    start, end = node_span(r, node)
    first, last = r.row_of(start), r.row_of(max(start, end - 1))
    if len(gone) == len(items):
        return [_rows(r, first, last, kind, order)]
    out: list[Edit] = []
    k = 0
    while k < len(items):
        if k not in gone:
            k += 1
            continue
        j = k
        while j < len(items) and j in gone:
            j += 1
        top, bottom = r.row_of(items[k][1]), r.row_of(items[j - 1][2])
        alone = first < top and bottom < last and all(
            k <= x < j for x, (_, a, _) in enumerate(items) if top <= r.row_of(a) <= bottom)
        if alone and all(not re.sub(r"[\w.]+(?:\s+as\s+\w+)?|,", "", r.line(x)).strip() for x in range(top, bottom + 1)):
            out.append(_rows(r, top, bottom, kind, order))  # rows of a parenthesized list that hold only these
        elif j < len(items):  # "a, b, c" -> "c"
            out.append(Edit(items[k][1], items[j][1], "", kind, order))
        else:  # "a, b, c" -> "a"
            out.append(Edit(items[k - 1][2], items[j - 1][2], "", kind, order))
        k = j
    return out


def _rows(r: Region, first: int, last: int, kind: str, order: int) -> Edit:
    """An edit that deletes the rows ``first``..``last`` whole."""
    end = r.starts[last + 1] if last + 1 < len(r.starts) else r.end
    return Edit(r.starts[first], end, "", kind, order)
