"""Every pattern kind of next edit is a rule of one machinery (``sites.Rule``): ``propagate.infer`` makes one rule
per transformation of the history, ``propagate.candidates`` asks each for its edits alike, and
``propagate.for_elsewhere`` asks each whether it holds in another open document."""

from __future__ import annotations

import difflib

from edit_engine.edits import call_sites, patterns, propagate, rules, sites
from edit_engine.edits.patterns import Analysis, CallChange, Change, ParamAdded, Rename
from edit_engine.syntax import positions
from edit_engine.syntax import trees as syntax

DOC = """import os


def scale(amount, factor):
    return amount * factor


def load(path, mode, encoding, retries=int(3)):
    data = open(path).read(int(3))
    return data


def run(items, encoding):
    size = len(items)
    limit = 10
    first = scale(len(items), 2)
    third = fetch(rows, 1)
    out = load("a.txt", "r")
    # the value of the first item
    return compute(value=first, limit=5), {**gone_map, "x": 1}, setattr(out, "k", 1)
"""


def _analysis() -> Analysis:
    """One pattern of each kind, as ``patterns.analyse`` would find them."""
    return Analysis(
        changes=[Change(0, 8, 8, ("    second = fetch(items, 1)",), ("    second = fetch(items, 1, strict=True)",)),
                 Change(1, 3, 3, ("def scale(value, factor):",), ("def scale(amount, factor):",))],
        renames=[Rename("value", "amount", False, keyword=True), Rename("items", "rows", False)],
        calls=[CallChange("scale", ("x", "2"), ("x", "2", "clip")),
               CallChange("fetch", ("a", "1"), ("a", "1", "strict=True"))],
        params=[ParamAdded("load", "encoding", 2, "", False, ("path", "mode", "encoding")),
                ParamAdded("load", "retries", 3, "int(3)", False)],
        aliases=[("size", "len(items)")],
        gone={"gone_map"},
        imported={"_obj_setattr"},
        assigned=[("limit", "    ", "10")],
    )


def _region(doc: str) -> sites.Region:
    starts = positions.line_starts(doc)
    return sites.Region(syntax.Document.parse(doc, "python"), starts, 0, len(starts))


def test_infer_makes_one_rule_per_transformation_in_the_order_of_the_kinds() -> None:
    found = propagate.infer(_analysis(), "python")
    assert all(isinstance(x, sites.Rule) for x in found)
    assert [type(x).__name__ for x in found] == [
        "LineRule", "LineRule",  # the most recent change first
        "CallRule", "CallRule", "SignatureRule", "SignatureRule", "ParameterRule", "ParameterRule",
        "AliasRule", "KeywordRule", "DefaultRule", "RenameRule", "GoneRule", "ImportRule"]
    line_rules = [x for x in found if isinstance(x, propagate.LineRule)]
    assert [x.change.diff for x in line_rules] == [1, 0] and [x.order for x in line_rules] == [0, 2]
    params = [x for x in found if isinstance(x, call_sites.ParameterRule)]
    assert [p.at_calls for p in params] == [True, False]  # the calls get the parameter without a default
    # Inferred once per request and language.
    a = _analysis()
    assert propagate.infer(a, "python") is propagate.infer(a, "python")


def test_each_rule_makes_edits_of_its_own_kind_and_candidates_are_their_union() -> None:
    found = propagate.infer(_analysis(), "python")
    r = _region(DOC)
    union: list[sites.Edit] = []
    made: list[tuple[str, list[str]]] = []
    for rule in found:
        got = rule.edits(r)
        assert {e.kind for e in got} <= {rule.kind}
        made.append((type(rule).__name__, [f"{DOC[e.start : e.end].strip()} -> {e.text.strip()}".strip() for e in got]))
        union += got
    assert made == [
        ("LineRule", []),  # ``def scale(value, ...)`` is made already
        ("LineRule", ["third = fetch(rows, 1) -> third = fetch(rows, 1, strict=True)"]),
        ("CallRule", []),  # ``clip`` is not in scope at the call
        ("CallRule", ["rows, 1 -> rows, 1, strict=True"]),
        ("SignatureRule", ["amount, factor -> amount, factor, clip"]),
        ("SignatureRule", []),
        ("ParameterRule", ['"a.txt", "r" -> "a.txt", "r", encoding']),
        ("ParameterRule", []),  # a default value: the calls need not pass it
        ("AliasRule", ["len(items) -> size"]),
        ("KeywordRule", ["5 -> limit"]),
        ("DefaultRule", ["int(3) -> retries"]),
        ("RenameRule", ["items -> rows"] * 3 + ["value -> amount"] * 2),  # the comment and the keyword argument
        ("GoneRule", ["**gone_map, ->"]),
        ("ImportRule", ["setattr -> _obj_setattr"]),
    ]
    assert propagate.candidates(r, found) == union
    # The strongest kind wins where two rules edit one place: the row's line edit over the call's.
    kept = propagate.resolve(union)
    assert [e.kind for e in kept if "strict" in e.text] == ["line"]


