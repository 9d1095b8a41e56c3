"""The real-code benchmark: holes cut with tree-sitter (``eval.real_code_holes``), the copy baseline, the
metrics and the ``edit-engine eval --benchmark real-code`` command, on small synthetic packages (no network)."""

from __future__ import annotations

import ast
import json
import keyword
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.eval import real_code as rc
from edit_engine.eval.real_code_holes import (
    KINDS,
    SPANS,
    Source,
    common_prefix,
    common_suffix,
    copy_fill,
    cut,
    draw,
    make_cases,
    related_files,
    usable,
)

MODULE = '''"""A small module: names, calls, blocks."""
import os

LIMIT = compute_limit(os.environ, "LIMIT")  # é in a comment


def area(shape, scale=2):
    """Return the scaled area."""
    width = shape.size.width * scale
    if width > LIMIT:
        raise ValueError(f"too wide: {shape.size.width}")
    return width * shape.size.height


class Box:
    """A box.

    Holds its items in order.
    """

    label = "bôîte"

    def __init__(self, size):
        self.size = size
        self.items = [size[0], size[1]]

    def total(self):
        for item in self.items:
            print(item, end="")
        return sum(self.items[1:])
'''


def check_cut(src: str, kind: str, start: int, end: int) -> None:
    c = cut(src, kind, (start, end))
    assert c.restore() == src and c.offset == start and c.hole == src[start:end] and c.hole
    line_start = src.rfind("\n", 0, start) + 1
    if kind == "line":
        assert "\n" not in c.hole and not c.hole[0].isspace() and not src[line_start:start].strip()
        assert 8 <= len(c.hole.strip()) <= 100 and not c.hole.startswith("#")
        assert src[end:end + 1] in ("\n", "")  # the newline stays in the document
    elif kind == "expression":
        assert "\n" not in c.hole and 3 <= len(c.hole) <= 60
        ast.parse(c.hole, mode="eval")  # an expression on its own
        line_end = src.find("\n", end)
        assert src[line_start:start].strip() or src[end:line_end if line_end >= 0 else len(src)].strip()
    else:
        assert not src[line_start:start].strip() and 1 <= c.hole.count("\n") + 1 <= 4
        assert c.hole == c.hole.rstrip()


def test_each_kind_cuts_what_it_says_and_reinsertion_restores_the_file() -> None:
    s = Source.parse(MODULE)
    assert s.clean
    spans = {k: SPANS[k](s) for k in KINDS}
    holes = {k: {MODULE[a:b] for a, b in v} for k, v in spans.items()}
    for k, v in spans.items():
        for a, b in v:
            check_cut(MODULE, k, a, b)
    # After the non-ASCII comment and strings, offsets are characters (tree-sitter's bytes converted).
    assert {"width = shape.size.width * scale", "self.items = [size[0], size[1]]", 'label = "bôîte"'} <= holes["line"]
    assert '"""Return the scaled area."""' in holes["line"]  # a docstring starts outside a string
    assert "Holds its items in order." not in holes["line"]  # a line inside a string is no line hole
    assert {"shape.size.width", "self.items[1:]", '"LIMIT"', "size[0]", "sum(self.items[1:])"} <= holes["expression"]
    assert "shape.size" not in holes["expression"]  # only the outermost attribute of a chain
    assert "shape.size.width * scale" in holes["expression"]  # a right-hand side
    assert 'raise ValueError(f"too wide: {shape.size.width}")' in holes["block"]
    assert 'print(item, end="")' in holes["block"]
    assert "self.size = size\n        self.items = [size[0], size[1]]" in holes["block"]
    # the f-string field's attribute lies inside a string: not an expression hole
    fstring_field = MODULE.index("{shape.size.width}") + 1
    assert all(a != fstring_field for a, _ in spans["expression"])


_NAME = st.from_regex(r"[a-z][a-z_]{2,7}", fullmatch=True).filter(
    lambda n: not keyword.iskeyword(n) and not keyword.issoftkeyword(n))
_TEXT = st.text(st.characters(whitelist_categories=("L", "N"), max_codepoint=0x2FFF), max_size=8)


