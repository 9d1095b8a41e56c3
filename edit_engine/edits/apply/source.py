"""The original file and the definitions of a syntax tree, which every stage reads.

``definitions(doc)`` takes a parsed document and gives its named definitions (functions, classes, methods,
impl blocks, Go methods, ``const f = () => ...``), outer before inner, each with its rows, indentation and
qualified name; both the chunks' definitions (``definitions.analyse``) and the original's come from it.
``Source`` takes the original's lines and language and gives the index the stages match against: where each
line occurs (exactly, and ignoring whitespace), the original's definitions by name, and the definition around
a row. ``indent_width`` and ``norm`` (a line without its whitespace) are the line measures the stages share.
"""

from __future__ import annotations

import functools
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from edit_engine.edits import budget
from edit_engine.syntax import repair
from edit_engine.syntax import trees as syntax


def indent_width(line: str) -> int:
    return len(line) - len(line.lstrip())


# ---------------------------------------------------------------------------------------------------- definitions
@dataclass(frozen=True)
class Definition:
    """A named definition in a syntax tree. Rows are 0-based; ``start`` includes decorators and attributes,
    ``inner`` is the definition's own first row, ``body`` its body's first row, ``end`` the row after it."""

    name: str
    qual: tuple[str, ...]  # names from the top level down, this one last
    indent: int
    start: int
    inner: int
    body: int
    end: int
    parent: int  # index of the enclosing definition, -1 at the top level
    clean: bool  # no syntax error inside, and a body


_PLAIN = frozenset({
    "function_definition", "class_definition",  # Python
    "function_declaration", "generator_function_declaration", "class_declaration", "abstract_class_declaration",
    "method_definition", "interface_declaration", "type_alias_declaration", "enum_declaration",  # JS / TS (Go too)
    "function_item", "struct_item", "enum_item", "union_item", "trait_item", "mod_item", "macro_definition",
    "const_item", "static_item", "type_item", "function_signature_item",  # Rust
})
MAX_DEPTH = 64  # definitions nested deeper are not told apart (their qualified names would grow with the depth)
_WRAPPERS = {"decorated_definition": "definition", "export_statement": "declaration"}
_VALUES = frozenset({"arrow_function", "function_expression", "function", "generator_function", "class"})


def _text(doc: syntax.Document, node: Any) -> str:
    return doc.data[node.start_byte : node.end_byte].decode("utf-8", "replace")


def _named(doc: syntax.Document, node: Any) -> tuple[Any, str] | None:
    """(the definition node, its name) for a node that defines something, else None."""
    t = node.type
    if t in _WRAPPERS:
        inner = node.child_by_field_name(_WRAPPERS[t])
        return _named(doc, inner) if inner is not None else None
    if t in ("lexical_declaration", "variable_declaration"):  # const f = () => ...
        decl = [c for c in node.named_children if c.type == "variable_declarator"]
        value = decl[0].child_by_field_name("value") if len(decl) == 1 else None
        name = decl[0].child_by_field_name("name") if decl else None
        return (node, _text(doc, name)) if value is not None and value.type in _VALUES and name else None
    if t == "impl_item":
        trait, typ = node.child_by_field_name("trait"), node.child_by_field_name("type")
        head = f"{_text(doc, trait)} for " if trait is not None else ""
        return (node, f"impl {head}{_text(doc, typ)}") if typ is not None else None
    if t == "type_declaration":  # Go
        spec = next((c for c in node.named_children if c.type == "type_spec"), None)
        name = spec.child_by_field_name("name") if spec is not None else None
        return (node, _text(doc, name)) if name is not None else None
    if t == "method_declaration":  # Go: func (r *T) name
        name, recv = node.child_by_field_name("name"), node.child_by_field_name("receiver")
        if name is None:
            return None
        words = _text(doc, recv).strip("()").replace("*", " ").split() if recv is not None else []
        return node, (f"{words[-1]}." if words else "") + _text(doc, name)
    if t in _PLAIN:
        name = node.child_by_field_name("name")
        return (node, _text(doc, name)) if name is not None else None
    return None


def definitions(doc: syntax.Document, indent_base: int = 0) -> list[Definition]:
    """The named definitions of a parsed document, outer before inner: top-level ones and those in their bodies
    (methods, nested functions, impl members). ``indent_base`` is added to every indentation (a dedented chunk)."""
    out: list[Definition] = []
    if doc.tree is None:
        return out
    lines = doc.text.split("\n")
    _collect(doc, lines, doc.tree.root_node.named_children, out, indent_base)
    return out


