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

from . import postprocess, syntax
from .plan import Plan

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
    g = doc.grammar
    has_tree = doc.tree is not None
    unit = postprocess.detect_indent(text[max(0, offset - 20_000) : offset + 20_000], g.indent)

    def mk(start: int, end: int, kind: str, initial: int, cap: int, single: bool, indent: str = "",
           lead: str = "", trail: str = "", stop: str = "", code: bool = True, close: str = "",
           indents: tuple[str, ...] = ()) -> Plan:
        return Plan(start, end, kind, min(cap, initial), cap, single, g.name, indent, unit, lead, trail, stop,
                    code, has_tree and code, close, indents)

    if selection is not None:
        s, e = selection
        if not 0 <= s <= e <= len(text):
            raise ValueError(f"selection [{s}, {e}) outside the document (length {len(text)})")
        approx = max(1, (e - s) // 3)
        cap = max_tokens or min(256, max(64, 2 * approx))
        ls, _ = _line_at(text, s)
        return mk(s, e, "selection", _bucket(approx), cap, False, _indent_of(text[ls:s]))
    ls, le = _line_at(text, offset)
    before, after = text[ls:offset], text[offset:le]
    indent = _indent_of(before)
    caps = doc.captures_at(offset) if has_tree else {}
    b = len(text[:offset].encode("utf-8", "surrogatepass")) if caps else 0

    # Inside a comment or a string: plain text that continues the line.
    for node in caps.get("comment", []):
        closer = g.block_comment[1] if g.block_comment else ""
        node_text = doc.data[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")
        closed = bool(closer) and node_text.endswith(closer) and len(node_text) >= 4 and g.block_comment is not None \
            and node_text.startswith(g.block_comment[0])
        if node.start_byte < b < node.end_byte or (b == node.end_byte and not closed):
            return mk(offset, offset, "comment", 8, max_tokens or 32, True, indent, stop=closer if closed else "",
                      code=False)
    for node in reversed(caps.get("string", [])):
        if node.start_byte < b < node.end_byte:
            node_text = doc.data[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")
            return mk(offset, offset, "string", 8, max_tokens or 32, True, indent,
                      stop=_string_closer(node_text, g.quotes), code=False)

    stripped = before.rstrip()
    if after.strip():
        # "{|}" (an editor auto-closed the brace): a block body between.
        closer = dict(g.brackets).get(stripped[-1:], "") if stripped else ""
        if closer and stripped[-1:] in g.block_openers and after.strip()[0] == closer and stripped[-1] == "{":
            return mk(offset, offset, "block_body", 32, max_tokens or 128, False, indent, "\n" + indent + unit,
                      "\n" + indent)
        # Inside brackets that close on this line: fill the arguments only.
        for node in reversed(caps.get("brackets", [])):
            kids = node.children
            opener = next((k for k in kids if k.type in dict(g.brackets)), None)
            last = kids[-1] if kids else None
            if opener is None or last is None or last.type != dict(g.brackets).get(opener.type):
                continue
            if not opener.end_byte <= b <= last.start_byte:
                continue
            close_at = doc.char(last.start_byte)
            if close_at > le:  # closes on a later line
                continue
            end = close_at if not text[offset:close_at].strip() else offset
            return mk(offset, end, "in_brackets", 8, max_tokens or 32, True, indent)
        return mk(offset, offset, "in_line", 8, max_tokens or 32, True, indent)
    openers = g.block_openers if has_tree else BLOCK_OPENERS
    if stripped.endswith(openers):
        return mk(offset, offset, "block_body", 32, max_tokens or 128, False, indent, "\n" + indent + unit)
    if not stripped:
        target = _statement_indent(text, doc, offset, ls, unit, openers)
        lead = target if not before else ""
        close = _header_close(text, offset, le, before or target, g)
        if close:
            return mk(offset, offset, "header", 16, max_tokens or 48, True, before or target, lead, close=close)
        indents = () if before or not has_tree else candidate_indents(text, ls, le, unit, openers, g.line_comment)
        return mk(offset, offset, "statement", 16, max_tokens or 64, False, before or target, lead,
                  indents=indents if target in indents else ())
    words = stripped.split(None, 1)
    close = _header_close(text, offset, le, indent, g) if words and words[0] in g.header_keywords else ""
    # 8 slots to start (the canvas grows when a line needs more): on held-out single lines it fills as well as
    # 16 and, typing into a document, takes 2.2 passes per fill instead of 3.5 (BENCHMARKS.md, "Results").
    return mk(offset, offset, "rest_of_line", 8, max_tokens or 48, True, indent, close=close)


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
