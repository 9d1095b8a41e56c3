"""The memory's workspace and package tiers, built by the background indexer: what it reads and leaves out, the
order it reads in, the cache on disk, changes, and drafts that come from it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.memory import Memory
from edit_engine.memory.indexer import Indexer, imports_of

CODE = "def frobnicate_widget(alpha, beta):\n    return alpha * beta + frobnicate_widget(beta, alpha)\n"


def write(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


def run(memory: Memory, roots: list[Path], **kw: object) -> Indexer:
    ix = Indexer(memory, roots, **kw).start()  # type: ignore[arg-type]
    ix.flush()
    return ix


def test_reads_source_files_and_leaves_out_what_it_must(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws / "app" / "main.py", CODE)
    write(ws / "lib" / "util.ts", "export const x = 1;\n")
    write(ws / "node_modules" / "dep" / "index.js", "module.exports = 1;\n")
    write(ws / ".git" / "hook.py", "x = 1\n")
    write(ws / "build" / "gen.py", "x = 1\n")
    write(ws / "notes.txt", "words\n")
    write(ws / "big.py", "x = 1\n" * 100)
    outside = write(tmp_path / "secret" / "keys.py", "KEY = 'sk-live-abc'\n")
    os.symlink(outside, ws / "link.py")  # a link out of the workspace is not followed
    os.symlink(outside.parent, ws / "linkdir")
    os.mkfifo(ws / "pipe.py")  # a FIFO is never opened for reading (it would block)
    mem = Memory(None)
    ix = run(mem, [ws], max_file_bytes=300, packages=False)
    held = sorted(Path(p).relative_to(ws).as_posix() for p in mem.workspace_paths())
    assert held == ["app/main.py", "lib/util.ts"]
    assert ix.stats["files"] == 2 and ix.stats["skipped"] >= 1  # big.py is over the size limit when read


def test_nearest_the_open_documents_first(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for name in ("a/far.py", "b/c/near.py", "b/c/near2.py", "b/other.py", "top.py"):
        write(ws / name, CODE)
    mem = Memory(None)
    run(mem, [ws], focus=[ws / "b" / "c"], max_files=3, packages=False)
    held = [Path(p).relative_to(ws).as_posix() for p in mem.workspace_paths()]
    assert held == ["b/c/near.py", "b/c/near2.py", "b/other.py"]


def test_imported_packages_feed_the_packages_tier(tmp_path: Path) -> None:
    ws, site = tmp_path / "ws", tmp_path / "site"
    write(ws / "main.py", "import widgetlib\nfrom widgetlib.core import make\nimport main_helpers\n")
    write(ws / "main_helpers.py", "x = 1\n")
    write(site / "widgetlib" / "__init__.py", "from .core import make\n")
    write(site / "widgetlib" / "core.py", "def make_gizmo_assembly(parts):\n    return list(parts)\n")
    write(site / "unused" / "__init__.py", "x = 1\n")
    mem = Memory(None)
    ix = run(mem, [ws], search_paths=[str(site)], packages=True)
    pkgs = sorted(Path(p).relative_to(site).as_posix() for p in mem.workspace_paths("packages"))
    assert pkgs == ["widgetlib/__init__.py", "widgetlib/core.py"]
    assert ix.stats["packages"] == 1  # main_helpers is the workspace's own module
    d = mem.draft("def make_gizmo", "", "python", min_prob=0.3)
    assert d is not None and d.text.startswith("_assembly(parts)") and d.tiers[0] == "packages"


def test_the_cache_on_disk_is_taken_back_and_only_changes_are_read(tmp_path: Path) -> None:
    ws, cache = tmp_path / "ws", tmp_path / "cache"
    write(ws / "a.py", CODE)
    b = write(ws / "b.py", "def original_name(x):\n    return x\n")
    gone = write(ws / "gone.py", "def removed_later(x):\n    return x\n")
    run(Memory(None), [ws], cache_dir=cache, packages=False)
    write(b, "def renamed_function(x):\n    return x\n")
    st = b.stat()
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    gone.unlink()
    mem = Memory(None)
    ix = run(mem, [ws], cache_dir=cache, packages=False)
    assert ix.stats["from_cache"] == 1 and ix.stats["files"] == 2  # a.py from the cache, b.py read again
    assert sorted(Path(p).name for p in mem.workspace_paths()) == ["a.py", "b.py"]
    assert mem.draft("def renamed_", "", "python", min_prob=0.3) is not None
    assert mem.draft("def removed_", "", "python", min_prob=0.3) is None


def test_a_changed_or_deleted_file_is_counted_again(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    f = write(ws / "m.py", CODE)
    mem = Memory(None)
    events: list[dict[str, object]] = []
    ix = run(mem, [ws], packages=False, on_event=events.append)
    write(f, CODE + "def zorblify_gadget(n):\n    return n\n")
    ix.changed(f)
    ix.changed(tmp_path / "elsewhere.py")  # outside the folders: ignored
    ix.flush()
    d = mem.draft("def zorblify", "", "python", min_prob=0.3)
    assert d is not None and d.text.startswith("_gadget(n)")
    f.unlink()
    ix.changed(f)
    ix.flush()
    ix.stop()
    assert mem.workspace_paths() == []
    assert [e["event"] for e in events][:2] == ["walked", "changed"]


def test_the_memory_budget_bounds_the_tiers(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for i in range(30):
        write(ws / f"m{i:02}.py", CODE.replace("frobnicate", f"f{i}") * 5)
    mem = Memory(None, max_bytes=600_000)
    run(mem, [ws], packages=False)
    assert 0 < len(mem.workspace_paths()) < 30
    assert mem.cache_bytes() <= 600_000 * 0.5 + 200_000  # stops after the file that crossed half the budget


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["from ", "import ", "require(", "from 'a", "import a.b.c", "from a"]),
       st.sampled_from(["a", " ", ".", "_", "'", "\t"]))
def test_finding_imports_is_linear(head: str, filler: str) -> None:
    """No backtracking: a 200 KB line built to stall a regular expression is read in well under a second."""
    text = head + filler * 200_000
    t0 = time.perf_counter()
    for language in ("python", "javascript"):
        imports_of(text, language)
    assert time.perf_counter() - t0 < 1.0


def test_imports_of() -> None:
    assert imports_of("import os, sys\nfrom a.b import c\n  import json\nx = 'import y'\n", "python") == \
        ["os", "a", "json"]
    assert imports_of("import x from 'react';\nconst y = require(\"@scope/pkg\");\nimport './local';\n"
                      "import('lazy')\n", "typescript") == ["react", "@scope/pkg", "lazy"]


@pytest.mark.parametrize("language", ["go", "rust"])
def test_no_package_lookup_for_other_languages(language: str) -> None:
    assert imports_of("import \"fmt\"\nuse std::io;\n", language) == []
