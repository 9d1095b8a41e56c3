"""Phrase rules (``edits.phrases``): the history's literal replacement of a few tokens, made again where the same
tokens stand between the same neighbours, and nowhere else."""

from __future__ import annotations

from helpers import applied, whole_region
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.edits import phrases, propagate, sites
from edit_engine.edits.patterns import Analysis, Change, analyse


def _rules(*pairs: tuple[str, str]) -> list[phrases.PhraseRule]:
    a = Analysis(changes=[Change(k, k, k, (old,), (new,)) for k, (old, new) in enumerate(pairs)])
    return phrases.infer(a)


def test_a_string_change_made_twice_is_made_where_the_same_words_stand() -> None:
    found = _rules(('    raise err(src, pos, "Can not overwrite a value") from None',
                    '    raise err(src, pos, "Cannot overwrite a value") from None'),
                   ('    raise err(src, pos, "Can not overwrite a value")', '    raise err(src, pos, "Cannot overwrite a value")'),
                   ('    raise err(src, pos, f"Can not mutate {key}")', '    raise err(src, pos, f"Cannot mutate {key}")'))
    assert len(found) == 1 and found[0].old == ("Can", "not") and found[0].new == "Cannot"
    doc = ('def f(src, pos):\n'
           '    if a:\n        raise err(src, pos, "Can not overwrite a value")\n'
           '    log("Can not mutate this")\n')
    got = applied(doc, found[0].edits(whole_region(doc)))
    # The two examples that share their neighbours make a rule; the one seen once with other neighbours, its
    # words all short, does not: ``Can not mutate`` stays.
    assert got == doc.replace('"Can not overwrite', '"Cannot overwrite')


def test_the_neighbours_the_examples_share_are_kept_and_the_rest_generalised() -> None:
    found = _rules(("    def __init__(self, root_path: str, defaults: dict) -> None:",
                    "    def __init__(self, root_path: str | os.PathLike, defaults: dict) -> None:"),
                   ("    def from_pyfile(self, filename: str, silent: bool = False) -> bool:",
                    "    def from_pyfile(self, filename: str | os.PathLike, silent: bool = False) -> bool:"))
    assert [(r.left, r.old, r.right, r.new) for r in found] == [((":", "str"), (), (",",), " | os.PathLike")]
    doc = "    def from_file(self, filename: str, load: t.Callable, text: str) -> bool:\n"
    got = applied(doc, found[0].edits(whole_region(doc)))
    assert got == "    def from_file(self, filename: str | os.PathLike, load: t.Callable, text: str) -> bool:\n"


def test_a_change_seen_once_is_a_rule_only_when_it_removes_a_word() -> None:
    once = _rules(("Compatibility code to use `cookielib.CookieJar` with requests.",
                   "Compatibility code to use `http.cookiejar.CookieJar` with requests."))
    assert [(r.old, r.new) for r in once] == [(("cookielib",), "http.cookiejar")]
    assert _rules(("    x = f(a, 1)", "    x = f(a, 1, strict=True)")) == []  # an insertion seen once: no rule


def test_a_phrase_replaced_alike_between_different_neighbours_is_replaced_wherever_it_stands() -> None:
    found = _rules(("\tfiles: Iterable[Union[str, PathLike]],", "\tfiles: Iterable[StrPath],"),
                   ("\tfile: Union[str, PathLike],", "\tfile: StrPath,"))
    assert [(r.left, r.old, r.right, r.new) for r in found] == [((), ("Union", "[", "str", ",", "PathLike", "]"), (),
                                                                 "StrPath")]
    doc = ") -> Dict[str, List[Union[str, PathLike]]]:\n"
    assert applied(doc, found[0].edits(whole_region(doc))) == ") -> Dict[str, List[StrPath]]:\n"


def test_a_renamed_identifier_is_left_to_the_renames_and_the_changes_of_a_row_go_together() -> None:
    assert _rules(("    total = count + 1", "    total = amount + 1"), ("    y = count * 2", "    y = amount * 2")) == []
    # An ``f`` prefix and the name it formats: one example from the first change to the last, never the half.
    ex = phrases.examples("    regex = '<ps_d>'", "    regex = f'<{_DIR_MARK}>'", 0)
    assert [(e.old, e.new) for e in ex] == [(("'", "<", "ps_d"), "f'<{_DIR_MARK}")]
    # Changes too far apart to be one phrase give none.
    assert phrases.examples("    regex = '^.+(?P<ps_d>/).*$'", "    regex = f'^.+(?P<{_DIR_MARK}>/).*$'", 0) == []


