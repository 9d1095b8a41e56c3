"""Grammar loading, incremental documents, and the post-processing of fills."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.syntax import postprocess
from edit_engine.syntax import trees as syntax

LANGS = ["python", "javascript", "typescript", "tsx", "rust", "go"]
HELLO = {
    "python": "def f(x):\n    return x\n",
    "javascript": "function f(x) { return x; }\n",
    "typescript": "function f(x: number): number { return x; }\n",
    "tsx": "const C = () => <div>{1}</div>;\n",
    "rust": "fn f(x: i32) -> i32 { x }\n",
    "go": "package main\n\nfunc f(x int) int { return x }\n",
}


@pytest.mark.parametrize("language", LANGS)
def test_every_grammar_loads_and_parses(language: str) -> None:
    g = syntax.load(language)
    assert g.has_tree and g.query is not None
    assert set(g.query.capture_name(i) for i in range(g.query.capture_count)) <= set(syntax.CAPTURES)
    doc = syntax.Document.parse(HELLO[language], language)
    assert doc.tree is not None and not doc.tree.root_node.has_error
    assert syntax.broken_nodes(doc.tree) == []


@pytest.mark.parametrize(("alias", "language"), [("typescriptreact", "tsx"), ("javascriptreact", "javascript"),
                                                  ("golang", "go")])
def test_lsp_language_ids(alias: str, language: str) -> None:
    g = syntax.load(alias)
    assert g.has_tree and g.language == syntax.load(language).language


def test_unknown_language_is_plain() -> None:
    for name in ("cobol", "", "../python", "plaintext"):
        g = syntax.load(name)
        assert not g.has_tree
        doc = syntax.Document.parse("x = (", name)
        assert doc.tree is None and doc.captures_at(3) == {}
        doc.edit(0, 1, "y")
        assert doc.text == "y = ("


def test_broken_nodes_finds_error_and_missing() -> None:
    doc = syntax.Document.parse("def f(x:\n    return x\n", "python")
    assert doc.tree is not None and syntax.broken_nodes(doc.tree)


def _sexp(doc: syntax.Document) -> str:
    assert doc.tree is not None
    return str(doc.tree.root_node)


TEXT = st.text(alphabet=st.sampled_from(list("ab(){}[]:;=\n \t'\"#/é😀日")), max_size=40)


@settings(max_examples=80, deadline=None)
@given(text=TEXT, data=st.data(), language=st.sampled_from(LANGS))
def test_incremental_edits_match_a_fresh_parse(text: str, data: st.DataObject, language: str) -> None:
    doc = syntax.Document.parse(text, language)
    for _ in range(3):
        s = data.draw(st.integers(0, len(doc.text)))
        e = data.draw(st.integers(s, len(doc.text)))
        new = data.draw(TEXT)
        expect = doc.text[:s] + new + doc.text[e:]
        other = doc.parse_with(s, e, new)  # a what-if parse leaves the document alone
        doc.edit(s, e, new)
        assert doc.text == expect
        fresh = syntax.Document.parse(expect, language)
        assert _sexp(doc) == _sexp(fresh)
        assert other is not None and str(other.root_node) == _sexp(fresh)


@settings(max_examples=40, deadline=None)
@given(a=TEXT, b=TEXT)
def test_update_is_one_incremental_edit(a: str, b: str) -> None:
    doc = syntax.Document.parse(a, "python")
    doc.update(b)
    assert doc.text == b and _sexp(doc) == _sexp(syntax.Document.parse(b, "python"))


def test_syntax_cache_keeps_documents_by_uri() -> None:
    cache = syntax.SyntaxCache(capacity=2)
    d1 = cache.get("a", "x = 1\n", "python")
    cache.edit("a", 4, 5, "2")
    d2 = cache.get("a", "x = 2\n", "python")
    assert d1.text == "x = 1\n" and d2.text == "x = 2\n"  # snapshots do not change under later edits
    cache.get("b", "", "go")
    cache.get("c", "", "rust")
    assert len(cache) == 2
    cache.close("c")
    assert len(cache) == 1
    assert cache.get("b", "fn", "rust").language == "rust"  # a language change re-parses


def test_captures_at_cursor() -> None:
    text = "def f():\n    return max(1, 2)  # done\n"
    doc = syntax.Document.parse(text, "python")
    caps = doc.captures_at(text.index("1"))
    assert [n.type for n in caps["brackets"]] == ["argument_list"]
    assert [n.type for n in caps["block"]] == ["block"]
    assert doc.captures_at(text.index("done"))["comment"]


# ---------------------------------------------------------------------------------------------- post-processing
@pytest.mark.parametrize(("text", "unit"), [
    ("def f():\n    x\n        y\n", "    "), ("a {\n  b\n    c\n}\n", "  "), ("a {\n\tb\n\t\tc\n}\n", "\t"),
    ("x\ny\n", "    "), ("a\n   b\n      c\n", "   "), ("a\n" + "    b\n" * 10 + "          d(\n", "    "),
])
def test_detect_indent(text: str, unit: str) -> None:
    assert postprocess.detect_indent(text) == unit


@pytest.mark.parametrize(("prefix", "fill", "suffix", "out"), [
    ("f(", "a, b)", ")\n", "a, b"),  # closes the construct the suffix closes
    ("f(", "foo(x))", ")\n", "foo(x)"),
    ("f(", "foo(x", ")\n", "foo(x)"),  # left open: closed inside the span
    ("f(", "a]", ")", "a"),  # mismatched
    ("f(", "'(' + x)", ")", "'(' + x"),  # brackets in strings do not count
    ("f(", "x) # )", "", "x) # )"),  # the suffix leaves the construct open: the fill may close it
    ("f([1, 2", "3])", ")\n", "3]"),  # closes the list the suffix leaves open, not the call
    ("", "x)", "", "x)"),
])
def test_balance(prefix: str, fill: str, suffix: str, out: str) -> None:
    assert postprocess.balance(fill, suffix, postprocess_grammar(), prefix) == out


def postprocess_grammar() -> syntax.Grammar:
    return syntax.load("python")


@pytest.mark.parametrize(("fill", "suffix", "out"), [
    ("return x\n    return y", "\n    return y\n", "return x"),
    ("x + b + c", "b + c\n", "x + "),
    ("> 0:", ":\n", "> 0"),
    ("x", "x\n", "x"),  # too short to call a repeat
    ("value", "val = 1", "value"),
    ("return y", "\nreturn y", ""),
])
def test_drop_suffix_repeat(fill: str, suffix: str, out: str) -> None:
    assert postprocess.drop_suffix_repeat(fill, suffix) == out


def test_reindent_keeps_relative_levels() -> None:
    lines = ["if x:", "  y = 1", "  if z:", "    w", "q"]
    assert postprocess.reindent(lines, "", "\t", "  ", "\t") == ["if x:", "\t\ty = 1", "\t\tif z:", "\t\t\tw", "\tq"]


def test_a_dialect_inherits_its_base_languages_query() -> None:
    """``; inherits: javascript`` in TypeScript's spans.scm: its query holds JavaScript's patterns and its own;
    TSX inherits TypeScript's whole."""
    from edit_engine.syntax import trees as syntax

    js, ts_, tsx = (syntax.load(n).query for n in ("javascript", "typescript", "tsx"))
    assert js is not None and ts_ is not None and tsx is not None
    assert ts_.pattern_count == js.pattern_count + 2 and tsx.pattern_count == ts_.pattern_count
    doc = syntax.Document.parse("interface A { x: number }\nfunction f() { return 1 }\n", "typescript")
    kinds = {n.type for nodes in ts_cursor_captures(ts_, doc).values() for n in nodes}
    assert {"interface_body", "statement_block"} <= kinds


