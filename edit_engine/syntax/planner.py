"""From a document and a cursor (or selection) to the span to fill, the canvas to start with, and how to
finish the fill (``postprocess.finish``) and check it (``repair``).

Every language gets the line-based rules; where a grammar is installed (``grammars/<language>/``) the syntax
tree refines them: comments and strings are recognised, a cursor inside brackets fills only up to the
enclosing construct's closer, and statement indentation comes from the enclosing block.

Span kinds:
- ``selection``: rewrite exactly the selection.
- ``comment`` / ``string``: the cursor is inside a comment or a string: plain text continuing that line (cut
  at the string's closing quote or a block comment's ``*/``). Not checked by the parser.
- ``in_brackets``: code follows the cursor on its line and the cursor is inside a bracketed construct that
  closes on this line (``max(|)``): a single-line fill; the span runs to the closer when only blanks lie
  between, and the fill may not close the construct itself.
- ``in_line``: code follows the cursor on its line; fill between (single line).
- ``rest_of_line``: the cursor ends a non-empty line; complete the line (single line).
- ``block_body``: the cursor ends a block header (``def f(x):``, ``if …:``, ``{``; also ``{|}``): a multi-line
  body on new lines, one indentation level deeper than the header.
- ``statement``: the cursor is on a blank line: one or more statements at the block's indentation.
- ``header``: the cursor is on a blank line and the next code line is indented deeper than the statement would
  be, outside any bracket: in a language whose grammar sets ``header_end`` (Python ``:``) only a block header
  can stand there, so the fill is one line that ends with it (``close``). A ``rest_of_line`` span whose line
  starts with a header keyword (``if``, ``for``, ...) gets the same ``close`` when a deeper line follows.

``close`` is text the fill must end with that the model is shown too, as the start of its suffix: the model
writes ``for i in range(n)`` before a ``:`` it can see, instead of guessing that a header belongs there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from edit_engine.syntax import postprocess
from edit_engine.syntax import trees as syntax
from edit_engine.syntax.plan import Plan

if TYPE_CHECKING:
    from typing_extensions import Unpack

BLOCK_OPENERS = (":", "{", "(", "[", "=>")
KINDS = ("selection", "comment", "string", "in_brackets", "in_line", "rest_of_line", "block_body", "statement",
         "header")


def _bucket(n: int) -> int:
    b = 4
    while b < n:
        b *= 2
    return b


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _line_at(text: str, offset: int) -> tuple[int, int]:
    """(start, end) of the line holding ``offset`` (end before its line break)."""
    ls = max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1
    le = len(text)
    for sep in ("\n", "\r"):
        j = text.find(sep, offset)
        if 0 <= j < le:
            le = j
    return ls, le


def _prev_code_line(text: str, ls: int) -> str:
    """The nearest non-blank line before the line starting at ``ls`` ("" if none)."""
    i = ls
    while i > 0:
        ps = text.rfind("\n", 0, i - 1) + 1
        line = text[ps : i - 1].rstrip("\r")
        if line.strip():
            return line
        i = ps
    return ""


def _string_closer(node_text: str, quotes: tuple[str, ...]) -> str:
    """The closing delimiter of a string literal's text (``"``, ``'''``, a backtick, ``"#``)."""
    t = node_text.rstrip("#")
    hashes = node_text[len(t) :]
    for q in sorted((q * 3 for q in quotes if q in "\"'"), key=len, reverse=True) + list(quotes):
        if t.endswith(q) and len(t) >= 2 * len(q):
            return q + hashes
    return ""


def plan(text: str, offset: int, selection: tuple[int, int] | None = None,
         max_tokens: int | None = None, language: str = "plaintext",
         doc: syntax.Document | None = None) -> Plan:
    """Choose the span to fill. ``offset`` and ``selection`` are character offsets into ``text``.

    ``doc`` (a parsed ``syntax.Document`` of ``text``) saves a parse; without it one is made for ``language``.
    An unknown language gets the line-based rules.
    """
    if not 0 <= offset <= len(text):
        raise ValueError(f"cursor offset {offset} outside the document (length {len(text)})")
    if doc is None or doc.text != text:
        doc = syntax.Document.parse(text, language)
    unit = postprocess.detect_indent(text[max(0, offset - 20_000) : offset + 20_000], doc.grammar.indent)
    if selection is not None:
        return _selection_plan(_Cursor(text, offset, max_tokens, doc, unit), selection)
    ls, le = _line_at(text, offset)
    caps = doc.captures_at(offset) if doc.tree is not None else {}
    b = len(text[:offset].encode("utf-8", "surrogatepass")) if caps else 0
    cur = _Cursor(text, offset, max_tokens, doc, unit, ls, le, caps, b)
    inside = _comment_or_string_plan(cur)
    if inside is not None:
        return inside
    if cur.after.strip():
        return _mid_line_plan(cur)
    openers = cur.g.block_openers if cur.has_tree else BLOCK_OPENERS
    stripped = cur.before.rstrip()
    if stripped.endswith(openers):
        return cur.make("block_body", 32, 128, False, cur.indent, lead="\n" + cur.indent + unit)
    if not stripped:
        return _blank_line_plan(cur, openers)
    words = stripped.split(None, 1)
    g = cur.g
    close = _header_close(text, offset, le, cur.indent, g) if words and words[0] in g.header_keywords else ""
    # 8 slots to start (the canvas grows when a line needs more): on held-out single lines it fills as well as
    # 16 and, typing into a document, takes 2.2 passes per fill instead of 3.5 (docs/results-archive-2026-12-05.md, 2026-11-30,
    # "A rest-of-line plan starts from an 8-slot canvas").
    return cur.make("rest_of_line", 8, 48, True, cur.indent, close=close)


