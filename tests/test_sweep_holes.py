"""Held-out holes (``edit_engine.eval.holes``, measured on by ``benchmarks/sweep_commit.py``): they come from
validation files only (or every file of an untrained root) and rebuild code that parses."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from edit_engine.eval import holes


def test_function_holes_are_humaneval_shaped() -> None:
    cuts = holes.function_holes(6, seed=3)
    assert len(cuts) == 6
    for pre, suf, line, whole_pre, whole_suf in cuts:
        assert (pre, suf) == (whole_pre, whole_suf)  # the function is the whole context
        assert line.endswith("\n") and line.strip() and "\n" not in line[:-1]
        tree = ast.parse(pre + line + suf)  # a standalone (dedented) function, whole
        (fn,) = tree.body
        assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(fn) is not None
        hole_line = pre.count("\n") + 1
        end = fn.body[0].end_lineno
        assert end is not None and hole_line > end  # after the docstring


def test_word_holes_cut_inside_a_word_and_rebuild_the_file() -> None:
    cuts = holes.word_holes(12, seed=5)
    assert len(cuts) == 12
    for pre, suf, rest, whole_pre, whole_suf in cuts:
        assert whole_pre.endswith(pre) and whole_suf.startswith(suf) and suf.startswith("\n")
        assert pre[-1].isalnum() and rest[0].isalnum() and "\n" not in rest  # the cursor is inside a word
        line = whole_pre[whole_pre.rfind("\n") + 1 :] + rest
        assert line.strip() and not line.lstrip().startswith("#")


def test_line_and_body_holes_rebuild_their_file() -> None:
    for pre, suf, line, whole_pre, whole_suf in holes.holes(8, seed=1):
        assert whole_pre.endswith(pre) and whole_suf.startswith(suf) and line.endswith("\n") and line.strip()
        assert whole_pre.endswith("\n") or not whole_pre
    for pre, suf, hole, whole_pre, whole_suf in holes.body_holes(6, seed=2):
        assert whole_pre.endswith(pre) and whole_pre.rstrip().endswith(":") and whole_suf.startswith(suf)
        assert suf.startswith("\n")
        assert hole.startswith("\n") and hole.strip() and "\n" not in hole[1:]


def test_parse_check_counts_only_what_parses() -> None:
    assert holes.parses("def f():\n    return 1\n")
    assert not holes.parses("def f(:\n")
    assert not holes.parses("x = (" * 5000)  # too deep for the parser: a failure, not a crash


def test_function_holes_from_an_untrained_root_are_distinct_and_humaneval_shaped(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    root.mkdir()
    body = "".join(f"def f{i}(xs):\n    \"\"\"Doc {i}.\"\"\"\n    total = 0\n    for x in xs:\n"
                   f"        total += x * {i}\n    return total\n\n\n" for i in range(3))
    (root / "mod.py").write_text(body)
    # 3 functions x 4 body lines: asking for more gives every cut once, not repeats
    cuts = holes.function_holes(50, roots=[str(root)], all_files=True)
    assert len(cuts) == 12 == len({(pre, line) for pre, _, line, _, _ in cuts})
    for pre, suf, line, _, _ in cuts:
        assert pre.startswith("def f") and '"""Doc' in pre and line.endswith("\n")
        assert holes.parses(pre + line + suf)
    with pytest.raises(holes.NoHeldOutFiles):  # the validation split of one tiny root may be empty: said, not a hang
        holes.held_out_files([str(tmp_path / "none")], all_files=True)


def test_prefix_match_counts_the_right_start() -> None:
    assert holes.prefix_match("return x\n", "return y\n") == 7 / 9
    assert holes.prefix_match("", "abc") == 0.0 and holes.prefix_match("abc", "") == 0.0
