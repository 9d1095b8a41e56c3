"""Whether a suggestion can still become code that parses: the check a draft passes before it is shown.

A draft from the memory of code may stop anywhere: after ``code=``, inside a call opened lines before, in a
block header whose ``:`` and body are still to come. What it must never hold is an error no continuation can
mend (``while index = 0.0:``, ``csv.0(``). Python asks its own parser about the statement so far, from the
statement's start (``may_continue``); other languages try tree-sitter on likely endings (``endings``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from typing import Protocol

from edit_engine.engine import drafts
from edit_engine.syntax import positions, postprocess
from edit_engine.syntax.plan import Plan
from edit_engine.syntax.trees import Document


class DocumentPlan(Protocol):
    """What the check reads of a planned document request (``document.DocumentPlan``)."""

    @property
    def text(self) -> str: ...

    @property
    def doc(self) -> Document: ...

    @property
    def plan(self) -> Plan: ...

    @property
    def suffix_closers(self) -> tuple[str, ...]: ...

STATEMENT_CHARS = 4000  # how far back a statement's start is looked for
# Tree-sitter node types whose children are statements (the languages served).
BLOCKS = frozenset({"module", "block", "program", "source_file", "statement_block", "declaration_list",
                    "class_body", "field_declaration_list"})

_WRAP = "async def _():\n while _:\n  "  # where return, await, yield, break and continue are all allowed
_LEADS = {"else": "if _:\n   pass\n  ", "elif": "if _:\n   pass\n  ", "except": "try:\n   pass\n  ",
          "finally": "try:\n   pass\n  ", "case": "match _:\n   "}
_ONLY_AST = 0x400  # ast.PyCF_ONLY_AST: parse, do not compile
_DRAFT_FILE = "<draft>"
# The parser warns of odd literals (``1_``) on stderr; a draft being judged is not the user's code.
warnings.filterwarnings("ignore", category=SyntaxWarning, module=re.escape(_DRAFT_FILE))


def can_continue(dp: DocumentPlan, text: str, parses: Callable[[str], bool]) -> bool:
    """Whether ``text`` at the cursor of ``dp`` can still become code that parses. ``parses(fill)``: whether the
    document parses with ``fill`` at the cursor (the plan's check)."""
    if dp.doc.grammar.compile_check == "python" and dp.plan.code:  # (in a string or comment: the tree's check)
        start = statement_start(dp)
        column = start - (dp.text.rfind("\n", 0, start) + 1)
        return may_continue(dedent(dp.text[start : dp.plan.start], column), text)
    return any(parses(text + ending) for ending in endings(dp, text))


def dedent(statement: str, column: int) -> str:
    """A statement that starts at ``column`` of its first line, its later lines moved left as far (at most)."""
    if column <= 0 or "\n" not in statement:
        return statement
    first, *rest = statement.split("\n")
    return "\n".join([first, *(line[min(column, len(line) - len(line.lstrip(" \t"))) :] for line in rest)])


def may_continue(statement: str, draft: str) -> bool:
    """Whether Python code ``statement + draft`` (a statement so far, then the draft) is valid or could still
    become so: closed (the strings and brackets it leaves open), as it stands or followed by a name, it parses,
    or its first error lies past the draft's end (what is missing is yet to be written: ``for job`` still needs
    ``in``). An error inside the draft (``while index = 0``, ``csv.0(``) means no continuation can mend it."""
    body = statement + draft
    words = body.split(None, 1)
    lead = _LEADS.get(words[0].rstrip(":"), "") if words else ""
    head = _WRAP + lead + body.replace("\n", "\n  ")
    # (a name after it: some errors at the end are reported where the construct began, ``{'key':}`` at its ":")
    return any(_parses_past(head, head + tail + drafts.closers(body + tail)) for tail in ("", " _"))


def _parses_past(head: str, src: str) -> bool:
    """Whether ``src`` parses, or its first error lies at or after ``len(head)``."""
    try:
        compile(src, _DRAFT_FILE, "exec", flags=_ONLY_AST, dont_inherit=True)
        return True
    except SyntaxError as e:
        if e.lineno is None:
            return False
        if "expected 'else'" in str(e.msg):  # a conditional expression so far, reported at its start
            return True
        lines = src.split("\n")
        at = sum(len(line) + 1 for line in lines[: e.lineno - 1]) + max(e.offset or 1, 1) - 1
        return at >= len(head)
    except (ValueError, MemoryError, RecursionError):  # a NUL character; nesting too deep for the parser
        return False


def endings(dp: DocumentPlan, text: str) -> Iterator[str]:
    """Ways the code could go on after ``text``, likeliest first: as it stands, ended by a name or followed by
    one; then the string it leaves open closed, and the brackets open since the statement's start that the
    suffix does not close; where its line is a block header (Python's ``if``, ``def``, ...), the header's end
    and a body."""
    g = dp.doc.grammar
    near = dp.text[statement_start(dp) : dp.plan.start] + text
    pairs = dict(g.brackets)
    still = postprocess.open_brackets(near, g)
    still = still[: max(0, len(still) - len(dp.suffix_closers))]  # the suffix closes the innermost ones
    close = drafts.open_quote(text) + "".join(pairs.get(o, "") for o in reversed(still))
    line = dp.text[dp.text.rfind("\n", 0, dp.plan.start) + 1 : dp.plan.start] + text
    words = line.split(None, 1)
    header = bool(g.header_end and words and words[0].rstrip(g.header_end) in g.header_keywords)
    body = "\n" + line[: len(line) - len(line.lstrip())] + g.indent + "pass"
    end = g.header_end or ""
    for tail in ("", "_", " _"):  # as it stands, ended by a name, or followed by one (after a keyword)
        if header:  # never parses without its end (as it stands it passes only by an error already there)
            yield tail + close + ("" if (text + tail + close).rstrip().endswith(end) else end) + body
        if not header or end in line:  # (a one-line block, or an end inside brackets: a slice, a lambda)
            yield tail + close


def statement_start(dp: DocumentPlan) -> int:
    """Where the statement the cursor is in starts: at the cursor when it starts a line's code; else the node
    of the code before it raised to a child of a block (tree-sitter), never more than ``STATEMENT_CHARS`` back
    (then a line start that near, as for a document without a tree). A node starts between tokens, so a scan
    from there never begins inside a string."""
    cursor = dp.plan.start
    text = dp.text
    line_start = text.rfind("\n", 0, cursor) + 1
    before = text[line_start:cursor].rstrip()
    if not before.strip():
        return cursor
    floor = max(0, cursor - STATEMENT_CHARS)
    near_line = text.rfind("\n", 0, floor) + 1 if floor else 0
    tree = dp.doc.tree
    if tree is None:
        return near_line
    b = positions.byte_offset(text, line_start + len(before) - 1)  # the last character of code before the cursor
    node = tree.root_node.descendant_for_byte_range(b, b)
    while node is not None and node.parent is not None and node.parent.type not in BLOCKS:
        node = node.parent
    start = positions.char_offset(text, node.start_byte) if node is not None else 0
    return start if start >= floor else near_line
