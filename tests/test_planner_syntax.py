"""The syntax-aware planner: table-driven cursor situations per language, and the invariants of every plan.

``|`` marks the cursor, ``«…»`` a selection. Each row names the span kind and the text the span replaces, and
gives a stub fill (what a model might write); the stub, finished by ``postprocess.finish`` and inserted at the
reported span, must parse with the language's real grammar.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edit_engine.engine import Engine
from edit_engine.syntax import planner, postprocess
from edit_engine.syntax import trees as syntax

CASES = [
    # (language, source, kind, replaced text, stub fill)
    ("python", "def f(x):\n    return max(|)\n", "in_brackets", "", "x, 1"),
    ("python", "def f(x):\n    return max(|  )\n", "in_brackets", "  ", "x, 1)"),
    ("python", "y = [1, |]\n", "in_brackets", "", "2"),
    ("python", "def f(x):|", "block_body", "", "return x"),
    ("python", "class A:\n    def f(self):|\n", "block_body", "", "\n        return 1\n"),
    ("python", "def f(x):\n    y = 1\n|\n    return y\n", "statement", "", "z = 2"),
    ("python", "def f(x):\n    y = 1\n    |\n    return y\n", "statement", "", "z = 2\n    w = 3"),
    ("python", "def f(x):\n    r = []\n|\n        r.append(x)\n    return r\n", "header", "", " for x in range(3)"),
    ("python", "def f(x):\n    r = []\n    |\n        r.append(x)\n", "header", "", "   while x"),
    ("python", "def f(x):\n    for i in x|\n        print(i)\n", "rest_of_line", "", " + [1]"),
    ("python", "x = 1  # note|\n", "comment", "", " more\nnot a comment"),
    ("python", "s = 'ab|c'\n", "string", "", "de' + 'f"),
    ("python", "x = a + |b\n", "in_line", "", "1 + b"),
    ("python", "x = foo|\n", "rest_of_line", "", "(1)\ny = 2"),
    ("python", "def f(x):\n    «return 1»\n", "selection", "return 1", "return 2"),
    ("javascript", "function f(a) {|}\n", "block_body", "", "return a;\n}"),
    ("javascript", "const m = Math.max(|);\n", "in_brackets", "", "1, 2);"),
    ("javascript", "function f(a) {\n  const b = 1;\n|\n  return b;\n}\n", "statement", "", "const c = 2;"),
    ("javascript", "// hello |\nf();\n", "comment", "", "world"),
    ("javascript", "const s = \"ab|\";\n", "string", "", "x\";"),
    ("javascript", "if (a) {|\n}\n", "block_body", "", "b();"),
    ("javascript", "const x = «a + b»;\n", "selection", "a + b", "a * b"),
    ("typescript", "function f(a: number): number {\n  return Math.max(|);\n}\n", "in_brackets", "", "a, 1"),
    ("typescript", "interface A {|}\n", "block_body", "", "x: number;"),
    ("typescript", "let x: number = |;\n", "in_line", "", "1"),
    ("typescript", "/* a | b */\nlet y = 1;\n", "comment", "", "c */ d"),
    ("tsx", "const x = <div>{foo(|)}</div>;\n", "in_brackets", "", "1"),
    ("tsx", "function C() {|}\n", "block_body", "", "return <div />;"),
    ("rust", "fn main() {\n    let v = vec![1, |];\n}\n", "in_brackets", "", "2"),
    ("rust", "fn main() {|}\n", "block_body", "", "let x = 1;"),
    ("rust", "fn f() -> i32 {\n    let a = 1;\n|\n    a\n}\n", "statement", "", "let b = 2;"),
    ("rust", "// doc |\nfn main() {}\n", "comment", "", "text"),
    ("rust", "fn main() { let s = \"ab|\"; }\n", "string", "", "cd\"; x"),
    ("go", "package main\n\nfunc main() {\n\tprintln(|)\n}\n", "in_brackets", "", "1"),
    ("go", "package main\n\nfunc main() {|}\n", "block_body", "", "x := 1\n_ = x"),
    ("go", "package main\n\nfunc main() {\n\tx := 1\n|\n\t_ = x\n}\n", "statement", "", "y := 2\n_ = y"),
    ("go", "package main\n\nvar s = \"a|b\"\n", "string", "", "c"),
]


def _cursor(src: str) -> tuple[str, int, tuple[int, int] | None]:
    if "«" in src:
        s = src.index("«")
        e = src.index("»") - 1
        text = src.replace("«", "").replace("»", "")
        return text, s, (s, e)
    off = src.index("|")
    return src.replace("|", "", 1), off, None


def _errors(language: str, text: str) -> list[str]:
    doc = syntax.Document.parse(text, language)
    assert doc.tree is not None
    return [f"{n.type}@{n.start_point}" for n in syntax.broken_nodes(doc.tree)]


@pytest.mark.parametrize(("language", "src", "kind", "replaced", "stub"), CASES,
                         ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_cursor_situations(language: str, src: str, kind: str, replaced: str, stub: str) -> None:
    text, offset, sel = _cursor(src)
    pl = planner.plan(text, offset, sel, language=language)
    assert (pl.kind, text[pl.start : pl.end]) == (kind, replaced)
    assert pl.language == language and pl.check == (kind not in ("comment", "string"))
    if sel is None:
        assert pl.start == offset
    else:
        assert (pl.start, pl.end) == sel
    fill = postprocess.finish(stub, pl, text[pl.end :], syntax.load(language))
    result = text[: pl.start] + fill + text[pl.end :]
    assert _errors(language, result) == [], result


def test_block_body_is_indented_one_level_deeper() -> None:
    """The model is shown the body's line break and indentation (``Plan.shows_lead``) and writes its later
    lines at the indentation it was shown; the blanks it writes before its first word do not count."""
    text = "class A:\n    def f(self):"
    pl = planner.plan(text, len(text), language="python")
    assert pl.shows_lead and pl.lead == "\n        "
    fill = postprocess.finish(" return 1\n        if x:\n            return 2", pl, "", syntax.load("python"))
    assert fill == "\n        return 1\n        if x:\n            return 2"


def test_tab_indented_document_gets_tabs() -> None:
    text = "def f(x):\n\tif x:\n\t\treturn 1\n\treturn 2\n\ndef g():"
    pl = planner.plan(text, len(text), language="python")
    assert pl.unit == "\t"
    fill = postprocess.finish("\n    if x:\n        y = 1\n    return x", pl, "", syntax.load("python"), "    ")
    assert fill == "\n\tif x:\n\t\ty = 1\n\treturn x"


def test_string_fill_stops_at_the_closing_quote() -> None:
    text = "s = f'''ab'''\n"
    pl = planner.plan(text, 8, language="python")
    assert (pl.kind, pl.stop) == ("string", "'''")
    assert postprocess.finish("cd''' + x", pl, text[8:], syntax.load("python")) == "cd"


def test_brackets_closing_on_a_later_line_are_not_in_line_spans() -> None:
    text = "x = foo(a, \n    b)\n"
    pl = planner.plan(text, 8, language="python")
    assert pl.kind == "in_line"


HEADER_DOC = "def f(xs):\n    r = []\n\n        r.append(xs)\n    return r\n"


def test_a_blank_line_before_a_deeper_line_is_a_header() -> None:
    """Only a block header can stand on a blank line whose next code line is indented deeper: the plan is one
    line at the block's indentation that ends with the grammar's ``:``, whatever the model wrote around it."""
    at = HEADER_DOC.index("\n\n") + 1
    pl = planner.plan(HEADER_DOC, at, language="python")
    assert (pl.kind, pl.close, pl.lead, pl.single_line, pl.check) == ("header", ":", "    ", True, True)
    g = syntax.load("python")
    rest = HEADER_DOC[at:]
    assert postprocess.finish(" for x in xs", pl, rest, g) == "    for x in xs:"
    assert postprocess.finish("  for x in xs:", pl, rest, g) == "    for x in xs:"  # its own colon: one
    assert postprocess.finish(" for x in xs: r.append(xs)\nmore", pl, rest, g) == "    for x in xs:"
    assert postprocess.finish("", pl, rest, g) == ""  # nothing written: no lone colon


@pytest.mark.parametrize(("src", "kind"), [
    ("def f(x):\n    y = foo(1,\n|\n        2)\n", "statement"),  # inside brackets: a continuation line
    ("def f(x):\n    y = 1 + \\\n|\n        2\n", "statement"),  # after a backslash continuation
    ("def f(x):\n    y = 1\n|\n    return y\n", "statement"),  # next line at the same depth
    ("def f(x):\n    y = 1\n|\n            # a deep comment\n    return y\n", "statement"),  # comments skipped
    ("def f(x):\n    y = 1\n|\n    # note\n        z = 2\n", "header"),
    ("def f(x):\n    y = 1\n|", "statement"),  # nothing after
])
def test_header_rule_cases(src: str, kind: str) -> None:
    text, offset, _ = _cursor(src)
    pl = planner.plan(text, offset, language="python")
    assert pl.kind == kind
    assert pl.close == (":" if kind == "header" else "")


def test_header_rule_is_for_indentation_sensitive_grammars_only() -> None:
    text = "function f(a) {\n  const b = 1;\n\n    .map(g);\n}\n"
    pl = planner.plan(text, text.index("\n\n") + 1, language="javascript")
    assert (pl.kind, pl.close) == ("statement", "")


def test_rest_of_line_header_keyword_gets_the_colon() -> None:
    text = "def f(x):\n    for i in x\n        print(i)\n    y = x\n        print(y)\n"
    pl = planner.plan(text, text.index(" x\n") + 2, language="python")
    assert (pl.kind, pl.close) == ("rest_of_line", ":")
    assert postprocess.finish(" + [1]", pl, text[pl.end :], syntax.load("python")) == " + [1]:"
    pl = planner.plan(text, text.index("y = x") + 5, language="python")  # not a header keyword: no colon
    assert (pl.kind, pl.close) == ("rest_of_line", "")


def test_document_plan_shows_the_model_the_indentation_and_the_colon(tiny_engine: Engine) -> None:
    at = HEADER_DOC.index("\n\n") + 1
    dp = tiny_engine.plan_document(HEADER_DOC, at, "python")
    assert dp.plan.kind == "header" and dp.first is not None
    assert dp.model_prefix == HEADER_DOC[:at] + "   "  # the last space goes with the keyword's token
    assert dp.model_suffix == ":" + HEADER_DOC[at:]
    assert dp.prefix == HEADER_DOC[:at] and dp.suffix == HEADER_DOC[at:]  # the document's own text
    words = [tiny_engine.tokenizer.decode([i]) for i in dp.first.nonzero().flatten().tolist()]
    assert words and all(w.strip().startswith(("if", "for", "while", "with", "def", "class", "try", "el", "ex",
                                               "fin", "async", "match", "case")) for w in words)
    statement = HEADER_DOC.replace("        r.append", "    r.append")
    dp = tiny_engine.plan_document(statement, at, "python")
    assert dp.plan.kind == "statement" and dp.first is None
    assert dp.model_prefix == statement[:at] + "   " and dp.model_suffix == statement[at:]
    c = tiny_engine.complete(HEADER_DOC, at, "python", max_tokens=8)
    assert c.kind == "header" and (c.text == "" or c.text.startswith("    ") and c.text.endswith(":"))


@pytest.mark.parametrize(("src", "indents"), [
    ("def f(x):\n    for i in x:\n        if i:\n            y = 1\n|\n    return y\n", (12, 8, 4)),
    ("def f(x):\n    if x:\n        y = 1\n|", (8, 4, 0)),  # nothing after: down to column 0
    ("def f(x):\n    if x:\n        y = 1\n|\n        z = 2\n", ()),  # next line at the same level
    ("def f(x):\n    if x:\n|\n    y = 2\n", ()),  # after a header: one level under it
    ("def f(x):\n    if x:\n        y = 1\n    |\n    z = 2\n", ()),  # the user typed the indentation
    ("def f(x):\n    if x:\n        y = 1\n|\n\tz = 2\n", ()),  # indentations that do not nest
    ("def f(x):\n  if x:\n    y = 1\n|\n", (4, 2, 0)),  # the document's own unit (2 spaces)
])
def test_candidate_indents(src: str, indents: tuple[int, ...]) -> None:
    text, offset, _ = _cursor(src)
    pl = planner.plan(text, offset, language="python")
    assert pl.kind == "statement"
    assert pl.indents == tuple(" " * k for k in indents)
    assert not pl.indents or pl.indent in pl.indents


def test_the_model_chooses_the_blank_lines_indentation(tiny_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Among a blank line's candidate indentations the engine takes the one whose blank-run token the model
    scores highest in slot 0 (one pass, counted), and every pass of the fill is at that indentation."""
    text = "def f(x):\n    if x:\n        y = 1\n\n    return y\n"
    at = text.index("\n\n") + 1
    tok = tiny_engine.tokenizer
    for want in ("        ", "    "):
        target = tok.encode(want + "x")[0]
        real = tiny_engine.model.canvas_logits

        def rigged(canvas, cache, target=target, real=real):  # type: ignore[no-untyped-def]
            out = real(canvas, cache)
            out[:, 0, target] += 1e4
            return out

        monkeypatch.setattr(tiny_engine.model, "canvas_logits", rigged)
        dp = tiny_engine.plan_document(text, at, "python", max_tokens=8)
        monkeypatch.undo()
        assert (dp.plan.indent, dp.plan.lead, dp.nfe) == (want, want, 1) and "indent" in dp.timings
        assert dp.model_prefix == text[:at] + want[:-1]
    c = tiny_engine.complete(text, at, "python", max_tokens=8)
    assert c.nfe >= 2 and "indent" in c.timings
    user_typed = text[:at] + "    " + text[at:]  # the user's own indentation is never second-guessed
    assert tiny_engine.plan_document(user_typed, at + 4, "python").nfe == 0


