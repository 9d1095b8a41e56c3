"""Next edit in the other open documents: which patterns carry across files (``propagate.for_elsewhere``), the
order of the search, the request's checks, and the scoring of ``edit-engine eval --benchmark next-edit-elsewhere``
(``eval.next_edit_elsewhere``). Patterns only: the tiny model is random."""

from __future__ import annotations

import difflib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.edits import budget, patterns
from edit_engine.engine import MAX_OTHERS, Engine
from edit_engine.eval import next_edit_elsewhere as elsewhere


def diff(before: str, after: str, path: str = "lib.py") -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}"))


LIB = """def load_config(path):
    return open(path).read()


def main():
    return load_config("app.toml")
"""
RENAMED = LIB.replace("load_config", "read_config")
HISTORY = [diff(LIB, LIB.replace("def load_config", "def read_config")),
           diff(LIB.replace("def load_config", "def read_config"), RENAMED)]
APP = """import os
from lib import load_config


def run(path):
    return load_config(os.path.join(path, "app.toml"))
"""


def test_a_renamed_function_is_renamed_in_the_first_open_document_that_uses_it(tiny_engine: Engine) -> None:
    other = "def unrelated():\n    return 1\n"
    ne = tiny_engine.next_edit(RENAMED, len(RENAMED), HISTORY, use_model=False,
                               others={"notes.py": other, "app.py": APP})
    assert ne is not None and ne.document == "app.py" and "rename" in ne.patterns
    assert ne.apply(APP) == APP.replace("from lib import load_config", "from lib import read_config")
    # The documents are searched in their order, each from its top.
    done = ne.apply(APP)
    ne = tiny_engine.next_edit(RENAMED, len(RENAMED), HISTORY, use_model=False, others={"app.py": done})
    assert ne is not None and ne.apply(done) == APP.replace("load_config", "read_config")


def test_the_document_itself_comes_first(tiny_engine: Engine) -> None:
    half = LIB.replace("def load_config", "def read_config")
    ne = tiny_engine.next_edit(half, half.index("def main"), HISTORY[:1], use_model=False, others={"app.py": APP})
    assert ne is not None and ne.document is None and ne.apply(half) == RENAMED


@pytest.mark.parametrize("language, lib, app, old, new, row", [
    ("python", "def load_config(path):\n    return open(path).read()\n",
     "import lib\n\n\ndef run(path):\n    return lib.load_config(path)\n", "load_config", "read_config",
     "    return lib.load_config(path)"),
    ("typescript", "export function loadConfig(path: string): string {\n  return read(path);\n}\n",
     'import { loadConfig } from "./lib";\n\nexport const cfg = loadConfig("a");\n', "loadConfig", "readConfig",
     'import { loadConfig } from "./lib";'),
    ("go", "package lib\n\nfunc LoadConfig(path string) string {\n\treturn read(path)\n}\n",
     'package app\n\nimport (\n\t"fmt"\n\t"example.com/lib"\n)\n\nfunc Run(p string) {\n\tfmt.Println(lib.LoadConfig(p))\n}\n',
     "LoadConfig", "ReadConfig", "\tfmt.Println(lib.LoadConfig(p))"),
    ("rust", "pub fn load_config(path: &str) -> String {\n    read(path)\n}\n",
     "use crate::lib::load_config;\n\npub fn run(p: &str) -> String {\n    load_config(p)\n}\n", "load_config",
     "read_config", "use crate::lib::load_config;"),
])
def test_a_renamed_function_is_renamed_where_another_module_uses_it(tiny_engine: Engine, language: str, lib: str,
                                                                     app: str, old: str, new: str, row: str) -> None:
    """Imported by name, or reached through the module's name (``lib.load_config``, Go's ``lib.LoadConfig``)."""
    changed = lib.replace(old, new)
    ne = tiny_engine.next_edit(changed, len(changed), [diff(lib, changed, "lib")], language, use_model=False,
                               others={"app": app})
    assert ne is not None and ne.document == "app" and app[ne.start : ne.end] == row
    assert ne.text == row.replace(old, new)


def test_with_others_first_the_user_s_file_comes_before_the_changed_one(tiny_engine: Engine) -> None:
    """The function was renamed at its definition only; the user went to the file that imports it. That file is
    searched first; without ``others_first`` the use left in the changed file comes first."""
    half = LIB.replace("def load_config", "def read_config")
    ne = tiny_engine.next_edit(half, 0, HISTORY[:1], use_model=False, others={"app.py": APP}, others_first=True)
    assert ne is not None and ne.document == "app.py" and "read_config" in ne.apply(APP)
    ne = tiny_engine.next_edit(half, 0, HISTORY[:1], use_model=False, others={"app.py": APP})
    assert ne is not None and ne.document is None and ne.apply(half) == RENAMED
    done = APP.replace("load_config", "read_config")  # nothing left there: the changed file's own use
    ne = tiny_engine.next_edit(half, 0, HISTORY[:1], use_model=False, others={"app.py": done}, others_first=True)
    assert ne is not None and ne.document is None and ne.apply(half) == RENAMED


def test_a_region_keeps_the_search_in_the_document(tiny_engine: Engine) -> None:
    rows = RENAMED.count("\n") + 1
    assert tiny_engine.next_edit(RENAMED, len(RENAMED), HISTORY, use_model=False, region=(0, rows),
                                 others={"app.py": APP}) is None


