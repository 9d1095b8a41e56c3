"""From a document and a cursor (or selection) to the span to fill and the canvas to start with.

This is the line-based planner: it works for every language. Syntax-aware planning (tree-sitter) refines it
per language where a grammar is installed.

Span kinds:
- ``selection``: rewrite exactly the selection.
- ``in_line``: code follows the cursor on its line; fill between (single line).
- ``rest_of_line``: the cursor ends a non-empty line; complete the line (single line).
- ``block_body``: the cursor ends a block header (``:`` / ``{`` / ``(`` / ``[`` at line end); a multi-line body.
- ``statement``: the cursor is on a blank line; one or more statements.
"""

from __future__ import annotations

from dataclasses import dataclass

BLOCK_OPENERS = (":", "{", "(", "[", "=>")


@dataclass(frozen=True)
class Plan:
    start: int  # character offset where the replaced span starts
    end: int  # character offset where it ends (== start for an insertion)
    kind: str  # see module doc
    initial_canvas: int  # canvas slots to start with
    max_tokens: int  # the canvas never grows past this
    single_line: bool  # cut the fill at its first newline

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"bad span [{self.start}, {self.end})")


def _bucket(n: int) -> int:
    b = 4
    while b < n:
        b *= 2
    return b


def plan(text: str, offset: int, selection: tuple[int, int] | None = None,
         max_tokens: int | None = None) -> Plan:
    """Choose the span to fill. ``offset`` and ``selection`` are character offsets into ``text``."""
    if not 0 <= offset <= len(text):
        raise ValueError(f"cursor offset {offset} outside the document (length {len(text)})")
    if selection is not None:
        s, e = selection
        if not 0 <= s <= e <= len(text):
            raise ValueError(f"selection [{s}, {e}) outside the document (length {len(text)})")
        approx = max(1, (e - s) // 3)
        cap = max_tokens or min(256, max(64, 2 * approx))
        return Plan(s, e, "selection", min(cap, _bucket(approx)), cap, False)
    ls = text.rfind("\n", 0, offset) + 1
    le = text.find("\n", offset)
    le = len(text) if le < 0 else le
    before, after = text[ls:offset], text[offset:le]
    if after.strip():
        cap = max_tokens or 32
        return Plan(offset, offset, "in_line", min(cap, 8), cap, True)
    stripped = before.rstrip()
    if stripped.endswith(BLOCK_OPENERS):
        cap = max_tokens or 128
        return Plan(offset, offset, "block_body", min(cap, 32), cap, False)
    if not stripped:
        cap = max_tokens or 64
        return Plan(offset, offset, "statement", min(cap, 16), cap, False)
    cap = max_tokens or 48
    return Plan(offset, offset, "rest_of_line", min(cap, 16), cap, True)