def ts_cursor_captures(query, doc):  # type: ignore[no-untyped-def]
    import tree_sitter as ts

    return ts.QueryCursor(query).captures(doc.tree.root_node)


def test_a_grammar_that_loops_on_some_text_is_abandoned_at_its_deadline() -> None:
    """tree-sitter-typescript's TSX grammar never ends on these two lines of Python; tree-sitter holds the
    interpreter lock while it parses, so one such parse froze a whole server. It ends at its deadline, without a
    tree, and other threads ran meanwhile."""
    import threading
    import time

    from edit_engine.syntax import trees

    assert trees.load("tsx").has_tree  # tree-sitter-typescript is a dependency
    text = "from x import (\n out, pos = out + site[pos:i1] + new[j1:j2], i2"
    ticks = []
    done = threading.Event()

    def other() -> None:  # a thread that wants the interpreter while the parse runs
        while not done.is_set():
            ticks.append(time.monotonic())
            done.wait(0.01)

    th = threading.Thread(target=other)
    th.start()
    t = time.monotonic()
    try:
        doc = trees.Document.parse(text, "tsx")
    finally:
        done.set()
        th.join()
    assert doc.tree is None and time.monotonic() - t < trees.parse_deadline(len(text)) + 2.0
    assert len([x for x in ticks if x > t + 0.1]) > 10, "the other thread did not run during the parse"
    assert trees.Document.parse("const a = <div>{b}</div>;\n", "tsx").tree is not None


def test_parsing_keeps_no_chunk_of_its_source() -> None:
    """py-tree-sitter keeps every object the read callback hands it but the last: a parse must hand it only the
    reused buffer, the end of the source included (which tree-sitter reads several times a parse)."""
    import gc
    import tracemalloc

    src = "".join(f"def f{i}(a, b):\n    return a * {i} + b  # a line of code\n" for i in range(300))
    for n in range(3):
        syntax.Document.parse(src[: 5000 + n], "python")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for n in range(300):
            assert syntax.Document.parse(src[: 5000 + 7 * n], "python").tree is not None
        gc.collect()
        grown = sum(d.size_diff for d in tracemalloc.take_snapshot().compare_to(before, "filename")
                    if d.traceback[0].filename == syntax.__file__)
    finally:
        tracemalloc.stop()
    assert grown < 50_000, f"{grown} bytes of parse input kept"