def test_a_local_variable_rename_stays_in_its_document(tiny_engine: Engine) -> None:
    before = "def total(items):\n    count = 0\n    for x in items:\n        count += x\n    return count\n"
    after = before.replace("count", "subtotal")
    other = "def mean(items):\n    count = len(items)\n    return sum(items) / count\n"
    history = [diff(before, after)]
    assert tiny_engine.next_edit(after, len(after), history, use_model=False, others={"stats.py": other}) is None


def test_an_import_change_is_not_carried(tiny_engine: Engine) -> None:
    """Each module imports what it uses: a changed import row is no pattern for another module."""
    before = "from typing import Optional\n\n\ndef f(x: Optional[int]) -> int:\n    return x or 0\n"
    after = "from typing import Optional, Union\n\n\ndef f(x: Optional[int]) -> int:\n    return x or 0\n"
    other = "from typing import Optional\n\n\ndef g(y: Optional[str]) -> str:\n    return y or ''\n"
    assert tiny_engine.next_edit(after, len(after), [diff(before, after)], use_model=False,
                                 others={"g.py": other}) is None


def test_a_repeated_statement_change_is_carried(tiny_engine: Engine) -> None:
    before = "def f(x):\n    if x is None:\n        raise ValueError('x')\n    return x\n"
    after = "def f(x):\n    if x is None:\n        raise TypeError('x')\n    return x\n"
    other = "def g(y):\n    if y is None:\n        raise ValueError('y')\n    return y * 2\n"
    ne = tiny_engine.next_edit(after, after.index("return"), [diff(before, after)], use_model=False,
                               others={"g.py": other})
    assert ne is not None and ne.document == "g.py" and ne.apply(other) == other.replace("ValueError", "TypeError")


@pytest.mark.parametrize("others, words", [
    ([("a.py", "x")], "map document names"),
    ({"a.py": 3}, "map document names"),
    ({"": "x"}, "must not be empty"),
    ({f"{k}.py": "" for k in range(MAX_OTHERS + 1)}, "exceed the limit"),
    ({"a.py": "\ud800"}, "others['a.py']"),
])
def test_bad_other_documents_are_refused(tiny_engine: Engine, others: object, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        tiny_engine.next_edit(RENAMED, 0, HISTORY, use_model=False, others=others)  # type: ignore[arg-type]


def test_other_documents_past_their_budget_are_left_not_refused(tiny_engine: Engine,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    half = LIB.replace("def load_config", "def read_config")
    monkeypatch.setattr(budget, "limit", lambda *texts: 1 if len(texts) == 1 else 10**7)
    # The document's own proposal is unaffected; the other documents' search stops at once.
    ne = tiny_engine.next_edit(half, half.index("def main"), HISTORY[:1], use_model=False, others={"app.py": APP})
    assert ne is not None and ne.document is None
    assert tiny_engine.next_edit(RENAMED, len(RENAMED), HISTORY, use_model=False, others={"app.py": APP}) is None


def test_the_names_a_document_defines_for_others() -> None:
    doc = ("import typing as t\nfrom x import y\nLIMIT = 3\n\n\nclass Box:\n    def put(self, v):\n"
           "        self.value = v\n        local = 1\n\n\nasync def fetch():\n    pass\n")
    assert patterns.defines(doc) == {"t", "LIMIT", "Box", "put", "value", "fetch"}


# ------------------------------------------------------------------------------------------------ the benchmark
def case(before: str, after: str) -> elsewhere.ElsewhereCase:
    return elsewhere.ElsewhereCase("c", "a.py", "", 0, (), {"b.py": before, "c.py": "x = 1\n"}, {"b.py": after})


BEFORE = "a = 1\nb = 2\nc = 3\nd = 4\n"
AFTER = "a = 1\nb = 20\nc = 3\nd = 40\n"


@pytest.mark.parametrize("answer, where, exact, part", [
    (("b.py", 6, 11, "b = 20"), "changed", True, True),  # one of the release's hunks, whole
    (("b.py", 6, 11, "b = 21"), "changed", False, False),
    (("b.py", 0, 5, "a = 10"), "changed", False, False),  # a row the release kept
    (("c.py", 0, 5, "x = 2"), "unchanged", False, False),
    ((None, 0, 0, "z"), "here", False, False),
])
def test_proposals_are_scored_against_the_release(answer: tuple[str | None, int, int, str], where: str,
                                                  exact: bool, part: bool) -> None:
    o = elsewhere.Outcome("c")
    elsewhere.score(case(BEFORE, AFTER), (*answer, ("line",)), o)
    assert (o.proposed, o.where, o.exact, o.part) == (True, where, exact, part)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(["a = 1\n", "b = 2\n", "if a:\n", "    b += 1\n", "\n"]), min_size=1, max_size=8),
       st.data())
def test_a_hunk_of_the_release_is_exact_and_a_part_of_one_is_part(rows: list[str], data: st.DataObject) -> None:
    before = "".join(rows)
    i = data.draw(st.integers(0, len(rows) - 1))
    new = data.draw(st.lists(st.sampled_from(["z = 9\n", "w = 8\n"]), min_size=1, max_size=2))
    after = "".join(rows[:i] + new + rows[i + 1 :])
    start = sum(len(r) for r in rows[:i])
    o = elsewhere.Outcome("c")
    elsewhere.score(case(before, after), ("b.py", start, start + len(rows[i]), "".join(new), ()), o)
    assert o.exact and o.part
    o = elsewhere.Outcome("c")
    elsewhere.score(case(before, after), ("b.py", start, start + len(rows[i]), "q = 0\n", ()), o)
    assert not o.exact and not o.part
