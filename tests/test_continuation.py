"""The check a draft passes before it is shown: can the code at the cursor still become code that parses?"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.engine.continuation import dedent, may_continue
from edit_engine.memory.lexer import tokenize

STATEMENTS = [
    "return [job for job in self.jobs if tag in job.tags]",
    "for index, (key, value) in enumerate(sorted(items.items(), key=lambda kv: kv[1])):",
    "value = evaluate_string(literal.text, flags={'locale': 'L' in flags})",
    'raise ValueError("invalid value: %r" % (value,))',
    "if key in self.map and not self.map[key].closed:",
    "with open(path, encoding='utf-8') as handle, lock:",
    "def visit_rule(self, node: Node, rule: list[str] | None = None) -> dict[str, int]:",
    "class Schema(Base, metaclass=SchemaMeta):",
    "total = sum((x - mean) ** 2 for x in values) / len(values)",
    "many = self.many if many is None else bool(many)",
    "except (KeyError, IndexError) as error:",
    "elif isinstance(node, (list, tuple)) and len(node) > 2:",
    "yield from (await source.read(size) for _ in range(count))",
    "result: dict[str, list[int]] = {name: [] for name in names}",
    '"""Return the mean of a non-empty list."""',
    "assert 0 <= index < len(rows), 'index out of range'",
]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(STATEMENTS), st.data())
def test_every_prefix_of_real_code_may_continue(statement: str, data: st.DataObject) -> None:
    """A draft that is the start of code a person really writes is never turned down, wherever it stops between
    words (a draft is whole tokens: in a string, a bracket or a header), and wherever the statement so far ends
    and the draft begins."""
    ends = list(itertools.accumulate(len(t) for t in tokenize(statement, "python")))  # the memory's tokens
    cut = data.draw(st.sampled_from(ends))
    split = data.draw(st.integers(0, cut - 1))
    assert may_continue(statement[:split], statement[split:cut]), (statement[:split], statement[split:cut])


def test_an_error_inside_the_draft_is_never_mended() -> None:
    for before, draft in [("while index", " = 0.0:"), ("reader = csv.", "0("), ("if index", " = 1"),
                          ("x = ", "foo bar"), ("", "def self(,, is -> None:"), ("for path in ", "range. None:")]:
        assert not may_continue(before, draft), (before, draft)


def test_a_statement_over_lines_is_moved_left_as_far_as_its_first_line() -> None:
    assert dedent("return [\n            job\n        ]", 8) == "return [\n    job\n]"
    assert dedent("x = (1,\n  2", 8) == "x = (1,\n2"  # never past a line's own indentation
    assert may_continue(dedent("return [\n            job ", 8), "for")