@pytest.mark.parametrize("language", ["cobol", "plaintext", "../python", ""])
def test_unknown_language_falls_back_to_lines(language: str) -> None:
    text = "foo(bar)\nbaz:\n"
    assert planner.plan(text, 4, language=language).kind == "in_line"
    pl = planner.plan(text, 13, language=language)
    assert (pl.kind, pl.check, pl.language) == ("block_body", False, language)


# ---------------------------------------------------------------------------------------------- properties
LANGS = ["python", "javascript", "typescript", "tsx", "rust", "go", "plaintext"]
PIECES = ["def f(x):", "\n", "    ", "\t", "return ", "max(", ")", "[", "]", "{", "}", "'", '"', "# ", "// ",
          "/*", "*/", "x", " = ", "1", ", ", ":", ";", "😀", "日本語", "é", "e\u0301", "\u0301", "🇫🇷", "\r\n"]
documents = st.lists(st.sampled_from(PIECES), max_size=25).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=documents, data=st.data(), language=st.sampled_from(LANGS))
def test_span_contains_the_cursor_and_stays_inside(text: str, data: st.DataObject, language: str) -> None:
    offset = data.draw(st.integers(0, len(text)))
    pl = planner.plan(text, offset, language=language)
    assert 0 <= pl.start <= offset <= pl.end <= len(text)
    assert pl.kind in planner.KINDS
    assert 1 <= pl.initial_canvas <= pl.max_tokens
    # Character boundaries: the span maps to whole UTF-8 sequences and back.
    for edge in (pl.start, pl.end):
        assert syntax.positions.char_offset(text, syntax.positions.byte_offset(text, edge)) == edge
    if pl.kind == "in_brackets" and pl.end > pl.start:
        assert not text[pl.start : pl.end].strip()  # only blanks before the closer are replaced
    stub = data.draw(st.sampled_from(["", "x", "a)\n  b", "😀'", "\n\tq = (1"]))
    fill = postprocess.finish(stub, pl, text[pl.end :], syntax.load(language))
    new = text[: pl.start] + fill + text[pl.end :]
    assert new[: pl.start] == text[: pl.start] and new[len(new) - (len(text) - pl.end) :] == text[pl.end :]


