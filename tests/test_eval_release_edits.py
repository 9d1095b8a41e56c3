"""The release next-edit set: cases cut from two versions of a package (synthetic, in a tmp dir: no network)
follow the shared set's rule (each history diff applies in turn, the target is the next hunk, the region holds
it), the set is written byte-identically, and ``edit-engine eval --benchmark next-edit-releases`` scores it."""

from __future__ import annotations

import gzip
import json
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edit_engine.cli.main import main
from edit_engine.edits.patterns import parse_diff
from edit_engine.eval import release_edits
from edit_engine.eval.next_edit_set import made_by, rename_baseline, run, summary, table

OLD = "".join(f"def f{k}(value):\n    total = value + {k}\n    return total\n\n\n" for k in range(12))
# Three hunks: a rename at f1, a changed line at f3, a changed line at f20-ish (far below), one cosmetic at f5.
NEW = (OLD.replace("def f1(value):\n    total = value + 1\n", "def f1(amount):\n    total = amount + 1\n")
       .replace("    total = value + 3\n", "    total = value * 3\n")
       .replace("    total = value + 5\n", "    total = value + 5  # five\n")
       .replace("    total = value + 11\n", "    total = value - 11\n"))


def apply_diff(rows: list[str], diff: str) -> list[str]:
    """``rows`` with the one-hunk unified ``diff`` applied (its removed rows checked)."""
    (h,) = parse_diff(diff)
    old = [t for k, t in h.rows if k != "+"]
    assert [x.rstrip("\n") for x in rows[h.old_start : h.old_start + len(old)]] == old
    return rows[: h.old_start] + [t + "\n" for k, t in h.rows if k != "-"] + rows[h.old_start + len(old) :]


def test_file_cases_follow_the_rule() -> None:
    cases = release_edits.file_cases("pkg@1..2:pkg/m.py", "pkg/m.py", OLD, NEW)
    # Hunks: f1 (2 rows changed), f3, f5 (comment only: never a target), f11. Targets: f3 (after f1), f11 after
    # f5 is 30 rows further on: within MAX_GAP.
    assert [c["id"] for c in cases] == ["pkg@1..2:pkg/m.py#1", "pkg@1..2:pkg/m.py#3"]
    for c in cases:
        rows = OLD.splitlines(keepends=True)
        doc = rows
        for d in c["history"]:
            assert d.startswith("--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ ")
            doc = apply_diff(doc, d)
        if c["id"].endswith("#1"):
            assert "".join(doc) == c["document"]  # the whole history from the old file
        lines = c["document"].splitlines(keepends=True)
        first, stop = c["region"]["start_line"], c["region"]["end_line"]
        assert "".join(lines[first:stop]) == c["region_before"]
        new_doc = apply_diff(lines, c["target_diff"])
        assert "".join(new_doc[first : stop + len(new_doc) - len(lines)]) == c["region_after"]
        assert c["region_before"] != c["region_after"]
        cur = c["cursor"]
        assert 0 <= cur["line"] < first + 5 + 1 + release_edits.MAX_GAP
    first_case = cases[0]
    assert first_case["cursor"] == {"line": 6, "col": len("    total = amount + 1")}
    assert "value * 3" in first_case["region_after"] and "value * 3" not in first_case["region_before"]
    assert cases[1]["history"][-1].count("# five") == 1  # the cosmetic hunk is history, not a target
    assert "value - 11" in cases[1]["region_after"] and cases[1]["far"] is False


