"""The names a document binds (``edits/bindings.py``): what next edit asks before renaming behind the cursor."""

from __future__ import annotations

import keyword

from hypothesis import given
from hypothesis import strategies as st

from edit_engine.edits import bindings
from edit_engine.syntax import trees as syntax

PY = """import os.path as osp
from typing import Any
import json


class Box:
    size: int = 0

    def __init__(self, width, *args, scale=1, **rest):
        self.width = width
        for k, v in rest.items():
            pass
        with open(width) as fh:
            pass
        try:
            pass
        except ValueError as err:
            pass


def area(r):
    global TOTAL
    total = [y for y in range(r)]
    return missing(r) + other.attr
"""


def test_python_binds_every_scope_and_the_builtins() -> None:
    got = bindings.bound(syntax.Document.parse(PY, "python"))
    assert got is not None
    for name in ("osp", "Any", "json", "Box", "size", "__init__", "width", "args", "scale", "rest", "k", "v",
                 "fh", "err", "area", "r", "TOTAL", "total", "y", "len", "ValueError"):
        assert name in got, name
    for name in ("missing", "other", "attr", "os", "typing"):
        assert name not in got, name


def test_python_that_does_not_parse_tells_nothing() -> None:
    assert bindings.bound(syntax.Document.parse("def f(:\n", "python")) is None


def test_other_languages_declarations_assignments_and_parameters() -> None:
    go = 'package lib\n\nimport x "example.com/x"\n\nfunc Load(path string, n int) error {\n\tdata := read(path)\n' \
         '\tvar count int\n\treturn use(data, count)\n}\n'
    got = bindings.bound(syntax.Document.parse(go, "go"))
    assert got is not None and {"Load", "path", "n", "data", "count"} <= got
    assert not {"read", "use"} & got
    ts = "import { a as b } from './m';\nconst limit = 3;\nfunction run(items: number[]) { return helper(items); }\n"
    got = bindings.bound(syntax.Document.parse(ts, "typescript"))
    assert got is not None and {"b", "limit", "run", "items"} <= got and "helper" not in got


NAMES = st.from_regex(r"[a-z][a-z_]{2,10}", fullmatch=True).filter(lambda w: not keyword.iskeyword(w)
                                                                     and not keyword.issoftkeyword(w))


@given(NAMES, NAMES, st.sampled_from(["{} = 1", "def {}(): pass", "class {}: pass", "import {}",
                                      "for {} in []: pass", "def f({}): pass", "self.{} = 1"]))
def test_a_bound_name_is_found_and_a_name_only_used_is_not(bound: str, used: str, form: str) -> None:
    code = form.format(bound) + f"\nprint({used})\n"
    got = bindings.bound(syntax.Document.parse(code, "python"))
    assert got is not None and bound in got
    also = {"f"} if form.startswith("def f(") else set()  # the definition that takes it as a parameter
    assert (used in got) == (used == bound or used in bindings.BUILTINS or used in also)