def _collect(doc: syntax.Document, lines: list[str], nodes: list[Any], out: list[Definition], base: int) -> None:
    """Definitions in document order, each before the ones in its body, down to ``MAX_DEPTH`` levels (deeper
    ones are part of the body around them)."""
    # Each frame: the sibling nodes left to visit, their parent's index and qualified name, the attribute row.
    stack: list[tuple[Iterator[Any], int, tuple[str, ...]]] = [(iter(nodes), -1, ())]
    attrs: list[int | None] = [None]  # first row of the attribute items right before a Rust item, per frame
    while stack:
        it, parent, qual = stack[-1]
        node = next(it, None)
        if node is None:
            stack.pop()
            attrs.pop()
            continue
        if node.type == "attribute_item":
            attrs[-1] = node.start_point.row if attrs[-1] is None else attrs[-1]
            continue
        found = _named(doc, node)
        if found is None:
            attrs[-1] = None
            continue
        inner, name = found
        first = attrs[-1]
        start = node.start_point.row if first is None else min(first, node.start_point.row)
        attrs[-1] = None
        end = node.end_point.row + (0 if node.end_point.column == 0 and node.end_point.row > start else 1)
        body = inner.child_by_field_name("body")
        hollow = body is not None and body.end_byte <= body.start_byte  # a header whose body is not there
        idx = len(out)
        out.append(Definition(name, (*qual, name), base + indent_width(lines[start]), start,
                              inner.start_point.row, body.start_point.row if body is not None else end, end, parent,
                              not node.has_error and not hollow))
        if body is not None and len(stack) < MAX_DEPTH:
            stack.append((iter(body.named_children), idx, (*qual, name)))
            attrs.append(None)


# ---------------------------------------------------------------------------------------------------- the original
def norm(line: str) -> str:
    return "".join(line.split())


def broken_line(text: str, language: str) -> int | None:
    """The first line (1-based) where ``text`` does not parse, Python's parser for Python and tree-sitter for the
    others; None where it parses (or the language has no grammar)."""
    if language == "python":
        err = repair.python_error(text)
        return None if err is None else text.count("\n", 0, err[0]) + 1
    tree = syntax.Document.parse(text, language).tree
    bad = [n.start_point[0] + 1 for n in syntax.broken_nodes(tree)] if tree is not None else []
    return min(bad) if bad else None


class Source:
    """The original file: its lines, an index of where each line (and each line without whitespace) occurs, and
    its definitions."""

    def __init__(self, lines: list[str], language: str) -> None:
        self.lines = lines
        self.n = len(lines)
        self.norm = [norm(x) for x in lines]
        self.exact: dict[str, list[int]] = {}
        self.loose: dict[str, list[int]] = {}
        for i, (x, y) in enumerate(zip(lines, self.norm, strict=True)):
            self.exact.setdefault(x, []).append(i)
            self.loose.setdefault(y, []).append(i)
        self.language = language
        self.grammar = syntax.load(language)
        self.defs = definitions(syntax.Document.parse("\n".join(lines), language)) if lines else []
        self.by_name: dict[str, list[int]] = {}
        for i, d in enumerate(self.defs):
            self.by_name.setdefault(d.name, []).append(i)

    @functools.cached_property
    def broken(self) -> bool:
        """The original does not parse, or its language has no grammar: a parse says nothing of a merge."""
        return not self.grammar.has_tree or broken_line("\n".join(self.lines), self.language) is not None

    def parses(self, lines: list[str]) -> bool | None:
        """Whether ``lines`` parse (``broken_line``); None when the original itself does not (nothing to tell)."""
        return None if self.broken else broken_line("\n".join(lines), self.language) is None

    def same(self, row: int, line: str) -> bool:
        return 0 <= row < self.n and (self.lines[row] == line or self.norm[row] == norm(line))

    def where(self, line: str, lo: int, hi: int) -> tuple[list[int], bool]:
        """Rows in [lo, hi) holding ``line``: exact matches, else matches ignoring whitespace (second: loose)."""
        budget.spend(1)
        for table, key, loose in ((self.exact, line, False), (self.loose, norm(line), True)):
            rows = table.get(key)
            if rows:
                got = rows[bisect_left(rows, lo) : bisect_left(rows, hi)]
                if got:
                    return got, loose
        return [], False

    def container(self, row: int, indent: int) -> int:
        """The innermost definition around ``row`` indented less than ``indent`` (-1: the top level)."""
        best = -1
        budget.spend(len(self.defs))
        for i, d in enumerate(self.defs):
            if d.start <= row < d.end and d.indent < indent:
                best = i
        return best

    def scope(self, row: int, indent: int, lo: int, hi: int) -> tuple[int, int] | None:
        """[lo, hi) narrowed to the body of ``container(row, indent)``; None at the top level."""
        c = self.container(row, indent) if row >= 0 else -1
        if c < 0:
            return None
        d = self.defs[c]
        return max(lo, d.body), min(hi, d.end)

    def region(self, row: int, indent: int) -> tuple[int, int]:
        """The rows of ``container(row, indent)``; the whole file at the top level."""
        c = self.container(row, indent)
        return (self.defs[c].start, self.defs[c].end) if c >= 0 else (0, self.n)

    def top_level_def_in(self, lo: int, hi: int) -> bool:
        budget.spend(len(self.defs))
        return any(d.parent < 0 and lo <= d.inner < hi for d in self.defs)