class _Extras(TypedDict, total=False):
    """``Plan`` fields a span kind may set (``_Cursor.make``)."""

    lead: str
    trail: str
    stop: str
    code: bool
    close: str
    indents: tuple[str, ...]


@dataclass(frozen=True)
class _Cursor:
    """What ``plan`` knows about the cursor: the document, its indentation unit, the cursor's line ``[ls, le)``,
    the syntax captures around the cursor and its byte offset ``b`` (0 without captures)."""

    text: str
    offset: int
    max_tokens: int | None  # the caller's cap on the fill (None: each kind's default)
    doc: syntax.Document
    unit: str
    ls: int = 0
    le: int = 0
    caps: dict[str, list[Any]] = field(default_factory=dict)
    b: int = 0

    @property
    def g(self) -> syntax.Grammar:
        return self.doc.grammar

    @property
    def has_tree(self) -> bool:
        return self.doc.tree is not None

    @property
    def before(self) -> str:
        """The cursor's line up to the cursor."""
        return self.text[self.ls : self.offset]

    @property
    def after(self) -> str:
        """The cursor's line from the cursor on."""
        return self.text[self.offset : self.le]

    @property
    def indent(self) -> str:
        return _indent_of(self.before)

    def make(self, kind: str, initial: int, cap: int, single: bool, indent: str = "",
             span: tuple[int, int] | None = None, **extras: Unpack[_Extras]) -> Plan:
        """The plan for a fill of ``kind`` over ``span`` (default: an insertion at the cursor), starting with
        ``initial`` canvas slots and capped at the caller's ``max_tokens`` or else ``cap``."""
        start, end = span if span is not None else (self.offset, self.offset)
        cap = self.max_tokens or cap
        return Plan(start, end, kind, min(cap, initial), cap, single, self.g.name, indent, self.unit,
                    check=self.has_tree and extras.get("code", True), **extras)