@st.composite
def modules(draw_: st.DrawFn) -> str:
    """Python modules of functions made from a few statement shapes, with non-ASCII string literals."""
    out = []
    for i in range(draw_(st.integers(1, 4))):
        a, b, c = draw_(st.lists(_NAME, min_size=3, max_size=3, unique=True))
        n, s = draw_(st.integers(0, 99)), draw_(_TEXT)
        body = draw_(st.lists(st.sampled_from([
            f"{a} = {b}.{c}({n}, key='{s}')",
            f"{a} = {b}[{n}] + len('{s}')",
            f"if {a}:\n        {b} = {c}.{a}\n        return {b}",
            f"for {a} in {b}:\n        print({a}, '{s}')",
            f"return {a}.{b}.{c}",
            f"# {s} comment",
            f"x = '''{s}\n{a} = {b}(1)\n'''",
        ]), min_size=1, max_size=5))
        out.append(f"def f{i}({a}, {b}):\n" + "".join(f"    {x}\n" for x in body) + "    pass\n")
    return "\n\n".join(out)


@settings(max_examples=60, deadline=None)
@given(modules())
def test_property_every_cut_of_a_generated_module_restores_it(src: str) -> None:
    s = Source.parse(src)
    assert s.clean and usable(src), src
    for kind in KINDS:
        for a, b in SPANS[kind](s):
            check_cut(src, kind, a, b)
            assert not s.in_string(a)
    cases = make_cases("dev", {"pkg": {"pkg/a.py": src, "pkg/b.py": MODULE}}, {"pkg": "1.0"}, per_kind=5, seed=3)
    for c in cases:
        text = {"pkg/a.py": src, "pkg/b.py": MODULE}[str(c["path"])]
        doc, off, hole = str(c["document"]), int(str(c["offset"])), str(c["hole"])
        assert doc[:off] + hole + doc[off:] == text
        assert c["related"] == [p for p in ("pkg/a.py", "pkg/b.py") if p != c["path"]]


def test_make_cases_is_seeded_balanced_and_skips_broken_files() -> None:
    files = {"a": {"a/m.py": MODULE, "a/broken.py": "def f(:\n    return x = = 1\n"}, "b": {"b/m.py": MODULE}}
    one = make_cases("dev", files, {"a": "1", "b": "2"}, per_kind=6, seed=1)
    assert one == make_cases("dev", files, {"a": "1", "b": "2"}, per_kind=6, seed=1)
    assert one != make_cases("dev", files, {"a": "1", "b": "2"}, per_kind=6, seed=2)
    assert all(c["path"] != "a/broken.py" for c in one)
    for kind in KINDS:
        mine = [c for c in one if c["kind"] == kind]
        assert len(mine) == 6 and [c["package"] for c in mine] == ["a", "b"] * 3  # packages take turns
        assert len({(c["path"], c["offset"], c["package"]) for c in mine}) == 6  # no hole twice
    # draw: without replacement, and fewer when the pools run out
    got = draw({"x": [("p", (0, 1)), ("p", (2, 3))], "y": [("q", (0, 1))]}, 10, random.Random(0))
    assert sorted(got) == [("x", "p", (0, 1)), ("x", "p", (2, 3)), ("y", "q", (0, 1))]


def test_related_files_rank_by_shared_identifiers_within_the_bounds() -> None:
    others = {"a.py": "alpha beta gamma", "b.py": "alpha", "c.py": "alpha beta", "d.py": "x" * 50}
    assert related_files("alpha beta gamma delta", others, limit=2) == ["a.py", "c.py"]
    assert related_files("alpha beta gamma delta", others, limit=8, max_chars=31) == ["a.py", "c.py", "b.py"]
    assert related_files("alpha beta gamma delta", others, limit=8, max_chars=30) == ["a.py", "c.py"]


def test_common_prefix_and_suffix_are_exact_and_capped() -> None:
    a, b = "xx" + "abcdefgh" * 3 + "Z", "yyy" + "abcdefgh" * 3 + "Q"
    assert common_prefix(a, 2, b, 3) == 24 and common_prefix(a, 2, b, 3, cap=5) == 5
    assert common_prefix(a, 0, b, 0) == 0 and common_prefix(a, len(a), b, 0) == 0
    assert common_suffix("..hello", 7, "__hello", 7) == 5 and common_suffix("hello", 5, "hello", 5, cap=3) == 3
    for i in range(len(a) + 1):  # against a plain loop
        k = 0
        while i + k < len(a) and 3 + k < len(b) and a[i + k] == b[3 + k]:
            k += 1
        assert common_prefix(a, i, b, 3, cap=10**6) == k


REPEATED = '''def first(x):
    total = compute(x, scale=2)
    return total


def second(x):
    total = compute(x, scale=2)
    return total
'''


