"""Tree rules of next edit (``edits/rules.py``): inferred from the history's changed rows by anti-unification,
then applied wherever their old side matches."""

from __future__ import annotations

import difflib
import keyword

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edit_engine.edits import next_edit as ne_mod
from edit_engine.edits import patterns, rules


def _diff(before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), "a/x.py", "b/x.py", n=3))


def _history(*states: str) -> list[str]:
    return [_diff(a, b) for a, b in zip(states, states[1:], strict=False)]


def _rules(*states: str, language: str = "python") -> list[rules.TreeRule]:
    return rules.infer(patterns.analyse(_history(*states), states[-1], language), language)


def _propose(states: list[str], cursor_row: int) -> str | None:
    doc = states[-1]
    cursor = sum(len(r) + 1 for r in doc.split("\n")[: cursor_row + 1]) - 1
    ne = ne_mod.next_edit(None, ne_mod.check_request(doc, cursor, _history(*states)))
    return None if ne is None else ne.apply(doc)


OPTIONALS = [
    "def first(a: t.Optional[str]) -> None:\n    pass\n",
    "def second(b: t.Optional[int]) -> None:\n    pass\n",
    "def third(c: t.Optional[t.List[str]], d: int) -> bool:\n    return True\n",
]


def _states(rows: list[str], changed: list[tuple[str, str]]) -> list[str]:
    """The file with ``rows``, then one state per (old, new) replacement, made in order."""
    states = ["\n".join(rows)]
    for old, new in changed:
        assert old in states[-1]
        states.append(states[-1].replace(old, new, 1))
    return states


def test_two_examples_make_a_rule_with_a_hole_where_they_differ() -> None:
    states = _states(OPTIONALS, [("t.Optional[str]", "str | None"), ("t.Optional[int]", "int | None")])
    (rule,) = _rules(*states)
    assert rule.type == "subscript" and rule.fixed == (None,) and rule.new == (0, " | None")
    # Applied where the old side matches with a whole subtree in the hole, the next place after the cursor.
    assert _propose(states, 3) == states[-1].replace("t.Optional[t.List[str]]", "t.List[str] | None")


def test_one_example_is_no_rule() -> None:
    states = _states(OPTIONALS, [("t.Optional[str]", "str | None")])
    assert _rules(*states) == []


def test_what_every_example_shares_stays_concrete() -> None:
    rows = ["check(a, x)", "check(a, y)", "check(a, z)", "check(b, z)", "other(a, z)"]
    states = _states(rows, [("check(a, x)", "check(a, x, strict=True)"), ("check(a, y)", "check(a, y, strict=True)")])
    (rule,) = _rules(*states)
    assert [t for t in rule.fixed if t is not None] == ["check", "a"]  # the callee and the first argument
    # The rule rewrites the call like its examples; those whose callee or first argument differ from every
    # example's are left alone (by the rule: the line edits may still repeat the row's edit there).
    doc = states[-1]
    analysis = patterns.analyse(_history(*states), doc, "python")
    edits = ne_mod.propagate.candidates(ne_mod.propagate.Region(
        ne_mod.syntax.Document.parse(doc, "python"), ne_mod.positions.line_starts(doc), 0, 5),
        ne_mod.propagate.infer(analysis, "python"))
    assert {(doc[e.start : e.end], e.text) for e in edits if e.kind == "rule"} == \
        {("check(a, z)", "check(a, z, strict=True)")}


def test_examples_that_change_alike_everywhere_are_left_to_the_line_edits() -> None:
    rows = ["x = f(1)", "y = f(1)", "z = f(1)"]
    states = _states(rows, [("x = f(1)", "x = g(f(1))"), ("y = f(1)", "y = g(f(1))")])
    assert _rules(*states) == []  # both holes fixed: a literal replacement


def test_no_rule_from_rows_that_do_not_parse_and_none_for_a_language_without_a_grammar() -> None:
    states = _states(["if (a", "if (b", "if (c"], [("if (a", "if (a,"), ("if (b", "if (b,")])
    assert _rules(*states) == []
    assert rules.infer(patterns.analyse(_history(*states), states[-1], "plaintext"), "plaintext") == []


_ident = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(lambda s: not keyword.iskeyword(s))
_expr = st.recursive(_ident, lambda inner: st.one_of(
    st.tuples(inner, inner).map(lambda p: f"{p[0]}[{p[1]}]"),
    st.tuples(inner, inner).map(lambda p: f"{p[0]}.{p[1].split('[')[0]}"),
    st.tuples(inner, inner).map(lambda p: f"{p[0]}({p[1]})")), max_leaves=4)