def test_rules_that_hold_in_another_document() -> None:
    """Statement changes, tree rules and added parameters hold anywhere; a rename or changed call only for a name
    the changed document defines; aliases, keywords, defaults, removed and imported names only there."""
    found = propagate.infer(_analysis(), "python")
    carried = propagate.for_elsewhere(found, "rows = []\n\n\ndef scale(amount, factor):\n    pass\n\n\n"
                                                    "def fetch(a, b):\n    pass\n")
    names = [type(x).__name__ for x in carried]
    assert names == ["LineRule", "LineRule", "CallRule", "CallRule", "SignatureRule", "SignatureRule",
                     "ParameterRule", "ParameterRule", "RenameRule"]
    (rename,) = [x for x in carried if isinstance(x, propagate.RenameRule)]
    assert [x.new for x in rename.renames] == ["rows"] and rename.elsewhere
    assert all(x.elsewhere for x in carried if isinstance(x, propagate.LineRule))
    assert [type(x).__name__ for x in propagate.for_elsewhere(found, "x = 1\n")] == [
        "LineRule", "LineRule", "ParameterRule", "ParameterRule"]


def test_tree_rules_are_rules_of_the_same_machinery() -> None:
    rows = ["check(a, x)", "check(a, y)", "check(a, z)"]
    states = ["\n".join(rows)]
    for old, new in [("check(a, x)", "check(a, x, strict=True)"), ("check(a, y)", "check(a, y, strict=True)")]:
        states.append(states[-1].replace(old, new, 1))
    history = ["".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), "a/x.py", "b/x.py"))
               for a, b in zip(states, states[1:], strict=False)]
    a = patterns.analyse(history, states[-1], "python")
    (tree,) = [x for x in propagate.infer(a, "python") if isinstance(x, rules.TreeRule)]
    assert tree.kind == "rule" and tree.carried(lambda: set()) is tree
    assert [states[-1][e.start : e.end] + " -> " + e.text for e in tree.edits(_region(states[-1]))] == \
        ["check(a, z) -> check(a, z, strict=True)"]


def test_a_built_in_type_swapped_for_another_name_is_no_rename_but_a_change_of_case_is() -> None:
    def renames(old: str, new: str, language: str = "python") -> list[tuple[str, str]]:
        doc = f"def f(items: {new}) -> None:\n    pass\n"
        before = doc.replace(f"items: {new}", f"items: {old}")
        diff = "".join(difflib.unified_diff(before.splitlines(True), doc.splitlines(True), "a/x", "b/x"))
        return [(r.old, r.new) for r in patterns.analyse([diff], doc, language).renames]

    assert renames("list", "Sequence") == [] and renames("object", "Any") == []
    assert renames("List", "list") == [("List", "list")]  # a systematic replacement
    assert renames("Config", "Settings") == [("Config", "Settings")]
    # The built-ins are the language's: ``Result`` is a Rust type, and a Python class may be called so.
    assert renames("_Result", "Result") == [("_Result", "Result")]
    assert renames("Result", "Outcome", "rust") == []
    assert renames("key", "_") == []  # a name given up at a place
    assert renames("log_w", "w") == [("log_w", "w")]


def test_a_module_swapped_in_an_import_renames_nothing_but_an_alias_swapped_does() -> None:
    def renames(before: str, after: str, language: str = "python") -> list[tuple[str, str]]:
        doc = f"{after}\n\n\ndef f(x: typing.Any) -> None:\n    return typing.cast(int, x)\n"
        old = doc.replace(after, before, 1)
        diff = "".join(difflib.unified_diff(old.splitlines(True), doc.splitlines(True), "a/x", "b/x"))
        return [(r.old, r.new) for r in patterns.analyse([diff], doc, language).renames]

    # The same name imported from another module: ``typing`` still names the module the code uses.
    assert renames("from typing import Final", "from typing_extensions import Final") == []
    assert renames("import os.path", "import os.pathlib") == []
    # A name the import binds is renamed: an alias, or the name a module is imported as.
    assert renames("import typing as _t", "import typing as t") == [("_t", "t")]
    assert renames("import simplejson", "import ujson") == [("simplejson", "ujson")]
    assert renames("from .utils import parse_requirement", "from .utils import _parse_requirement") == \
        [("parse_requirement", "_parse_requirement")]
