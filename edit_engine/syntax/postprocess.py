"""From the model's raw fill to the text inserted at the plan's span.

``finish`` applies, in order:

1. cut at the first newline for single-line spans, and at the plan's ``stop`` text (a string's closing quote,
   a block comment's ``*/``);
2. code spans only: keep brackets balanced inside the span: cut at a closer the suffix already provides (the
   fill would close the enclosing construct a second time, e.g. ``max(a, b))``) or that does not match, and
   append the closers of brackets the fill opened and left open;
3. drop a tail that merely repeats the start of the suffix;
4. multi-line spans: normalise indentation to the document's unit (tabs or spaces, width), put the first line at
   the plan's indentation (``lead``) and end with the plan's ``trail`` (the line break before an auto-closed
   ``}``);
5. end with the plan's ``close`` (a block header's ``:``, which the model saw as the start of its suffix; a
   fill that wrote it itself is not given a second one). An empty fill stays empty.

Brackets are scanned outside strings and comments with a small lexer driven by the grammar's settings.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from edit_engine.syntax.plan import Plan
from edit_engine.syntax.trees import Grammar

_WS = re.compile(r"\s+")
TAB_WIDTH = 4  # columns of a tab when a tab-indented document meets space-indented text


def detect_indent(text: str, default: str = "    ") -> str:
    """The document's indentation unit: ``"\\t"`` or a run of spaces: the widest of 8, 4, 3, 2 that divides at
    least 90% of the space indents (aligned continuation lines are the other 10%)."""
    tabs = spaces = 0
    widths: list[int] = []
    for line in text.splitlines()[:5000]:
        if not line.strip():
            continue
        if line[0] == "\t":
            tabs += 1
        elif line[0] == " ":
            spaces += 1
            widths.append(len(line) - len(line.lstrip(" ")))
    if tabs == spaces == 0:
        return default
    if tabs > spaces:
        return "\t"
    for unit in (8, 4, 3, 2):
        if sum(w % unit == 0 for w in widths) >= 0.9 * len(widths):
            return " " * unit
    return default


def _levels(ws: str, unit: str) -> tuple[int, int]:
    """(indentation levels, leftover spaces) of leading whitespace ``ws`` in ``unit``s."""
    width = TAB_WIDTH if unit == "\t" else max(1, len(unit))
    cols = sum(width if c == "\t" else 1 for c in ws)
    return cols // width, cols % width


def reindent(lines: list[str], model_base: str, target_base: str, model_unit: str, doc_unit: str) -> list[str]:
    """Re-indent lines 1.. of a fill: levels relative to ``model_base`` become levels relative to ``target_base``
    in the document's unit. Line 0 is left alone (its indentation is decided by the caller)."""
    base_lv, _ = _levels(model_base, model_unit)
    target_lv, target_rem = _levels(target_base, doc_unit)
    out = lines[:1]
    for line in lines[1:]:
        body = line.lstrip(" \t")
        if not body:
            out.append("")
            continue
        lv, rem = _levels(line[: len(line) - len(body)], model_unit)
        new_lv = target_lv + lv - base_lv
        out.append(doc_unit * max(0, new_lv) + " " * (target_rem + rem) + body)
    return out


def code_brackets(text: str, g: Grammar) -> Iterator[tuple[int, str]]:
    """(index, bracket) for every bracket of ``text`` outside strings and comments."""
    pairs = dict(g.brackets)
    closers = set(pairs.values())
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if g.line_comment and text.startswith(g.line_comment, i):
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if g.block_comment and text.startswith(g.block_comment[0], i):
            j = text.find(g.block_comment[1], i + len(g.block_comment[0]))
            i = n if j < 0 else j + len(g.block_comment[1])
            continue
        if c in g.quotes:
            delim = c * 3 if c in "\"'" and text.startswith(c * 3, i) else c
            j = i + len(delim)
            while j < n and not text.startswith(delim, j):
                if text[j] == "\\":
                    j += 1
                elif text[j] == "\n" and len(delim) == 1 and c != "`":
                    break  # an unterminated one-line string ends at the line
                j += 1
            i = j + len(delim)
            continue
        if c in pairs or c in closers:
            yield i, c
        i += 1


def open_brackets(text: str, g: Grammar) -> list[str]:
    """Openers of ``text`` still open at its end, innermost last."""
    pairs = dict(g.brackets)
    stack: list[str] = []
    for _, c in code_brackets(text, g):
        if c in pairs:
            stack.append(c)
        elif stack and pairs[stack[-1]] == c:
            stack.pop()
    return stack


def unmatched_closers(text: str, g: Grammar) -> list[str]:
    """Closers of ``text`` that close brackets opened before it, in order."""
    pairs = dict(g.brackets)
    depth: list[str] = []
    out: list[str] = []
    for _, c in code_brackets(text, g):
        if c in pairs:
            depth.append(c)
        elif depth:
            depth.pop()
        else:
            out.append(c)
    return out


