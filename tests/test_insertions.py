"""Insertion rules (``edits.insertions``): rows the history inserted alike at two places or more, inserted again
beside the neighbour most of those places share, and nowhere the rows already stand."""

from __future__ import annotations

from helpers import applied, whole_region

from edit_engine.edits import insertions, propagate
from edit_engine.edits.patterns import Analysis, Change


def _inserted(rows: tuple[str, ...], around: list[tuple[str, str]]) -> Analysis:
    return Analysis(changes=[Change(k, 10 * k, 10 * k, (), rows, (above,), (below,))
                             for k, (above, below) in enumerate(around)])


DOC = '''def naturaldelta(value):
    """Return a natural delta."""
    return value


def naturaltime(value):
    """Return a natural time.
    """
    import datetime as dt

    return dt.datetime.now()


def naturalday(value):
    """Return a natural day.
    """
    if not value:
        return None
'''


def test_rows_inserted_after_the_same_row_twice_are_inserted_after_it_where_they_are_missing() -> None:
    a = _inserted(("    import datetime as dt", ""), [('    """', "    value = convert(value)"),
                                                       ('    """', "    tmp = Unit[unit.upper()]"),
                                                       ('    """Convert aware datetimes."""', "    if value:")])
    found = insertions.infer(a)
    assert [(r.anchor, r.below, r.shift) for r in found] == [('"""', True, 0)]  # two of three share the row above
    got = applied(DOC, found[0].edits(whole_region(DOC)))
    # naturaltime has the import already; naturaldelta's one-line docstring is not the anchor.
    assert got == DOC.replace('day.\n    """\n', 'day.\n    """\n    import datetime as dt\n\n')


def test_rows_inserted_below_definition_headers_go_below_each_header_indented_as_they_were() -> None:
    a = _inserted(('        """:meta private:"""',), [("    def exception(self) -> BaseException | None:", "        return x"),
                                                       ("    def excinfo(self) -> _ExcInfo | None:", "        exc = y")])
    found = insertions.infer(a)
    assert [(r.anchor, r.below, r.shift) for r in found] == [(None, True, 4)]
    doc = "class R:\n    def result(self):\n        return self._result\n"
    assert applied(doc, found[0].edits(whole_region(doc))) == \
        'class R:\n    def result(self):\n        """:meta private:"""\n        return self._result\n'


def test_an_insertion_seen_once_or_with_no_neighbour_in_common_is_no_rule() -> None:
    assert insertions.infer(_inserted(("    x = 1",), [("    a = f()", "    b = g()")])) == []
    assert insertions.infer(_inserted(("    x = 1",), [("    a = f()", "    b = g()"), ("    c = h()", "    d = k()")])) == []
    # Blank rows alone are spacing, not an insertion to repeat.
    assert insertions.infer(_inserted(("",), [("    a = f()", "    b = g()"), ("    a = f()", "    b = g()")])) == []


def test_insertion_rules_are_inferred_with_the_other_kinds_and_win_over_none_of_them() -> None:
    a = _inserted(("    import datetime as dt", ""), [('    """', "    value = convert(value)"),
                                                       ('    """', "    tmp = Unit[unit.upper()]")])
    found = propagate.infer(a, "python")
    assert [type(x).__name__ for x in found if isinstance(x, insertions.InsertRule)] == ["InsertRule"]
    edits = propagate.resolve(propagate.candidates(whole_region(DOC), found))
    assert [(e.kind, e.text) for e in edits] == [("insert", "    import datetime as dt\n\n")]
    assert "insert" in propagate.KINDS and propagate.KINDS.index("insert") < propagate.KINDS.index("rename")