def test_the_copy_baseline_finds_a_repeated_line() -> None:
    start = REPEATED.rindex("total = compute")
    c = cut(REPEATED, "line", (start, REPEATED.index("\n", start)))
    got = copy_fill("line", c.document, c.offset)
    assert got is not None and got.text == "total = compute(x, scale=2)" and got.source == -1
    assert got.start == REPEATED.index("total = compute")
    # the hole's own spot is never a candidate: with the first copy gone as well there is no such line left
    other = c.document.index("total = compute")
    alone = c.document[:other] + c.document[other + len("total = compute(x, scale=2)"):]
    got = copy_fill("line", alone, c.offset - len("total = compute(x, scale=2)"))
    assert got is None or got.text != "total = compute(x, scale=2)"


def test_the_copy_baseline_reads_related_files_ties_go_first_and_blocks_are_reindented() -> None:
    doc = "def g(v):\n    return helper.run(v)\n"
    o = doc.index("helper.run")
    c = cut(doc, "expression", (o, o + len("helper.run")))
    related = ["def f(v):\n    return helper.spin(v)\n", "def f(v):\n    return helper.walk(v)\n"]
    got = copy_fill("expression", c.document, c.offset, related)
    assert got is not None and (got.text, got.source) == ("helper.spin", 0)  # equal scores: the first wins
    # A two-line body copied from a deeper level comes back at the hole's level.
    # (K's body has more than 4 lines, so g's body is the only block of the related file)
    src = "class K:\n    A = 1\n    B = 2\n    C = 3\n\n    def g(a):\n        x = a + 1\n        return x\n"
    target = "def f(a):\n    x = a + 1\n    return x\n"
    s = target.index("x = a")
    hole = cut(target, "block", (s, len(target) - 1))
    got = copy_fill("block", hole.document, hole.offset, [src])
    assert got is not None and got.text == "x = a + 1\n    return x"


def _case(kind: str, hole: str, document: str = "x = 1\n\n", offset: int = 6) -> rc.Case:
    return rc.Case(f"c-{kind}", "pkg", "pkg/m.py", kind, document, offset, hole)


def test_metrics_on_hand_made_cases() -> None:
    line = _case("line", "y = f(2)  ")
    assert rc.score(line, rc.Fill("y = f(2)\n    z = 3", "model")).exact  # the line's content only
    assert not rc.score(line, rc.Fill("y = f(3)", "model")).exact
    assert rc.score(line, rc.Fill("y = f(3)", "model")).edit_sim == pytest.approx(1 - 1 / 8)
    expr = _case("expression", "a.b", "v = \n", 4)
    assert rc.score(expr, rc.Fill("a.b  ", "copy")).exact and not rc.score(expr, rc.Fill(" a.b", "copy")).exact
    assert rc.score(expr, rc.Fill("", "none")).edit_sim == 0.0
    assert rc.score(_case("expression", ""), rc.Fill("", "empty")).edit_sim == 1.0
    block = _case("block", "a = 1\n    return a", "def f():\n    \n", 13)
    assert rc.score(block, rc.Fill("a = 1   \n    return a\n\n", "model")).exact
    assert not rc.score(block, rc.Fill("a = 1\n    return  a", "model")).exact
    # parse: the file with the fill at the cursor, tree-sitter without ERROR / MISSING
    assert rc.score(block, rc.Fill("a = 1\n    return a", "model")).parse_ok
    assert not rc.score(block, rc.Fill("a = (1", "model")).parse_ok
    assert not rc.score(block, rc.Fill("", "empty")).parse_ok  # a def with no body
    outcomes = [rc.score(line, rc.Fill("y = f(2)", "copy", 1, 10.0)), rc.score(line, rc.Fill("q", "model", 3, 30.0)),
                rc.score(line, rc.Fill("y = f(2)", "model", 5, 20.0)), rc.score(line, rc.Fill("", "none", 0, 40.0))]
    g = rc.group(outcomes)
    assert (g["cases"], g["exact"], g["exact_match"]) == (4, 2, 0.5)
    assert (g["p50_ms"], g["p95_ms"], g["nfe_mean"]) == (20.0, 40.0, 2.25)
    assert g["sources"] == {"copy": {"cases": 1, "share": 0.25, "exact_match": 1.0},
                            "model": {"cases": 2, "share": 0.5, "exact_match": 0.5},
                            "none": {"cases": 1, "share": 0.25, "exact_match": 0.0}}
    assert g["empty_share"] == 0.25


class _FakeCompletion:
    def __init__(self, text: str, start: int, end: int) -> None:
        self.text, self.start, self.end = text, start, end
        self.source, self.nfe, self.elapsed_ms, self.reason = "model", 4, 12.0, ""