def _selection_plan(cur: _Cursor, selection: tuple[int, int]) -> Plan:
    """Rewrite exactly the selection, with a canvas sized from its length (about 3 characters a token)."""
    text = cur.text
    s, e = selection
    if not 0 <= s <= e <= len(text):
        raise ValueError(f"selection [{s}, {e}) outside the document (length {len(text)})")
    approx = max(1, (e - s) // 3)
    ls, _ = _line_at(text, s)
    return cur.make("selection", _bucket(approx), min(256, max(64, 2 * approx)), False, _indent_of(text[ls:s]),
                    span=(s, e))


def _comment_or_string_plan(cur: _Cursor) -> Plan | None:
    """Inside a comment or a string: plain text that continues the line (cut at a block comment's closer or the
    string's closing quote). None when the cursor is in neither."""
    g, doc, b = cur.g, cur.doc, cur.b
    caps = cur.caps
    for node in caps.get("comment", []):
        closer = g.block_comment[1] if g.block_comment else ""
        node_text = doc.data[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")
        closed = bool(closer) and node_text.endswith(closer) and len(node_text) >= 4 and g.block_comment is not None \
            and node_text.startswith(g.block_comment[0])
        if node.start_byte < b < node.end_byte or (b == node.end_byte and not closed):
            return cur.make("comment", 8, 32, True, cur.indent, stop=closer if closed else "", code=False)
    for node in reversed(caps.get("string", [])):
        if node.start_byte < b < node.end_byte:
            node_text = doc.data[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")
            return cur.make("string", 8, 32, True, cur.indent, stop=_string_closer(node_text, g.quotes), code=False)
    return None


def _mid_line_plan(cur: _Cursor) -> Plan:
    """Code follows the cursor on its line: a block body inside an auto-closed ``{|}``, the arguments of
    brackets that close on this line, or else the text between (single line)."""
    g, indent, stripped = cur.g, cur.indent, cur.before.rstrip()
    # "{|}" (an editor auto-closed the brace): a block body between.
    closer = dict(g.brackets).get(stripped[-1:], "") if stripped else ""
    if closer and stripped[-1:] in g.block_openers and cur.after.strip()[0] == closer and stripped[-1] == "{":
        return cur.make("block_body", 32, 128, False, indent, lead="\n" + indent + cur.unit, trail="\n" + indent)
    # Inside brackets that close on this line: fill the arguments only.
    for node in reversed(cur.caps.get("brackets", [])):
        kids = node.children
        opener = next((k for k in kids if k.type in dict(g.brackets)), None)
        last = kids[-1] if kids else None
        if opener is None or last is None or last.type != dict(g.brackets).get(opener.type):
            continue
        if not opener.end_byte <= cur.b <= last.start_byte:
            continue
        close_at = cur.doc.char(last.start_byte)
        if close_at > cur.le:  # closes on a later line
            continue
        end = close_at if not cur.text[cur.offset : close_at].strip() else cur.offset
        return cur.make("in_brackets", 8, 32, True, indent, span=(cur.offset, end))
    return cur.make("in_line", 8, 32, True, indent)


def _blank_line_plan(cur: _Cursor, openers: tuple[str, ...]) -> Plan:
    """The cursor is on a blank line: a block header when a deeper line follows (``header``), else statements at
    the block's indentation, with the candidate indentations when the code around leaves it open."""
    text, offset, le, unit, before = cur.text, cur.offset, cur.le, cur.unit, cur.before
    target = _statement_indent(text, cur.doc, offset, cur.ls, unit, openers)
    lead = target if not before else ""
    close = _header_close(text, offset, le, before or target, cur.g)
    if close:
        return cur.make("header", 16, 48, True, before or target, lead=lead, close=close)
    indents = () if before or not cur.has_tree else candidate_indents(text, cur.ls, le, unit, openers,
                                                                       cur.g.line_comment)
    return cur.make("statement", 16, 64, False, before or target, lead=lead,
                    indents=indents if target in indents else ())


def candidate_indents(text: str, ls: int, le: int, unit: str, openers: tuple[str, ...],
                      comment: str | None) -> tuple[str, ...]:
    """The indentations a statement on the blank line ``[ls, le)`` could take when the code around leaves it
    open, deepest first: the previous code line is not a header and is indented deeper than the next one, so
    the line may continue the previous block or any block it closes, down to the next line's level (``if x:\n
    y = 1\n|\nz = 2``: ``y``'s level or ``z``'s). () when only one level fits, or the levels are not whole units
    of the document's indentation."""
    prev, nxt = _prev_code_line(text, ls), _next_code_line(text, le, comment)
    if not prev or prev.rstrip().endswith(openers) or prev.rstrip().endswith("\\"):
        return ()
    p, n = _indent_of(prev), _indent_of(nxt) if nxt else ""
    if not p.startswith(n) or len(p) <= len(n) or not unit:
        return ()
    extra = p[len(n) :]
    k, rem = divmod(len(extra), len(unit))
    if rem or extra != unit * k:
        return ()
    return tuple(n + unit * i for i in range(k, -1, -1))


def _columns(ws: str) -> int:
    return len(ws.replace("\t", " " * postprocess.TAB_WIDTH))


def _next_code_line(text: str, le: int, comment: str | None) -> str:
    """The nearest line after the line ending at ``le`` that is neither blank nor only a comment ("" if none)."""
    i = le
    while i < len(text):
        j = text.find("\n", i + 1)
        line = text[i + 1 : len(text) if j < 0 else j].rstrip("\r")
        body = line.strip()
        if body and not (comment and body.startswith(comment)):
            return line
        if j < 0:
            break
        i = j
    return ""


def _header_close(text: str, offset: int, le: int, indent: str, g: syntax.Grammar) -> str:
    """``g.header_end`` when the fill's line (at ``indent``) must be a block header: the next code line is
    indented deeper and no bracket is open at the cursor (a deeper line inside brackets is a continuation); else
    "". Only for grammars that set ``header_end`` (indentation-sensitive languages)."""
    if not g.header_end:
        return ""
    nxt = _next_code_line(text, le, g.line_comment)
    if not nxt or _columns(_indent_of(nxt)) <= _columns(indent):
        return ""
    around, _ = postprocess.bracket_context(text[max(0, offset - 8192) : offset], "", g)
    if around or _prev_code_line(text, _line_at(text, offset)[0]).rstrip().endswith("\\"):
        return ""
    return g.header_end


def _statement_indent(text: str, doc: syntax.Document, offset: int, ls: int, unit: str,
                      openers: tuple[str, ...]) -> str:
    """Indentation for statements on the blank line starting at ``ls``: one level under a header on the line
    before; else the first statement of the innermost enclosing block; else the previous code line's."""
    prev = _prev_code_line(text, ls)
    if prev.rstrip().endswith(openers):
        return _indent_of(prev) + unit
    caps = doc.captures_at(offset) if doc.tree is not None else {}
    b = len(text[:offset].encode("utf-8", "surrogatepass"))
    for node in reversed(caps.get("block", [])):
        if not node.start_byte < b < node.end_byte:
            continue
        first = next((k for k in node.named_children if not k.is_extra), None)
        if first is None:
            continue
        fs = doc.char(first.start_byte)
        fl = text.rfind("\n", 0, fs) + 1
        if not text[fl:fs].strip():  # the block's first statement starts its line
            return text[fl:fs]
    return _indent_of(prev)