def test_history_window_and_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The history holds at most MAX_HISTORY diffs; a target further than MAX_GAP rows is dropped; a hunk over
    MAX_HUNK_ROWS is never a target nor in a history."""
    monkeypatch.setattr(release_edits, "MAX_HISTORY", 1)
    cases = release_edits.file_cases("p:m.py", "m.py", OLD, NEW)
    assert [len(c["history"]) for c in cases] == [1, 1]
    monkeypatch.setattr(release_edits, "MAX_GAP", 10)  # f1 -> f3: 10 rows; f5 -> f11: 30
    assert [c["id"] for c in release_edits.file_cases("p:m.py", "m.py", OLD, NEW)] == ["p:m.py#1"]
    monkeypatch.setattr(release_edits, "MAX_HUNK_ROWS", 1)
    assert release_edits.file_cases("p:m.py", "m.py", OLD, NEW) == []


def test_usable_text() -> None:
    assert release_edits.usable_text("x = 1") == "x = 1\n"
    assert release_edits.usable_text("x = 1\r\n") is None
    assert release_edits.usable_text("x = 1\x0cy = 2\n") is None  # a form feed: splitlines would split there
    assert release_edits.usable_text("x" * (release_edits.MAX_FILE_BYTES + 1)) is None


def build(tmp: Path) -> Path:
    """Two versions of a package as trees in ``tmp``, cut into a set written to ``tmp/set``."""
    trees = []
    for version, text in (("1.0", OLD), ("1.1", NEW)):
        root = tmp / version / "pkg"
        root.mkdir(parents=True)
        (root / "m.py").write_text(text)
        (root / "same.py").write_text("x = 1\n")
        trees.append((version, {p.relative_to(tmp / version).as_posix(): p.read_text()
                                for p in sorted((tmp / version).rglob("*.py"))}))
    cases = release_edits.pair_cases("pkg", trees[0], trees[1])
    assert {c["path"] for c in cases} == {"pkg/m.py"} and all(c["new_version"] == "1.1" for c in cases)
    return release_edits.write_cases(release_edits.select(cases + cases), tmp / "set")


def test_written_set_is_reproducible_and_loads(tmp_path: Path) -> None:
    path = build(tmp_path / "a")
    again = build(tmp_path / "b")
    assert path.read_bytes() == again.read_bytes()
    with gzip.open(path, "rt") as f:
        rows = [json.loads(x) for x in f]
    assert len(rows) == 2  # duplicates dropped
    cases = release_edits.load_cases(path.parent)
    assert [c.case_id for c in cases] == [r["id"] for r in rows]
    # The rename baseline renames value -> amount in the second case's region only where the history says so.
    outcomes = run(cases, rename_baseline)
    assert len(outcomes) == 2 and not any(o.exact for o in outcomes)


def test_missing_set_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="benchmarks/release_edits.py"):
        release_edits.load_cases(tmp_path)


def test_eval_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = build(tmp_path)
    out = tmp_path / "r.json"
    assert main(["eval", "--benchmark", "next-edit-releases", "--data", str(path.parent), "--fill",
                 "rename-baseline", "--no-progress", "--json", "--out", str(out)]) == 0
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert s["benchmark"] == "next-edit-releases" and s["fill"] == "rename-baseline" and s["cases"] == 2
    assert len(json.loads(out.read_text())["results"]) == 2


def test_proposals_made_by_the_release_are_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With the release's wheel beside the set, each proposal is checked against the file the release left:
    the rename baseline's proposal in the second case (``value`` -> ``amount`` at f3) is not one of its
    changes; the first case's target is."""
    path = build(tmp_path)
    wheel = path.parent / "downloads" / "pkg-1.1-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pkg/m.py", NEW)
    manifest = {"downloads": [{"package": "pkg", "version": "1.1", "file": wheel.name}]}
    (path.parent / release_edits.MANIFEST_FILE).write_text(json.dumps(manifest))
    finals = release_edits.load_finals(path.parent)
    cases = release_edits.load_cases(path.parent)
    assert set(finals) == {c.case_id for c in cases} and all(v == NEW for v in finals.values())
    first = cases[0]
    doc_after = first.document[: first.document.index(first.region_before)] + first.region_after + \
        first.document[first.document.index(first.region_before) + len(first.region_before):]
    start = first.document.index(first.region_before)
    assert made_by(first.document, start, start + len(first.region_before), first.region_after, NEW)
    assert doc_after != first.document
    assert not made_by(first.document, 0, 0, "import os\n", NEW)  # a change the release did not make
    assert main(["eval", "--benchmark", "next-edit-releases", "--data", str(path.parent), "--fill",
                 "rename-baseline", "--no-progress", "--json"]) == 0
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert s["finals"] == 2 and s["released"] <= s["proposed"]
    # Without the wheel nothing is known, and the table has no column for it.
    wheel.unlink()
    assert release_edits.load_finals(path.parent) == {}
    assert "made" not in table(summary("next-edit-releases", "x", run(cases, rename_baseline)))


ROWS = st.lists(st.sampled_from(["a = 1", "b = 2", "c = 3", "return a", "pass", ""]), max_size=12)


def shortest_hunks(old: list[str], new: list[str]) -> list[tuple[int, int, int, int]]:
    """The hunks (old rows ``[i1, i2)`` become new rows ``[j1, j2)``) of one shortest edit script, by dynamic
    programming over the longest common subsequence (``difflib`` may find a longer script)."""
    n, m = len(old), len(new)
    lcs = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            lcs[i][j] = lcs[i + 1][j + 1] + 1 if old[i] == new[j] else max(lcs[i + 1][j], lcs[i][j + 1])
    hunks, i, j, start = [], 0, 0, None
    while i < n or j < m:
        if i < n and j < m and old[i] == new[j] and lcs[i][j] == lcs[i + 1][j + 1] + 1:
            if start is not None:
                hunks.append((start[0], i, start[1], j))
                start = None
            i, j = i + 1, j + 1
            continue
        start = start or (i, j)
        if j < m and (i == n or lcs[i][j + 1] >= lcs[i + 1][j]):
            j += 1
        else:
            i += 1
    if start is not None:
        hunks.append((start[0], n, start[1], m))
    return hunks


@given(ROWS, ROWS, st.data())
def test_each_hunk_of_the_release_is_made_by_it(old: list[str], new: list[str], data: st.DataObject) -> None:
    """Any one hunk of a shortest edit script from a file to its release, applied alone, is one of the
    release's changes; the edit that reverts it afterwards is not."""
    a, b = "".join(x + "\n" for x in old), "".join(x + "\n" for x in new)
    ops = shortest_hunks(old, new)
    if not ops:
        assert not made_by(a, 0, len(a), a, b)
        return
    i1, i2, j1, j2 = data.draw(st.sampled_from(ops))
    start, end = sum(len(x) + 1 for x in old[:i1]), sum(len(x) + 1 for x in old[:i2])
    text = "".join(x + "\n" for x in new[j1:j2])
    assert made_by(a, start, end, text, b)
    stepped = a[:start] + text + a[end:]
    assert not made_by(stepped, start, start + len(text), a[start:end], b)
