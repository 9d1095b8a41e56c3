"""Next edit: a name imported twice. When the history imports a name from a module (``from collections.abc import
Sequence``) that an older import statement of the document still binds from another (``from typing import
Sequence``), the older binding goes: the name from that statement's list (with its comma and line break),
or the whole statement when each of its names goes.

Python only, read with ``ast``: the import statements at the module's top level (not under ``if`` or ``try``,
where importing a name two ways is the point), ``from m import`` ones (a module import binds a module). A
statement is the history's when the history added that name's row with that module (a row of a parenthesized
list: the module of the list it stands in); a name imported from the same module by both is left alone (the
history moved it). A rule is a ``sites.Rule`` of kind ``import``; it does not carry to other documents.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import ClassVar

from edit_engine.edits import budget
from edit_engine.edits.patterns import Analysis, Change, imported_names, in_import_list
from edit_engine.edits.sites import Edit, Region, Rule

MAX_PYTHON_CHARS = 200_000  # a larger document is not read (its parse takes tens of milliseconds)
_FROM = re.compile(r"^\s*from\s+([\w.]+)\s+import\b")


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
    module = ""
    if listed:  # the module of the parenthesized list the change stands in
        for row in reversed(c.before):
            m = _FROM.match(row)
            if m:
                module = m.group(1)
                break
    out: list[tuple[str, str]] = []
    for row in c.added:
        m = _FROM.match(row)
        names = imported_names(row, listed and m is None)
        if m is not None or module:
            out += [(n, m.group(1) if m is not None else module) for n in names]
    return out


@dataclass(frozen=True)
class TwiceImportedRule(Rule):
    """Each name of ``pairs`` (name, module the history imported it from) leaves the document's other top-level
    ``from`` imports that bind it."""

    kind: ClassVar[str] = "import"
    pairs: frozenset[tuple[str, str]]

    def edits(self, r: Region) -> list[Edit]:
        if len(r.text) > MAX_PYTHON_CHARS:
            return []
        budget.spend(1 + len(r.text) // 64)
        try:
            tree = ast.parse(r.text)
        except (SyntaxError, ValueError):
            return []
        found = [s for s in tree.body if isinstance(s, ast.ImportFrom) and s.module != "__future__"]
        names = {n for n, _ in self.pairs}
        bound: dict[str, list[ast.ImportFrom]] = {}
        for s in found:
            for al in s.names:
                if (al.asname or al.name) in names:
                    bound.setdefault(al.asname or al.name, []).append(s)
        out: list[Edit] = []
        for s in found:
            gone = [al for al in s.names if (al.asname or al.name) in names
                    and (al.asname or al.name, _module(s)) not in self.pairs
                    and any((al.asname or al.name, _module(o)) in self.pairs for o in bound[al.asname or al.name])]
            if gone:
                out += _without(r, s, gone, self.kind, self.order)
        return out


def _module(s: ast.ImportFrom) -> str:
    """The module a ``from`` import names, as written (``.utils`` for a relative one)."""
    return "." * s.level + (s.module or "")


def _without(r: Region, s: ast.ImportFrom, gone: list[ast.alias], kind: str, order: int) -> list[Edit]:
    """The edits that take the names ``gone`` out of the import statement ``s`` (the whole statement when all of
    them go): the rows of a parenthesized list that hold only names that go are deleted; another run of names
    that go is cut up to the next name kept, or, at the list's end, from the name kept before it, with the
    commas and the line breaks between them."""
    first, last = s.lineno - 1, (s.end_lineno or s.lineno) - 1
    if len(gone) == len(s.names):
        return [_rows(r, first, last, kind, order)]
    spans = [(_offset(r, al.lineno, al.col_offset), _offset(r, al.end_lineno or al.lineno, al.end_col_offset or 0))
             for al in s.names]
    out: list[Edit] = []
    k = 0
    while k < len(s.names):
        if s.names[k] not in gone:
            k += 1
            continue
        j = k
        while j < len(s.names) and s.names[j] in gone:
            j += 1
        top, bottom = s.names[k].lineno - 1, (s.names[j - 1].end_lineno or s.lineno) - 1
        alone = first < top and bottom < last and all(
            k <= x < j for x, al in enumerate(s.names) if top <= al.lineno - 1 <= bottom)
        if alone and all(not re.sub(r"[\w.]+(?:\s+as\s+\w+)?|,", "", r.line(x)).strip() for x in range(top, bottom + 1)):
            out.append(_rows(r, top, bottom, kind, order))  # rows of a parenthesized list that hold only these
        elif j < len(s.names):  # "a, b, c" -> "c"
            out.append(Edit(spans[k][0], spans[j][0], "", kind, order))
        else:  # "a, b, c" -> "a"
            out.append(Edit(spans[k - 1][1], spans[j - 1][1], "", kind, order))
        k = j
    return out


def _offset(r: Region, lineno: int, col: int) -> int:
    """The document offset of ``ast``'s (line, byte column)."""
    line = r.line(lineno - 1)
    return r.starts[lineno - 1] + len(line.encode("utf-8", "surrogatepass")[:col].decode("utf-8", "ignore"))


def _rows(r: Region, first: int, last: int, kind: str, order: int) -> Edit:
    """An edit that deletes the rows ``first``..``last`` whole."""
    end = r.starts[last + 1] if last + 1 < len(r.starts) else r.end
    return Edit(r.starts[first], end, "", kind, order)
