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


# The tree reads like the architecture (docs/architecture.md): one folder per concept, nothing loose at the top
# but the package's entry and the front ends' shared protocol, and every folder a layer of the import contract.
TOP_FILES = {"__init__.py", "protocol.py", "py.typed"}
DATA_FOLDERS = {"models"}  # the packaged weights


def test_the_package_is_one_folder_per_concept() -> None:
    loose = sorted(p.name for p in PACKAGE.iterdir() if p.is_file() and p.name not in TOP_FILES)
    assert loose == [], f"modules loose at the top of edit_engine/: {loose}"
    for folder in sorted(p for p in PACKAGE.iterdir() if p.is_dir() and p.name not in DATA_FOLDERS):
        if folder.name == "__pycache__":
            continue
        init = folder / "__init__.py"
        assert init.is_file(), f"{folder.name}/ is not a package"
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), f"{folder.name}/ says not what it is"


def test_every_folder_is_a_layer_of_the_import_contract() -> None:
    import tomllib

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    layers = config["tool"]["importlinter"]["contracts"][0]["layers"]
    named = {m.strip().split(".")[1] for layer in layers for m in layer.replace(":", "|").split("|")}
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders - named == set(), f"folders outside the import contract: {folders - named}"
