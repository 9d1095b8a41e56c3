"""Layout rules (``edits/layout.py``): where the history wraps or joins a statement exactly as black does, next
edit proposes black's other layout changes, and nothing else of black's."""

from __future__ import annotations

import ast
import dataclasses
import difflib
import re
from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.edits import layout, next_edit, patterns, propagate
from edit_engine.edits.layout import LayoutRule
from tests.helpers import whole_region

LONG_CALL = "    result = compute_total(first_argument_value, second_argument_value, third_argument_value)\n"
WRAPPED = ("    result = compute_total(\n"
           "        first_argument_value, second_argument_value, third_argument_value\n"
           "    )\n")
OTHER = "    other = compute_total(first_argument_value, second_argument_value, third_argument_value_x)\n"
OTHER_WRAPPED = ("    other = compute_total(\n"
                 "        first_argument_value, second_argument_value, third_argument_value_x\n"
                 "    )\n")
DOC = f"def f(a, b):\n{LONG_CALL}    return result\n\n\ndef g(a, b):\n{OTHER}    return other\n"


def _diff(before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), "a/m.py", "b/m.py"))


def _rules(before: str, after: str, language: str = "python") -> list[propagate.Rule]:
    return layout.infer(patterns.analyse([_diff(before, after)], after, language), language)


def test_a_wrap_written_as_black_writes_it_proposes_black_s_next_wrap() -> None:
    after = DOC.replace(LONG_CALL, WRAPPED)
    assert _rules(DOC, after) == [LayoutRule(88)]
    ne = next_edit.next_edit(None, next_edit.check_request(after, after.index("return result"), [_diff(DOC, after)]),
                             use_model=False)
    assert ne is not None and ne.patterns == ("layout",)
    assert ne.apply(after) == after.replace(OTHER, OTHER_WRAPPED)


def test_the_line_length_is_the_one_the_history_shows() -> None:
    row = "    total = compute(first_value, second_value, third_value, fourth_value, fifth)\n"  # 80 columns
    doc = f"def f():\n{row}    return total\n"
    wrapped = "    total = compute(\n        first_value, second_value, third_value, fourth_value, fifth\n    )\n"
    assert len(row) - 1 == 80
    assert _rules(doc, doc.replace(row, wrapped)) == [LayoutRule(79)]  # black keeps the row at 88


def test_no_rule_from_spacing_alone_another_style_or_another_language() -> None:
    commented = "def f():\n    x = 1   # one\n    return x\n"
    assert _rules(commented, commented.replace("1   #", "1  #")) == []  # any tool writes two blanks
    aligned = DOC.replace(LONG_CALL, "    result = compute_total(first_argument_value, second_argument_value,\n"
                                     "                           third_argument_value)\n")
    assert _rules(DOC, aligned) == []  # a wrap black does not write
    assert _rules(DOC, DOC.replace(LONG_CALL, WRAPPED), "javascript") == []


def test_black_s_other_changes_are_not_proposed() -> None:
    """Quotes and blank lines are black's too, but not what the history showed: only rows laid out anew."""
    doc = ("import os\ndef f():\n    name = 'x'\n"
           "    value = compute_total(first_argument_value, second_argument_value, third_argument_value)\n"
           "    return name, value\n")
    region = whole_region(doc)
    edits = LayoutRule(88).edits(region)
    assert [doc[e.start : e.end] for e in edits] == [doc.splitlines()[3]]
    assert all(layout.layout_only(doc[e.start : e.end].split("\n"), e.text.split("\n")) for e in edits)


def test_a_long_class_is_formatted_method_by_method_at_its_depth() -> None:
    methods = "".join(f"    def m{k}(self):\n        return {k}\n\n" for k in range(layout.MAX_BLOCK_ROWS // 3 + 2))
    call = "        return compute_total(first_argument_value, second_argument_value, third_argument_value)\n"
    doc = f"class C:\n{methods}    def last(self):\n{call}"
    (e,) = LayoutRule(88).edits(whole_region(doc))
    assert doc[e.start : e.end] == call.rstrip("\n")
    assert e.text == ("        return compute_total(\n"
                      "            first_argument_value, second_argument_value, third_argument_value\n"
                      "        )")


def test_a_long_file_is_formatted_from_the_cursor_on() -> None:
    """Behind the cursor no layout edit is proposed: a long file's blocks are formatted from the cursor, and only
    until a few of them have edits, so the proposal after the cursor comes at once, not after the whole file."""
    defs = [f"def f{k}(a, b):\n{OTHER.replace('_x)', f'_{k})')}" for k in range(2000)]
    doc = "".join(defs)
    cursor = doc.index("def f1500(")
    edits = LayoutRule(88).edits(dataclasses.replace(whole_region(doc), cursor=cursor))
    assert 0 < len(edits) <= layout.MAX_BLOCKS_FOUND
    assert all(e.start > cursor for e in edits) and doc[edits[0].start :].startswith("    other = compute_total(")


def test_a_block_is_formatted_once_and_new_ones_only_within_the_request_s_time(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    calls: list[str] = []
    real = layout._black

    def counted(text: str, n: int) -> str | None:
        calls.append(text)
        return real(text, n)

    monkeypatch.setattr(layout, "_black", counted)
    monkeypatch.setattr(layout, "_cache", OrderedDict())  # no block formatted yet
    rows = ("    x = compute_total(first_argument_value, second_argument_value, third_argument_value, 12345)",)
    assert layout.formatted(rows, 4, 88, new=False) is None and calls == []  # not yet formatted, not asked to
    first = layout.formatted(rows, 4, 88)
    assert first is not None and len(first) == 3 and len(calls) == 1
    assert layout.formatted(rows, 4, 88, new=False) == first and len(calls) == 1  # from the cache
    assert layout.formatted(("    x = (",), 4, 88) is None  # black cannot read it
    assert layout.formatted(("\t" + rows[0].lstrip(),), 1, 88) is None  # black would turn the tab into spaces
    nested = "x = " + "".join(f"f{k}(" for k in range(layout.MAX_DEPTH + 1)) + ")" * (layout.MAX_DEPTH + 1)
    asked = len(calls)
    assert layout.formatted((nested,), 0, 88) is None and len(calls) == asked  # black's time grows with depth


_NAMES = st.from_regex(r"[a-z][a-z_]{2,14}", fullmatch=True).filter(lambda w: not re.fullmatch("|".join(
    ["and", "def", "del", "for", "not", "try", "with", "else", "from", "pass", "elif", "case", "type", "match",
     "class", "raise", "while", "yield", "async", "await", "break", "lambda", "global", "return", "import",
     "assert", "except", "finally", "continue", "nonlocal"]), w))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(_NAMES, _NAMES, st.lists(_NAMES, min_size=1, max_size=6), st.booleans()),
                min_size=1, max_size=5))
def test_layout_edits_keep_every_token_and_the_parse(statements: list[tuple[str, str, list[str], bool]]) -> None:
    rows = []
    for target, callee, args, wrapped in statements:
        if wrapped:
            rows.append(f"    {target} = {callee}(\n" + "".join(f"        {a},\n" for a in args) + "    )")
        else:
            rows.append(f"    {target} = {callee}({', '.join(args)})")
    doc = "def f():\n" + "\n".join(rows) + "\n    return None\n"
    for e in LayoutRule(79).edits(whole_region(doc)):
        old, new = doc[e.start : e.end], e.text
        assert layout.layout_only(old.split("\n"), new.split("\n"))
        ast.parse(doc[: e.start] + new + doc[e.end :])
