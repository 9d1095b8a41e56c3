"""A name imported twice (``edits/imports.py``): when the history imports a name from a module that an older
top-level import still binds from another, next edit takes it out of the older import, and nothing else."""

from __future__ import annotations

import ast
import difflib

from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.edits import imports, next_edit, patterns, propagate
from tests.helpers import whole_region

OLD = '''from __future__ import annotations

from typing import Any
from typing import Sequence
from typing import (
    Callable,
    Mapping,
    Optional,
)


def f(x: Sequence[Any], m: Mapping) -> Optional[Callable]:
    return None
'''


def _diff(before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), "a/m.py", "b/m.py"))


def _edits(before: str, after: str) -> str:
    """``after`` with every edit of the import rule inferred from the change ``before`` -> ``after``."""
    a = patterns.analyse([_diff(before, after)], after, "python")
    found = imports.infer(a, "python")
    out = after
    for e in sorted((e for rule in found for e in rule.edits(whole_region(after))), key=lambda e: -e.start):
        assert e.kind == "import"
        out = out[: e.start] + e.text + out[e.end :]
    return out


def test_names_imported_anew_leave_the_older_imports_one_proposal_at_a_time() -> None:
    v1 = OLD.replace("from typing import Any\n", "from collections.abc import Sequence\nfrom typing import Any\n")
    doc = v1.replace("    Optional,\n)\n", "    Optional,\n)\nfrom collections.abc import Mapping\n")
    history = [_diff(OLD, v1), _diff(v1, doc)]
    cursor = doc.index("from collections.abc import Mapping")
    shown = []
    while True:
        r = next_edit.next_edit(None, next_edit.check_request(doc, cursor, history, "python"), use_model=False)
        if r is None:
            break
        assert r.patterns == ("import",)
        shown.append(doc[r.start : r.end])
        new = doc[: r.start] + r.text + doc[r.end :]
        history.append(_diff(doc, new))
        doc, cursor = new, r.start
    # Both older bindings went, behind the cursor too (the code needs it: a name bound twice), nearest first.
    assert shown == ["    Mapping,\n", "from typing import Sequence\n"]
    ast.parse(doc)
    assert doc.count("Sequence\n") == 1 and "    Callable,\n    Optional,\n)\nfrom collections.abc import Mapping" in doc


def test_a_name_in_a_row_of_several_leaves_that_row_only() -> None:
    before = "from typing import Any, Sequence, cast\nfrom typing import Iterable, Sequence\n\nx: Sequence[Any]\n"
    after = "from collections.abc import Sequence\n" + before
    assert _edits(before, after) == "from collections.abc import Sequence\nfrom typing import Any, cast\n" \
        "from typing import Iterable\n\nx: Sequence[Any]\n"


def test_imports_made_twice_on_purpose_or_by_a_move_are_left_alone() -> None:
    guarded = ("try:\n    from tomllib import loads\nexcept ImportError:\n    from tomli import loads\n")
    assert _edits(guarded.replace("from tomli", "from toml"), guarded) == guarded
    checking = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from typing import Sequence\n"
    after = "from collections.abc import Sequence\n" + checking
    assert _edits(checking, after) == after
    # The same module on both: a move, not a new source of the name.
    moved = "from typing import Any\nfrom typing import Sequence\n"
    after = "from typing import Sequence\n" + moved.replace("from typing import Sequence\n", "", 1)
    assert _edits(moved, after) == after
    # Another language, and a module import (it binds the module).
    assert imports.infer(patterns.analyse([_diff("a\n", "b\n")], "b\n", "javascript"), "javascript") == []
    plain = "import json\n"
    assert _edits(plain, "import simplejson as json\n" + plain) == "import simplejson as json\n" + plain


def test_code_being_typed_elsewhere_does_not_stop_it_but_an_import_being_typed_does() -> None:
    before = "from typing import Any, Sequence\n\n\ndef f(x: Sequence[Any]) -> None:\n    return (x\n"
    after = "from collections.abc import Sequence\n" + before
    assert _edits(before, after) == after.replace("Any, Sequence", "Any")  # the body does not parse yet
    half = before.replace("Any, Sequence", "Any, Sequence, (")
    assert _edits(half, "from collections.abc import Sequence\n" + half) == "from collections.abc import Sequence\n" + half


def test_the_rule_is_a_kind_of_the_one_machinery_weaker_than_a_rename() -> None:
    assert propagate.KINDS.index("rename") < propagate.KINDS.index("import") < propagate.KINDS.index("layout")


NAMES = ["Callable", "Iterable", "Mapping", "Sequence", "Set", "Sized"]


def _statement(names: list[str], style: str, per_row: int) -> str:
    """``from typing import`` of ``names`` written in one of the styles people and formatters use."""
    if style == "line":
        return f"from typing import {', '.join(names)}\n"
    rows = [names[k : k + per_row] for k in range(0, len(names), per_row)]
    if style == "rows":
        return "from typing import (\n" + "".join(f"    {', '.join(x)},\n" for x in rows) + ")\n"
    # hanging: the first names on the opening row, the last row closing the parenthesis
    body = ",\n    ".join(", ".join(x) for x in rows)
    return f"from typing import ({body})\n"


@settings(max_examples=150, deadline=None)
@given(old=st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True), data=st.data(),
       style=st.sampled_from(["line", "rows", "hanging"]), per_row=st.integers(1, 3))
def test_every_proposal_leaves_each_name_bound_once_and_the_others_as_they_were(
        old: list[str], data: st.DataObject, style: str, per_row: int) -> None:
    new = data.draw(st.lists(st.sampled_from(old), min_size=1, unique=True))
    before = f"import os\n{_statement(old, style, per_row)}\n\ndef f() -> None:\n    return None\n"
    after = f"from collections.abc import {', '.join(new)}\n" + before
    got = _edits(before, after)
    tree = ast.parse(got)
    bound = [a.asname or a.name for s in tree.body if isinstance(s, ast.ImportFrom) for a in s.names]
    assert sorted(bound) == sorted(old)  # each name once: the new ones from collections.abc, the rest from typing
    kept = [n for n in old if n not in new]
    typing_names = [a.name for s in tree.body if isinstance(s, ast.ImportFrom) and s.module == "typing"
                    for a in s.names]
    assert typing_names == kept
    assert got.endswith("\n\ndef f() -> None:\n    return None\n") and got.count("import os\n") == 1
