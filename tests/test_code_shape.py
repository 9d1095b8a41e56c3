"""The package stays in small pieces: no class over about 300 lines and no function over about 80 (docstrings
included), counted from the syntax tree."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "edit_engine"
MAX_CLASS, MAX_FUNCTION = 300, 80


def spans(root: Path = PACKAGE) -> list[tuple[int, str, str]]:
    """(lines, "class" | "def", "path:line name") of every class and function under ``root``, longest first."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                kind = "class" if isinstance(node, ast.ClassDef) else "def"
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                out.append((lines, kind, f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"))
    return sorted(out, reverse=True)


def test_no_class_or_function_grows_past_its_size() -> None:
    rows = spans()
    too_big = [r for r in rows if r[0] > (MAX_CLASS if r[1] == "class" else MAX_FUNCTION)]
    print("largest class:", next(r for r in rows if r[1] == "class"))
    print("largest function:", next(r for r in rows if r[1] == "def"))
    assert too_big == [], too_big


def test_the_count_sees_a_long_function(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f():\n" + "    x = 1\n" * 90)
    assert spans(tmp_path)[0][:2] == (91, "def")
