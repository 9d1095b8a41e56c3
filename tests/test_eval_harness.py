"""Benchmark loading, the canonical self-test, exact-match scoring, the model filler and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edit_engine.cli.main import main
from edit_engine.engine import Engine
from edit_engine.eval import benchmarks
from edit_engine.eval.benchmarks import BenchmarkError, Task, load
from edit_engine.eval.execution import Limits
from edit_engine.eval.harness import (
    Fill,
    canonical_filler,
    document_filler,
    edit_similarity,
    empty_filler,
    evaluate,
    first_line,
    has_code,
    model_filler,
    parses,
)

try:
    DATA: Path | None = benchmarks.resolve_data_dir()
except BenchmarkError:
    DATA = None
needs_data = pytest.mark.skipif(DATA is None, reason="benchmark data (../shared/benchmarks) not present")
LIMITS = Limits(timeout_s=3)


# ------------------------------------------------------------------------------------------------ loading
@needs_data
@pytest.mark.parametrize("name", list(benchmarks.HUMANEVAL_FILES))
def test_canonical_self_test_scores_one(name: str) -> None:
    tasks = load(name, limit=4)
    assert len(tasks) == 4 and all(t.test and t.entry_point for t in tasks)
    report, results = evaluate(tasks, canonical_filler, benchmark=name, fill_kind="canonical", limits=LIMITS,
                               progress=False)
    assert report.score == 1.0, [(r.task_id, r.status) for r in results]
    assert report.parse_ok == 1.0 and report.metric == "pass_at_1" and report.edit_sim == 1.0


@needs_data
def test_empty_fill_fails_single_line_and_wrong_fill_fails() -> None:
    tasks = load("humaneval-single", limit=3)
    report, _ = evaluate(tasks, empty_filler, fill_kind="empty", limits=LIMITS, progress=False)
    assert report.score == 0.0 and report.empty_share == 1.0
    wrong = evaluate(tasks, lambda t: Fill("    return None\n"), limits=LIMITS, progress=False)[0]
    assert wrong.score == 0.0


@needs_data
@pytest.mark.parametrize("language", ["python", "javascript", "java"])
def test_santacoder_canonical_and_empty(language: str) -> None:
    tasks = load("santacoder-fim", language=language, limit=5)
    assert all(t.language == language and t.single_line and not t.test for t in tasks)
    assert evaluate(tasks, canonical_filler, progress=False)[0].score == 1.0
    assert evaluate(tasks, empty_filler, progress=False)[0].score == 0.0


@needs_data
def test_santacoder_python_join_parses() -> None:
    # The prompt/suffix join (a line without its newline) must make whole programs with the canonical line.
    tasks = load("santacoder-fim", language="python", limit=50)
    assert all(parses(t.prefix + t.canonical + t.suffix) for t in tasks)


def test_unknown_benchmark_and_bad_data_dir(tmp_path: Path) -> None:
    with pytest.raises(BenchmarkError, match="unknown benchmark"):
        load("nope", data=tmp_path)
    with pytest.raises(BenchmarkError, match="missing"):
        load("humaneval-single", data=tmp_path)
    with pytest.raises(BenchmarkError, match="does not exist"):
        load("humaneval-single", data=tmp_path / "absent")


def test_data_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(benchmarks.DATA_ENV, str(tmp_path))
    assert benchmarks.resolve_data_dir() == tmp_path


def test_default_data_dir_is_beside_the_repository() -> None:
    root = benchmarks.repo_root()
    assert (root / "edit_engine").is_dir()
    assert root.parent / "shared" / "benchmarks" in benchmarks.data_dir_candidates()


# ------------------------------------------------------------------------------------------------ scoring
def _exact_task(canonical: str, tid: str = "t") -> Task:
    return Task(tid, "python", "def f():\n", "\n    pass\n", canonical, single_line=True)


def test_exact_match_strips_surrounding_whitespace_only() -> None:
    tasks = [_exact_task("    return x + 1", str(i)) for i in range(5)]
    fills = iter(["return x + 1", "    return x + 1  \n", "return x+1", "    return x + 1\n    pass", ""])
    seen: list[str] = []
    report, results = evaluate(tasks, lambda t: Fill(next(fills)), progress=False,
                               on_result=lambda r: seen.append(r.task_id))
    assert seen == [t.task_id for t in tasks]  # reported once each, in task order
    # The 4th is cut at its first line (single-line benchmark) and then matches.
    assert [r.passed for r in results] == [True, True, False, True, False]
    assert report.metric == "exact_match" and report.score == pytest.approx(0.6)
    assert report.empty_share == pytest.approx(0.2)
    fills = iter(["    return x + 1\n    pass"])
    raw = evaluate(tasks[:1], lambda t: Fill(next(fills)), truncate=False, progress=False)[0]
    assert raw.score == 0.0


def test_code_parse_counts_only_fills_with_code() -> None:
    """A comment-only fill parses like an empty one: parse_ok counts it, code_parse_ok does not."""
    tasks = [_exact_task("    return x + 1", str(i)) for i in range(4)]
    fills = iter(["    return x + 1", "    # the the the", "", "    return ((x"])
    report, results = evaluate(tasks, lambda t: Fill(next(fills)), progress=False)
    assert [r.parse_ok for r in results] == [True, True, True, False]
    assert report.parse_ok == pytest.approx(0.75)
    assert report.code_parse_ok == pytest.approx(0.25)
    assert report.comment_share == pytest.approx(0.25) and report.empty_share == pytest.approx(0.25)
    d = report.to_json()
    assert d["code_parse_ok"] == 0.25 and d["comment_share"] == 0.25
    assert "code_parse_ok" in report.table()


@given(st.text(max_size=30), st.text(max_size=30))
def test_edit_similarity_bounds_and_symmetry(a: str, b: str) -> None:
    s = edit_similarity(a, b)
    assert 0.0 <= s <= 1.0 and s == pytest.approx(edit_similarity(b, a))
    assert (s == 1.0) == (a.strip() == b.strip())


def test_edit_similarity_grades_near_misses() -> None:
    assert edit_similarity("  return x + 1\n", "return x + 1") == 1.0
    assert edit_similarity("return x + 2", "return x + 1") == pytest.approx(1 - 1 / 12)
    assert edit_similarity("", "return x") == 0.0 and edit_similarity("abc", "xyz") == 0.0
    tasks = [_exact_task("    return x + 1", str(i)) for i in range(2)]
    fills = iter(["    return x + 1", "    return x + 2"])
    report, results = evaluate(tasks, lambda t: Fill(next(fills)), progress=False)
    assert [r.edit_sim for r in results] == pytest.approx([1.0, 1 - 1 / 12])
    assert report.edit_sim == pytest.approx(1 - 1 / 24) and report.to_json()["edit_sim"] == round(1 - 1 / 24, 4)
    assert "edit_sim" in report.table()


def test_has_code() -> None:
    assert has_code("x = 1  # note\n") and has_code("# c\n    return y\n") and has_code('"""doc"""')
    assert not has_code("") and not has_code("  \n\t\n") and not has_code("    # only a comment\n# two\n")
    assert not has_code("// note", "javascript") and has_code("# not a comment in js", "javascript")
    assert not has_code("/* a block\n * comment\n */", "java") and has_code("/* c */\nint x = 1;", "java")


def test_first_line() -> None:
    assert first_line("a\nb", keep_newline=True) == "a\n"
    assert first_line("a\nb", keep_newline=False) == "a"
    assert first_line("ab", keep_newline=True) == "ab"


def test_execution_scoring_with_synthetic_task() -> None:
    t = Task("syn/0", "python", "def add(a, b):\n", "", "    return a + b\n",
             test="def check(f):\n    assert f(2, 3) == 5\n", entry_point="add")
    good = evaluate([t], canonical_filler, limits=LIMITS, progress=False)[0]
    loop = evaluate([t], lambda _: Fill("    while True:\n        pass\n"), limits=Limits(timeout_s=1, wall_s=8),
                    progress=False)
    assert good.score == 1.0
    assert loop[0].score == 0.0 and loop[1][0].status == "timeout"


# ------------------------------------------------------------------------------------------------ the model
def test_model_filler_predicted_and_oracle(tiny_engine: Engine) -> None:
    t = _exact_task("    return x + 1")
    report, results = evaluate([t], model_filler(tiny_engine, max_commit=0), progress=False)
    assert report.n == 1 and results[0].nfe >= 1 and report.mode == "predicted"
    n = len(tiny_engine.tokenizer.encode(t.canonical))
    oracle = model_filler(tiny_engine, oracle=True)(t)
    assert oracle.nfe >= 1 and oracle.tokens <= n + 2  # the canvas holds n slots (re-encoding may differ)
    empty = Task("e", "python", "x = 1\n", "y = 2\n", "")
    assert model_filler(tiny_engine, oracle=True)(empty) == Fill("", stop_reason="complete")


def test_document_filler_fills_through_the_editor_path(tiny_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--document``: the fill comes from ``Engine.complete`` on prefix + suffix with the cursor between them (on
    an empty line of its own for whole-line holes), and the completion scored is what the edit puts between the
    task's prefix and suffix; a plan that would replace the task's context gives an empty fill."""
    seen: list[tuple[str, int, bool]] = []
    real = tiny_engine.complete

    def spy(text: str, offset: int, *a: object, **kw: object) -> object:
        seen.append((text, offset, bool(kw.get("repair"))))
        return real(text, offset, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(tiny_engine, "complete", spy)
    line = Task("l", "python", "def f(x):\n", "    return x\n", "    x += 1\n", single_line=True)
    f = document_filler(tiny_engine, whole_lines=True, max_commit=0)(line)
    assert seen[-1] == ("def f(x):\n\n    return x\n", len(line.prefix), True) and f.nfe >= 1
    report, results = evaluate([line], document_filler(tiny_engine, whole_lines=True), progress=False)
    assert report.n == 1 and results[0].raw.endswith("\n")  # the empty line's newline ends the completion
    inline = Task("i", "python", "y = max(", ")\n", "a, b")
    document_filler(tiny_engine, whole_lines=False, repair=False)(inline)
    assert seen[-1] == ("y = max()\n", len(inline.prefix), False)

    from edit_engine.engine import Completion

    def replaces_context(text: str, offset: int, *a: object, **kw: object) -> Completion:
        return Completion("z", 1, 1, 1.0, "complete", 1, {}, 0, offset)  # rewrites the prefix: not a fill

    monkeypatch.setattr(tiny_engine, "complete", replaces_context)
    assert document_filler(tiny_engine, whole_lines=False)(inline).text == ""

    def salvaged(text: str, offset: int, *a: object, **kw: object) -> Completion:  # repair.salvage cut it back
        return Completion("a", 1, 1, 1.0, "line", 1, {"salvage": 0.5}, offset, offset)

    monkeypatch.setattr(tiny_engine, "complete", salvaged)
    assert document_filler(tiny_engine, whole_lines=False)(inline).salvaged
    report, results = evaluate([inline, inline], document_filler(tiny_engine, whole_lines=False), progress=False,
                               isolate=False)
    assert results[0].salvaged and report.salvaged_share == 1.0 and report.to_json()["salvaged_share"] == 1.0
    assert "salvaged_share" in report.table()


# ------------------------------------------------------------------------------------------------ the CLI
def _last_json(out: str) -> dict[str, object]:
    return json.loads(out.strip().splitlines()[-1])


@needs_data
def test_cli_canonical_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--benchmark", "humaneval-single", "--canonical", "--limit", "3", "--json"]) == 0
    cap = capsys.readouterr()
    r = _last_json(cap.out)
    assert r["pass_at_1"] == 1.0 and r["n"] == 3 and r["fill"] == "canonical"
    for key in ("benchmark", "mode", "parse_ok", "code_parse_ok", "empty_share", "comment_share", "nfe_per_token",
                "ms_per_task"):
        assert key in r
    assert "3/3" in cap.err  # the progress bar


@needs_data
def test_cli_model_table_and_out_file(tiny_checkpoint: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tasks.jsonl"
    argv = ["eval", "--benchmark", "santacoder-fim", "--language", "python", "--limit", "2", "--model",
            str(tiny_checkpoint), "--oracle-length", "--threshold", "0.5", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "exact_match" in table and "oracle" in table
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["nfe"] >= 1 for r in rows)


@needs_data
@pytest.mark.parametrize(("name", "whole_lines"), [("humaneval-single", True), ("humaneval-random-light", False),
                                                   ("santacoder-fim", False)])
def test_cli_document_mode(tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str], name: str, whole_lines: bool) -> None:
    """``--document`` runs the editor's path; only HumanEval's whole-line benchmarks get the cursor on a line of
    its own (random spans and SantaCoder's holes sit inside a line)."""
    from edit_engine.eval import harness

    seen: dict[str, object] = {}
    real = harness.document_filler

    def spy(engine: Engine, whole_lines: bool, **kw: object) -> object:
        seen.update(whole_lines=whole_lines, **kw)
        return real(engine, whole_lines, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(harness, "document_filler", spy)
    argv = ["eval", "--benchmark", name, "--limit", "2", "--model", str(tiny_checkpoint), "--document", "--json",
            "--no-progress", "--no-repair"]
    assert main(argv) == 0
    r = _last_json(capsys.readouterr().out)
    assert r["fill"] == "document-no-repair" and r["n"] == 2
    assert seen["whole_lines"] is whole_lines and seen["repair"] is False


def test_cli_user_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for argv, msg in ((["--no-repair"], "--no-repair goes with --document"),
                      (["--document", "--canonical"], "--document fills with the model"),
                      (["--document", "--empty"], "--document fills with the model"),
                      (["--document", "--oracle-length"], "do not go together")):
        assert main(["eval", "--benchmark", "humaneval-single", *argv]) == 2
        assert msg in capsys.readouterr().err
    assert main(["eval", "--benchmark", "humaneval-single", "--data", str(tmp_path / "x"), "--canonical"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["eval", "--benchmark", "humaneval-single", "--limit", "0", "--canonical"]) == 2
