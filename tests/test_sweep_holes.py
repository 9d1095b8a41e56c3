"""The commit sweep's held-out holes (scripts/sweep_commit.py): they come from validation files only and rebuild
code that parses."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import compare_fills  # noqa: E402
import floor_share  # noqa: E402
import pair_runs  # noqa: E402
import remask_verdict  # noqa: E402
import sweep_commit  # noqa: E402


def test_function_holes_are_humaneval_shaped() -> None:
    holes = sweep_commit.function_holes(6, seed=3)
    assert len(holes) == 6
    for pre, suf, line, whole_pre, whole_suf in holes:
        assert (pre, suf) == (whole_pre, whole_suf)  # the function is the whole context
        assert line.endswith("\n") and line.strip() and "\n" not in line[:-1]
        tree = ast.parse(pre + line + suf)  # a standalone (dedented) function, whole
        (fn,) = tree.body
        assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(fn) is not None
        hole_line = pre.count("\n") + 1
        assert hole_line > fn.body[0].end_lineno  # after the docstring  # type: ignore[operator]


def test_word_holes_cut_inside_a_word_and_rebuild_the_file() -> None:
    holes = sweep_commit.word_holes(12, seed=5)
    assert len(holes) == 12
    for pre, suf, rest, whole_pre, whole_suf in holes:
        assert whole_pre.endswith(pre) and whole_suf.startswith(suf) and suf.startswith("\n")
        assert pre[-1].isalnum() and rest[0].isalnum() and "\n" not in rest  # the cursor is inside a word
        line = whole_pre[whole_pre.rfind("\n") + 1 :] + rest
        assert line.strip() and not line.lstrip().startswith("#")


def test_parse_check_counts_only_what_parses() -> None:
    assert sweep_commit.parses("def f():\n    return 1\n")
    assert not sweep_commit.parses("def f(:\n")
    assert not sweep_commit.parses("x = (" * 5000)  # too deep for the parser: a failure, not a crash


def test_floor_share_counts_who_commits(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """scripts/floor_share.py: every slot committed after the first pass is counted once, by the threshold or
    by the floor; at threshold 1.0 only the floor can commit (a random tiny model is never that sure), at 0.0
    only the threshold; and the commit kernel is restored afterwards."""
    import json

    from edit_engine import kernels

    before = kernels.commit_from_stats
    out = {}
    for thr in ("1.0", "0.0"):
        assert floor_share.main(["--model", str(tiny_checkpoint), "--holes", "lines", "--n", "3", "--floor", "2",
                                 "--threshold", thr, "--json", str(tmp_path / f"{thr}.json")]) == 0
        out[thr] = json.loads((tmp_path / f"{thr}.json").read_text())
    assert kernels.commit_from_stats is before
    assert out["1.0"]["by_floor"] > 0 and out["1.0"]["by_threshold"] == 0 and out["1.0"]["floor_share"] == 1.0
    assert out["0.0"]["by_floor"] == 0


def test_verdict_auc() -> None:
    """scripts/remask_verdict.py's AUC: 1 when every right draft scores above every wrong one, 0 the other way,
    0.5 for ties, None without both kinds."""
    assert remask_verdict.auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert remask_verdict.auc([0.1], [0.9, 0.8]) == 0.0
    assert remask_verdict.auc([0.5, 0.5], [0.5]) == 0.5
    assert remask_verdict.auc([0.3, 0.7], [0.5]) == 0.5
    assert remask_verdict.auc([], [0.5]) is None


def test_verdict_reads_drafts_without_changing_fills(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """scripts/remask_verdict.py judges every committed draft once, sends nothing back (the fills are the plain
    sampler's: as many passes as without it), and restores the sampler afterwards."""
    import json

    from edit_engine import Engine, sampler

    before = sampler.remask_drafts
    assert remask_verdict.main(["--model", str(tiny_checkpoint), "--holes", "lines", "--n", "3", "--floor", "2",
                                "--json", str(tmp_path / "v.json")]) == 0
    assert sampler.remask_drafts is before
    out = json.loads((tmp_path / "v.json").read_text())
    assert out["judged"] > 0 and set(out["below"]) == {str(b) for b in remask_verdict.BARS}
    eng = Engine.load(str(tiny_checkpoint))
    cases = sweep_commit.holes(3)
    for pre, suf, *_ in cases:  # remask with a bar of 1e-12 changes nothing against remasking off
        a = eng.infill(pre, suf, max_tokens=64, min_commit=2, spread=1, line_stop=True, remask=1e-12)
        b = eng.infill(pre, suf, max_tokens=64, min_commit=2, spread=1, line_stop=True)
        assert (a.text, a.nfe) == (b.text, b.nfe)


def test_sweep_runs_each_floor_at_each_pad_threshold(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """``--pad-thresholds`` crosses the floors with the length rule's thresholds, one row each, in order; it is
    refused without ``--floors`` and outside [0, 1] (0: the length rule off, as in ``SamplerConfig``), as are ``--no-repair`` without ``--document`` and
    ``--initial-canvas`` with it."""
    import json

    import pytest

    out = tmp_path / "s.json"
    assert sweep_commit.main(["--model", str(tiny_checkpoint), "--n", "2", "--floors", "1,2",
                              "--pad-thresholds", "0,0.7", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["min_commit"], r["pad_threshold"]) for r in rows] == [(1, 0.0), (1, 0.7), (2, 0.0), (2, 0.7)]
    for bad in (["--pad-thresholds", "0.5"], ["--floors", "2", "--pad-thresholds", "1.5"],
                ["--floors", "2", "--pad-thresholds", "-0.1"], ["--no-repair"],
                ["--document", "--initial-canvas", "8"]):
        with pytest.raises(SystemExit):
            sweep_commit.main(["--model", str(tiny_checkpoint), "--n", "2", *bad])


def test_sweep_document_mode_scores_the_editors_completion(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """``--document`` fills each held-out hole through ``Engine.complete`` (the editor's path) and records it;
    every fill is counted once."""
    import json

    out = tmp_path / "d.json"
    assert sweep_commit.main(["--model", str(tiny_checkpoint), "--n", "3", "--floors", "2", "--document",
                              "--no-repair", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["document"] is True and res["repair"] is False
    (row,) = res["rows"]
    assert row["n"] == 3 and 0.0 <= row["parse_ok"] <= 1.0 and row["nfe_per_token"] >= 0.0
    assert 0.0 <= row["edit_sim"] <= 1.0 and row["exact_match"] <= row["edit_sim"]


def test_compare_fills_counts_code_parsing_fills_and_their_first_words(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """scripts/compare_fills.py: code parse needs a parsing fill with code (a comment does not count); tasks
    must match."""
    import json

    import pytest

    def write(name: str, rows: list[tuple[str, str, bool]]) -> str:
        p = tmp_path / name
        p.write_text("".join(json.dumps({"task_id": t, "completion": c, "parse_ok": ok}) + "\n" for t, c, ok in rows))
        return str(p)

    a = write("a.jsonl", [("1", "x = 1\n", True), ("2", "# note\n", True), ("3", "return y\n", True)])
    b = write("b.jsonl", [("1", "return 2\n", True), ("2", "y = (\n", False), ("3", "return z\n", True)])
    assert compare_fills.main([a, b]) == 0
    out = capsys.readouterr().out
    assert "A 2, B 2 of 3; both 2, only A 0, only B 0" in out
    assert "'x' 1" in out and "'return' 2" in out
    with pytest.raises(SystemExit):
        compare_fills.main([a, write("c.jsonl", [("9", "", False)] * 3)])


def test_pair_runs_matches_tasks_and_counts_gains(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """scripts/pair_runs.py: tasks matched by id (one run's extra task ignored), B - A edit similarity with its
    standard error, gained and lost by ``passed``, identical fills."""
    import json

    def run(name: str, rows: list[tuple[str, str, float, bool]]) -> str:
        path = tmp_path / name
        path.write_text("".join(json.dumps({"task_id": t, "completion": c, "edit_sim": e, "passed": p}) + "\n"
                                for t, c, e, p in rows))
        return str(path)

    a = run("a.jsonl", [("t1", "x", 0.5, False), ("t2", "y", 1.0, True), ("t3", "z", 0.2, False)])
    b = run("b.jsonl", [("t3", "z", 0.2, False), ("t1", "x2", 1.0, True), ("t2", "y2", 0.5, False),
                        ("t4", "w", 1.0, True)])
    out = tmp_path / "r.json"
    assert pair_runs.main([a, b, "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert (r["n"], r["closer"], r["farther"], r["identical"]) == (3, 1, 1, 1)
    assert (r["solved_a"], r["solved_b"], r["gained"], r["lost"]) == (1, 1, 1, 1)
    assert r["edit_sim_diff"] == 0.0 and r["se"] > 0
    assert "solved 1 -> 1 (gained 1, lost 1)" in capsys.readouterr().out
