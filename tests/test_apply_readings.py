"""Apply: snippets whose place could be misread, each merged as the snippet says or refused (cases met on real
hunks: an edited line that now reads like another, a repeated line, the end of the file, decorators shown in
part, a definition named like an assigned name)."""

from __future__ import annotations

import pytest

from edit_engine.edits.apply import merge

CALLS = """def first(path, steps, threshold, explain):
    return detect(
        path,
        steps,
        threshold,
        explain,
    )


def second(path, steps, threshold):
    return detect(
        path,
        steps,
        threshold
    )
"""


def test_an_edited_line_that_now_reads_like_a_line_elsewhere_is_refused_not_merged_there() -> None:
    """``threshold`` -> ``threshold,`` in ``second``: the edited line now stands in ``first`` too, where the
    shown lines would delete ``explain,`` by contiguity. Both readings fit; the merge refuses instead of deleting
    code."""
    snippet = "# ... existing code ...\n        steps,\n        threshold,\n    )\n\n# ... existing code ...\n"
    with pytest.raises(ValueError, match="reads two ways: it deletes lines at line 4, or edits a line in place at line 13"):
        merge(CALLS, snippet, "python")
    # A line more of context tells them apart.
    more = "# ... existing code ...\ndef second(path, steps, threshold):\n    return detect(\n        path,\n" \
        "        steps,\n        threshold,\n    )\n"
    assert merge(CALLS, more, "python").text == CALLS.replace("        threshold\n    )", "        threshold,\n    )")


def test_an_update_that_ends_the_file_says_how_many_blank_lines_end_it() -> None:
    original = "import os\n\n__version__ = '1.0'\n"
    assert merge(original, "# ... existing code ...\nimport os\n\n__version__ = '1.1'\n\n", "python").text == \
        "import os\n\n__version__ = '1.1'\n\n"
    assert merge(original + "\n\n", "# ... existing code ...\nimport os\n\n__version__ = '1.1'\n", "python").text \
        == "import os\n\n__version__ = '1.1'\n"


TESTS = """class Test:
    def test_keys(self):
        self.flakes(
            "{1: 1, 1: 2}",
            m.MultiValueRepeatedKeyLiteral,
            m.MultiValueRepeatedKeyLiteral,
        )

    def test_bytes(self):
        self.flakes("{b'a': 1}")

    @skip("old")
    def test_values(self):
        self.flakes(
            "{1: b'a', 1: u'a'}",
            m.MultiValueRepeatedKeyLiteral,
            m.MultiValueRepeatedKeyLiteral,
        )
"""


def test_a_repeated_line_after_a_definition_is_placed_by_its_neighbour() -> None:
    """The chunk's last lines after ``test_values`` are a line that stands twice in a row: the copy placed is
    the one the line before it is beside, so nothing is doubled."""
    snippet = ("# ... existing code ...\n    def test_bytes(self):\n        self.flakes(\"{b'a': 1}\")\n\n"
               "    def test_values(self):\n        self.flakes(\n            \"{1: b'a', 1: u'a'}\",\n"
               "            m.MultiValueRepeatedKeyLiteral,\n            m.MultiValueRepeatedKeyLiteral,\n"
               "# ... existing code ...\n")
    assert merge(TESTS, snippet, "python").text == TESTS.replace('    @skip("old")\n', "")


def test_a_definition_shown_with_its_last_decorator_keeps_those_above() -> None:
    original = "@first\n@second(1)\ndef f(x):\n    return x\n\n\ndef g():\n    pass\n"
    snippet = "# ... existing code ...\n@second(1)\ndef f(x):\n    return x + 1\n# ... existing code ...\n"
    assert merge(original, snippet, "python").text == original.replace("return x\n", "return x + 1\n")


def test_a_new_definition_named_like_an_assigned_name_is_refused() -> None:
    """``handler`` is assigned in the original: a ``def handler`` that anchors nowhere rewrites it, and where is
    not known; it is not inserted beside it as new code."""
    original = "import os\n\n\nhandler = make_handler(os.environ)\n\n\ndef other():\n    pass\n"
    snippet = "# ... existing code ...\ndef handler(event):\n    return event\n# ... existing code ...\n"
    with pytest.raises(ValueError, match="defines 'handler', which the original assigns at line 4"):
        merge(original, snippet, "python")
