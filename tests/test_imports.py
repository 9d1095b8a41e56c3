"""The package's import graph: no module imports itself back through others (an import circle), counted over
every import, the ones inside functions and under TYPE_CHECKING included (grimp's graph). The one-way layering
(front ends -> engine -> planning -> decoding -> model -> kernels) is the ``lint-imports`` contract in
pyproject.toml, which CI runs."""

from __future__ import annotations

import grimp
import pytest


def import_circles(package: str = "edit_engine") -> list[list[str]]:
    """One circle per strongly connected group of modules that import each other (Tarjan's algorithm)."""
    g = grimp.build_graph(package)
    edges = {m: sorted(d for d in g.find_modules_directly_imported_by(m) if d != m) for m in g.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for m in sorted(edges):
        if m not in index:
            visit(m)
    return groups


def test_no_import_circles() -> None:
    circles = import_circles()
    print(f"import circles in edit_engine: {len(circles)}")
    assert circles == [], circles


def test_the_counter_finds_a_circle(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The counter can fail: two modules that import each other are one circle."""
    pkg = tmp_path / "circle_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_circles("circle_pkg") == [["circle_pkg.a", "circle_pkg.b"]]


@pytest.mark.parametrize("module", ["edit_engine.edits.apply", "edit_engine.edits.next_edit", "edit_engine.engine",
                                    "edit_engine.memory", "edit_engine.syntax.planner", "edit_engine.lsp",
                                    "edit_engine.serve"])
def test_every_package_imports_first_in_a_fresh_interpreter(module: str) -> None:
    """Any module can be the first one a program imports: no half-initialised package on the way."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