def test_phrase_rules_come_from_a_real_history_and_resolve_with_the_other_kinds() -> None:
    doc = ('def f(src, pos):\n    raise err(src, pos, "Cannot overwrite a value")\n\n\n'
           'def g(src, pos):\n    raise err(src, pos, "Cannot overwrite a value") from None\n\n\n'
           'def h(src, pos):\n    warn(pos, "Can not overwrite a value", stacklevel=2)\n')
    before = doc.replace('"Cannot overwrite a value")\n\n\ndef g', '"Can not overwrite a value")\n\n\ndef g', 1)
    first = before.replace('"Cannot overwrite a value") from', '"Can not overwrite a value") from')
    history = [_diff(first, before), _diff(before, doc)]
    found = propagate.infer(analyse(history, doc), "python")
    assert any(isinstance(x, phrases.PhraseRule) for x in found)
    edits = propagate.resolve(propagate.candidates(whole_region(doc), found))
    assert [(e.kind, doc[e.start : e.end]) for e in edits] == [("phrase", "Can not")]


def _diff(a: str, b: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), "a/x.py", "b/x.py"))


_WORDS = st.sampled_from(["alpha", "beta", "gamma", "delta", "x", "y", "(", ")", ",", "=", "+", "1", "2"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_WORDS, min_size=1, max_size=10), st.lists(_WORDS, min_size=1, max_size=10),
       st.lists(st.lists(_WORDS, min_size=1, max_size=12), min_size=1, max_size=6))
def test_an_edit_replaces_exactly_the_text_between_the_context_it_matched(old: list[str], new: list[str],
                                                                           rows: list[list[str]]) -> None:
    """Whatever the rule, each edit lies on one row and what it replaces is exactly what the rule removes: the
    row after it reads the rule's context with its new text between."""
    pair = ("    " + " ".join(old), "    " + " ".join(new))
    for rule in _rules(pair, pair):
        doc = "".join("    " + " ".join(r) + "\n" for r in rows)
        region = whole_region(doc)
        for e in rule.edits(region):
            row = region.row_of(e.start)
            assert region.row_of(max(e.start, e.end - 1)) == row
            from edit_engine.edits.patterns import TOKEN

            assert tuple(TOKEN.findall(doc[e.start : e.end])) == rule.old
            line = region.line(row)
            a, b = e.start - region.starts[row], e.end - region.starts[row]
            assert tuple(TOKEN.findall(line[:a]))[len(TOKEN.findall(line[:a])) - len(rule.left) :] == rule.left
            assert tuple(TOKEN.findall(line[b:]))[: len(rule.right)] == rule.right


def test_a_word_that_holds_a_renamed_name_whole_is_renamed_with_it() -> None:
    assert sites.held_at("_is_ws", "is_ws") == 1 and sites.held_at("get_is_ws_now", "is_ws") == 4
    assert sites.held_at("fspath", "path") == sites.held_at("ProxyTypes", "Proxy") == sites.held_at("ws", "ws") == -1
    # The whole name is renamed where it stands whole, not at an earlier part of a longer word.
    assert sites.analogy({"is_ws": "is_nl"}, {"is_wsx_is_ws"})["is_wsx_is_ws"] == "is_wsx_is_nl"
    assert sites.analogy({"is_int_float_char": "is_nl"}, {"_is_int_float_char"}) == \
        {"is_int_float_char": "is_nl", "_is_int_float_char": "_is_nl"}
    # A line edit that removes a decorator and renames the method to a private one, made again on another method.
    change = Change(0, 3, 3, ("    @lru_cache(maxsize=None)", "    def is_int_float_char(self) -> bool:"),
                    ("    def _is_int_float_char(self) -> bool:",))
    doc = "class C:\n    @lru_cache(maxsize=None)\n    def is_nl(self) -> bool:\n        return self in NL\n"
    edits = propagate.LineRule(change, 0).edits(whole_region(doc))
    assert applied(doc, edits) == "class C:\n    def _is_nl(self) -> bool:\n        return self in NL\n"