class _FakeEngine:
    def __init__(self, text: str, start: int, end: int) -> None:
        self.answer = _FakeCompletion(text, start, end)
        self.related: list[str] | None = None

    def complete(self, text: str, offset: int, language: str, related: list[str]) -> _FakeCompletion:
        self.related = related
        return self.answer


def test_the_engine_fill_is_what_the_edit_puts_at_the_cursor() -> None:
    case = rc.Case("e", "pkg", "m.py", "expression", "v = f()\n", 6, "x", ("o.py",), ("other text",))
    eng = _FakeEngine("x)", 6, 7)  # the edit replaced the closing bracket and wrote it again
    f = rc.engine_filler(eng)(case)
    assert (f.text, f.context_changed, f.nfe) == ("x", False, 4) and eng.related == ["other text"]
    f = rc.engine_filler(_FakeEngine("x", 4, 7))(case)  # the edit removed "f()": context changed, no fill
    assert (f.text, f.context_changed) == ("", True)


def _tiny_set(root: Path) -> None:
    files = {"pkg/m.py": MODULE, "pkg/r.py": REPEATED}
    for p, t in files.items():
        (root / "files" / "pkg" / p).parent.mkdir(parents=True, exist_ok=True)
        (root / "files" / "pkg" / p).write_text(t, encoding="utf-8")
    cases = make_cases("dev", {"pkg": files}, {"pkg": "0.1"}, per_kind=2, seed=0)
    (root / "dev.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")


def test_load_cases_reads_the_related_files(tmp_path: Path) -> None:
    _tiny_set(tmp_path)
    cases = rc.load_cases(tmp_path, "dev")
    assert len(cases) == 6 and all(c.related == (REPEATED if c.path == "pkg/m.py" else MODULE,) for c in cases)
    assert all(c.related == () for c in rc.load_cases(tmp_path, "dev", related=False))
    assert len(rc.load_cases(tmp_path, "dev", limit=2)) == 2
    with pytest.raises(rc.BenchmarkError, match="not found"):
        rc.load_cases(tmp_path, "test")
    with pytest.raises(rc.BenchmarkError, match="--data"):
        rc.load_cases(None, "dev")


@pytest.mark.slow
def test_eval_command_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from edit_engine.cli.main import main

    _tiny_set(tmp_path)
    out = tmp_path / "results.jsonl"
    assert main(["eval", "--benchmark", "real-code", "--data", str(tmp_path), "--split", "dev", "--limit", "3",
                 "--threads", "1", "--no-progress", "--json", "--out", str(out)]) == 0
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (s["benchmark"], s["split"], s["fill"], s["cases"], s["related"]) == ("real-code", "dev", "engine", 3, True)
    assert set(s["by_kind"]) == {"line", "expression"} and s["model"] and s["nfe_mean"] > 0 and s["p50_ms"] > 0
    assert 0.0 <= s["edit_sim"] <= 1.0 and sum(v["share"] for v in s["sources"].values()) == pytest.approx(1.0)
    assert set(s["sources"]) <= {"model", "copy", "none"}
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["case_id"] for r in rows] == ["dev-line-000", "dev-line-001", "dev-expression-000"]
    for fill, em in (("copy-baseline", None), ("empty", 0.0)):
        assert main(["eval", "--benchmark", "real-code", "--data", str(tmp_path), "--split", "dev",
                     "--fill", fill, "--no-progress", "--json"]) == 0
        s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert s["cases"] == 6 and set(s["by_kind"]) == set(KINDS) and s["nfe_mean"] == 0
        assert em is None or s["exact_match"] == em
    assert main(["eval", "--benchmark", "real-code", "--data", str(tmp_path), "--split", "dev", "--fill",
                 "copy-baseline", "--no-related", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "related files off" in text and "  expression" in text and "baseline 100%" in text


@pytest.mark.parametrize("args", [["--benchmark", "real-code", "--fill", "patterns"],
                                  ["--benchmark", "real-code", "--document"],
                                  ["--benchmark", "next-edit", "--fill", "copy-baseline"],
                                  ["--benchmark", "humaneval-single", "--split", "dev"],
                                  ["--benchmark", "humaneval-single", "--fill", "empty"]])
def test_flags_that_do_not_go_together_are_refused(args: list[str], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from edit_engine.cli.main import main

    _tiny_set(tmp_path)
    assert main(["eval", *args, "--data", str(tmp_path), "--no-progress"]) == 2
    assert "error" in capsys.readouterr().err