def bracket_context(prefix: str, suffix: str, g: Grammar) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What ``balance`` needs of the text around the span, which does not change from pass to pass: the
    constructs open around it (innermost last) and what the suffix closes (innermost first)."""
    ls = prefix.rfind("\n", 0, max(0, len(prefix) - 4096)) + 1  # scan from a line start near the cursor
    return tuple(open_brackets(prefix[ls:], g)), tuple(unmatched_closers(suffix[:4096], g))


def balance(fill: str, suffix: str, g: Grammar, prefix: str = "",
            context: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> str:
    """Keep the fill's brackets balanced: cut at a closer that does not match, or that closes a construct of the
    prefix which the suffix closes too; append the closers of brackets the fill opened and left open.
    ``context``: ``bracket_context(prefix, suffix, g)``, when the caller keeps it across passes."""
    pairs = dict(g.brackets)
    around, closed = context if context is not None else bracket_context(prefix, suffix, g)
    outer = list(around)  # constructs around the span, innermost last
    closed_after = list(closed)  # what the suffix closes, innermost first
    stack: list[str] = []
    for i, c in code_brackets(fill, g):
        if c in pairs:
            stack.append(c)
            continue
        if stack and pairs[stack[-1]] == c:
            stack.pop()
            continue
        if not stack:
            top = outer[-1] if outer else None
            if top is None and c not in closed_after[:1]:
                continue  # nothing known around: the fill may close what the prefix opened
            if top is not None and pairs[top] == c and (not closed_after or closed_after[0] != c):
                outer.pop()  # the fill closes a construct of the prefix the suffix leaves open
                continue
        fill = fill[:i].rstrip(" \t")
        break
    return fill + "".join(pairs[o] for o in reversed(stack))


def _squash(s: str) -> str:
    return _WS.sub(" ", s).strip()


def _is_word(c: str) -> bool:
    return c.isalnum() or c == "_"


def drop_suffix_repeat(fill: str, suffix: str, min_chars: int = 3) -> str:
    """Drop the longest tail of ``fill`` that repeats the start of ``suffix`` (whitespace-insensitive).

    A tail starts at a token boundary; one with a letter or digit must be at least ``min_chars`` long, so a lone
    ``x`` before an ``x`` is not taken for a repeat (a tail of punctuation such as ``):`` is)."""
    s = _squash(suffix[: 2 * len(fill) + 64])
    if not s or not fill.strip():
        return fill
    for i in range(len(fill)):
        c = fill[i]
        if c.isspace() or c != s[0] and not fill[i:].lstrip().startswith(s[0]):
            continue
        if i > 0 and _is_word(fill[i - 1]) and _is_word(c):
            continue
        t = _squash(fill[i:])
        if not t or not s.startswith(t):
            continue
        if len(t) < min_chars and any(_is_word(ch) for ch in t):
            continue
        kept = fill[:i]
        return kept.rstrip() if suffix[:1].isspace() or not suffix else kept
    return fill


def finish(raw: str, plan: Plan, suffix: str, g: Grammar, model_unit: str | None = None, prefix: str = "",
           brackets: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> str:
    """The text to insert at ``plan``'s span for the model's ``raw`` fill (see the module doc). ``brackets``:
    ``bracket_context(prefix, suffix, g)`` kept by the caller across the passes of one request."""
    fill = raw
    if plan.single_line:
        nl = fill.find("\n")
        if nl >= 0:
            fill = fill[:nl]
    if plan.stop:
        j = fill.find(plan.stop)
        if j >= 0:
            fill = fill[:j]
    if not plan.code:
        return fill
    fill = balance(fill, suffix, g, prefix, brackets)
    fill = drop_suffix_repeat(fill, plan.close + suffix)
    if not fill.strip():
        return fill.rstrip("\n") if plan.single_line else fill
    if plan.single_line:
        if plan.on_blank_line:  # the line's indentation, not the blanks the model wrote after it
            fill = plan.lead + fill.lstrip(" \t")
        return fill.rstrip() + plan.close if plan.close else fill.rstrip("\n")
    # Multi-line: the first line goes to the plan's indentation; later lines keep their level relative to it.
    lines = fill.split("\n")
    unit = plan.unit or g.indent
    if plan.shows_lead:  # the model was shown the first line's indentation and wrote the rest of the line
        while len(lines) > 1 and not lines[0].strip():
            lines.pop(0)
        lines[0] = lines[0].lstrip(" \t")
        model_base = target = plan.lead.split("\n")[-1] if plan.lead else plan.indent
    else:
        model_base = plan.indent
        target = plan.indent
    lines = reindent(lines, model_base, target, model_unit or unit, unit)
    out = plan.lead + "\n".join(lines)
    if plan.trail or plan.close or not suffix or suffix[0] in "\r\n":
        out = out.rstrip()
    return out + plan.trail + plan.close