@settings(max_examples=60, deadline=None)
@given(text=documents, data=st.data(), language=st.sampled_from(LANGS))
def test_selection_span_is_the_selection(text: str, data: st.DataObject, language: str) -> None:
    s = data.draw(st.integers(0, len(text)))
    e = data.draw(st.integers(s, len(text)))
    pl = planner.plan(text, s, (s, e), language=language)
    assert (pl.start, pl.end, pl.kind) == (s, e, "selection")


def test_bad_positions_are_rejected() -> None:
    with pytest.raises(ValueError):
        planner.plan("abc", 4, language="python")
    with pytest.raises(ValueError):
        planner.plan("abc", 1, (2, 1), language="python")


@pytest.mark.parametrize(("language", "src", "kind", "replaced", "stub"), CASES[::3],
                         ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(CASES[::3])])
def test_engine_complete_uses_the_plan(tiny_engine: Engine, language: str, src: str, kind: str, replaced: str,
                                       stub: str) -> None:
    text, offset, sel = _cursor(src)
    c = tiny_engine.complete(text, offset, language, selection=sel, max_tokens=4)
    pl = planner.plan(text, offset, sel, 4, language)
    assert (c.kind, c.start, c.end) == (kind, pl.start, pl.end)
    assert {"plan", "parse", "repair", "total"} <= set(c.timings)
    if pl.single_line:
        assert "\n" not in c.text