SHAPES = [("Optional[{}]", "{} | None"), ("Union[{}, None]", "{} | None"), ("log.warn({})", "log.warning({})"),
          ("cast(str, {})", "str({})"), ("len({}) == 0", "not {}")]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None,
          derandomize=True)
@given(shape=st.sampled_from(SHAPES), args=st.lists(_expr, min_size=3, max_size=3, unique=True))
def test_a_rule_rewrites_its_examples_and_carries_a_new_subtree_over(shape: tuple[str, str], args: list[str]) -> None:
    """Two rows changed by one transformation with different subtrees: the rule rewrites a third row with another
    subtree as the transformation would, and each example's old side into its new side."""
    old, new = shape
    rows = [f"v{k} = {old.format(a)}" for k, a in enumerate(args)]
    states = _states(rows, [(rows[k], f"v{k} = {new.format(args[k])}") for k in (0, 1)])
    got = _propose(states, 1)
    assert got == states[-1].replace(rows[2], f"v2 = {new.format(args[2])}")
    for rule in _rules(*states):
        for k in (0, 1):
            doc = ne_mod.syntax.Document.parse(old.format(args[k]), "python")
            node = doc.tree.root_node.children[0].children[0]  # type: ignore[union-attr]
            binds = rule.match(doc, node)
            if binds is not None:
                assert rule.rewrite(binds) == new.format(args[k])


def test_a_line_edit_renames_no_word_the_row_has_as_the_pattern_has_it() -> None:
    """``sites.unify``: a word seen equal in the pattern and the row is not renamed later in the same row (the
    row ``a[b]`` does not fit the pattern ``a[a]`` by renaming ``a`` to ``b``, which wrote ``g(b[b])``)."""
    from edit_engine.edits import sites

    assert sites.unify("v1 = f(a[b])", "v0 = f(a[a])", {}) is None
    assert sites.unify("v1 = f(b[b])", "v0 = f(a[a])", {}) == (9, 6)  # a consistent renaming still fits
    rows = ["v0 = f(a[a])", "", "v1 = f(a[b])"]
    states = _states(rows, [("v0 = f(a[a])", "v0 = g(a[a])")])
    assert _propose(states, 0) is None


def test_only_the_most_recent_row_pairs_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """``MAX_PAIRS`` bounds the parses: a rule whose examples lie beyond the most recent pairs is not inferred."""
    states = _states(OPTIONALS, [("t.Optional[str]", "str | None"), ("t.Optional[int]", "int | None")])
    assert len(_rules(*states)) == 1
    monkeypatch.setattr(rules, "MAX_PAIRS", 1)
    assert _rules(*states) == []


@pytest.mark.parametrize("language, rows, changed, want", [
    ("typescript", ["let a: Array<string> = [];", "let b: Array<number> = [];", "let c: Array<Foo> = [];"],
     [("Array<string>", "string[]"), ("Array<number>", "number[]")], "let c: Foo[] = [];"),
    ("javascript", ["var a = require('a');", "var b = require('b');", "var c = require('c');"],
     [("var a", "const a"), ("var b", "const b")], "const c = require('c');"),
    ("go", ["package m", "func f() {", '\tx := fmt.Sprintf("%d", a)', '\ty := fmt.Sprintf("%d", b)',
            '\tz := fmt.Sprintf("%d", c.n)', "}"],
     [('fmt.Sprintf("%d", a)', "strconv.Itoa(a)"), ('fmt.Sprintf("%d", b)', "strconv.Itoa(b)")],
     "\tz := strconv.Itoa(c.n)"),
    ("rust", ["fn f() {", "    let x = a.unwrap();", "    let y = b.unwrap();", "    let z = c.d().unwrap();", "}"],
     [("a.unwrap()", "a?"), ("b.unwrap()", "b?")], "    let z = c.d()?;"),
])
def test_rules_in_every_language_served(language: str, rows: list[str], changed: list[tuple[str, str]],
                                        want: str) -> None:
    """Each grammar's rows give a rule, and the rule rewrites the last row (its hole holds a subtree the examples
    never had)."""
    states = _states(rows, changed)
    doc = states[-1]
    analysis = patterns.analyse(_history(*states), doc, language)
    assert len(rules.infer(analysis, language)) == 1
    region = ne_mod.propagate.Region(ne_mod.syntax.Document.parse(doc, language), ne_mod.positions.line_starts(doc),
                                     0, len(rows))
    (edit,) = [e for e in ne_mod.propagate.candidates(region, ne_mod.propagate.infer(analysis, language))
               if e.kind == "rule"]
    got = (doc[: edit.start] + edit.text + doc[edit.end :]).split("\n")
    assert [g for g, d in zip(got, doc.split("\n"), strict=True) if g != d] == [want]