@pytest.mark.parametrize(("src", "heal"), [
    ("def f(xs):\n    ys = sor|\n    return ys\n", " sor"),  # the space goes with the word's token
    ("x.app|\n", "app"),
    ("foo_ba|\n", "ba"),  # letters and digits only: "_" is a token of its own
    ("x = max(a|)\n", "a"),
    ("x = so|rted(y)\n", ""),  # the word goes on after the cursor
    ("x = 1 + |\n", ""),  # no word at the cursor
    ("x = f(|\n", ""),
    ("s = 'wor|'\n", ""),  # inside a string: plain text, not healed
    ("x = 1  # wor|\n", ""),  # inside a comment
])
def test_token_healing_backs_off_the_partial_word(packaged_engine: Engine, src: str, heal: str) -> None:
    text, offset, _ = _cursor(src)
    dp = packaged_engine.plan_document(text, offset, "python")
    assert dp.heal == heal
    if not heal:
        assert dp.model_prefix == dp.prefix or dp.plan.shows_lead
        return
    assert dp.model_prefix == text[: offset - len(heal)] and dp.model_suffix == text[offset:]
    tok = packaged_engine.tokenizer
    assert dp.first is not None
    assert all(tok.decode([i]).startswith(heal) for i in dp.first.nonzero().flatten().tolist())
    assert dp.finish(heal + "ted") == "ted"  # the part the document holds is not inserted again


def test_token_healing_in_the_packaged_model(packaged_engine: Engine) -> None:
    """The packaged model after ``ys = sor``: slot 0 is a token that starts with `` sor``, and the edit inserts
    only the rest of the word (the document already holds ``sor``)."""
    text = "def f(xs):\n    ys = sor\n    return ys\n"
    at = text.index("sor") + 3
    dp = packaged_engine.plan_document(text, at, "python")
    assert dp.heal == " sor" and dp.first is not None
    c = packaged_engine.complete(text, at, "python")
    assert c.kind == "rest_of_line" and c.text and not c.text.startswith(("sor", " "))
    assert ("sor" + c.text).startswith(("sorted", "sort"))
