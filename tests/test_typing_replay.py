"""The typing replay: the editor protocol with scripted suggesters, and one run through the packaged engine."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.eval import typing_replay as tr

BEFORE = "import os\n\n\ndef join(a, b):\n"
REGION = "    path = os.path.join(a, b)\n    if not path:\n        return None\n    return path\n"
AFTER = "\n\nprint(join('x', 'y'))\n"


def case(region: str = REGION, before: str = BEFORE, after: str = AFTER, language: str = "python") -> tr.Case:
    return tr.Case("c0", language, "pkg", "mod.py", before + region + after, len(before), len(before) + len(region))


def truth_at(c: tr.Case, document: str, cursor: int) -> str:
    """The true text still to write at this state (the document is on the path to the true file)."""
    written = cursor - c.start
    assert document == c.text[:cursor] + c.text[c.end:]
    return c.text[c.start + written:c.end]


def scripted(make: Callable[[str], str]) -> tuple[tr.Suggest, list[int]]:
    """A suggester that answers ``make(rest_of_truth)``; also returns the cursors it was asked at."""
    asked: list[int] = []
    c = case()

    def suggest(document: str, cursor: int, language: str, uri: str) -> tr.Suggestion | None:
        asked.append(cursor)
        text = make(truth_at(c, document, cursor))
        return tr.Suggestion(text, "model", 1.0)
    return suggest, asked


def next_line(rest: str) -> str:
    n = rest.find("\n")
    return rest if n < 0 else rest[:n + 1]


def test_oracle_next_line_accepts_everything_in_line_mode() -> None:
    suggest, _ = scripted(next_line)
    r = tr.replay_case(case(), suggest, "line")
    assert r.accepted_chars == r.region_chars == tr.nonblank(REGION)
    assert r.typed_chars == 0 and r.wrong == 0
    assert r.accepted == r.shown == REGION.count("\n")
    assert r.final == case().text


def test_none_suggester_is_the_floor() -> None:
    results = tr.replay([case()], tr.none_suggester())
    assert len(results) == len(tr.MODES)
    for r in results:
        assert r.accepted_chars == 0 and r.shown == 0 and r.accepted == 0
        assert r.typed_chars == r.region_chars
    s = tr.summarise(results)["python"]["whole"]
    assert s["share"] == 0.0 and s["acceptance"] == 0.0


def test_wrong_suggestions_are_never_accepted_and_all_counted_wrong() -> None:
    suggest, _ = scripted(lambda rest: "@@@ wrong @@@\n")
    for mode in tr.MODES:
        r = tr.replay_case(case(), suggest, mode)
        assert r.accepted == 0 and r.accepted_chars == 0
        assert r.shown > 0 and r.wrong == r.shown


def test_typing_through_keeps_one_suggestion_shown() -> None:
    # "path = os.path.join(a, b)XYZ": agrees for the whole region's first line, then diverges.
    region = "path = os.path.join(a, b)\nreturn path\n"
    c = case(region=region, before="x = 1\n", after="")
    asked: list[int] = []

    def suggest(document: str, cursor: int, language: str, uri: str) -> tr.Suggestion | None:
        asked.append(cursor)
        return tr.Suggestion("path = os.path.join(a, b) + 1\n" if cursor == c.start else "", "model", 1.0)

    r = tr.replay_case(c, suggest, "whole")
    assert r.shown == 1 and r.wrong == 1 and r.accepted == 0
    # Asked at the start, then not again until the typed text left the suggestion: at "\n" (the divergence).
    assert asked[:2] == [c.start, c.start + len("path = os.path.join(a, b)\n")]


def test_word_mode_accepts_only_the_matching_words() -> None:
    region = "result = compute(alpha, beta)\n"
    c = case(region=region, before="", after="")
    shown = "result = compute(alpha, gamma)\n"

    def suggest(document: str, cursor: int, language: str, uri: str) -> tr.Suggestion | None:
        return tr.Suggestion(shown if cursor == 0 else "", "copy", 2.0)

    word = tr.replay_case(c, suggest, "word")
    assert word.accepted == 1 and word.partial == 1 and word.sources == {"copy": 1}
    assert word.accepted_chars == tr.nonblank("result = compute(alpha, ")
    assert word.accepted_chars + word.typed_chars == word.region_chars
    for mode in ("whole", "line"):
        r = tr.replay_case(c, suggest, mode)
        assert r.accepted == 0 and r.wrong == 1


def test_accept_length_modes() -> None:
    assert tr.accept_length("foo(x)\nbar", "foo(x)\nbar()", "whole") == len("foo(x)\nbar")
    assert tr.accept_length("foo(x)\nbaz", "foo(x)\nbar", "whole") == 0
    assert tr.accept_length("foo(x)\nbaz", "foo(x)\nbar", "line") == len("foo(x)\n")
    assert tr.accept_length("foo(x)\nbaz", "foo(x) + 1\n", "line") == len("foo(x)")
    assert tr.accept_length("foo(x, y)", "foo(x, z)", "line") == 0
    assert tr.accept_length("foo(x, y)", "foo(x, z)", "word") == len("foo(x, ")
    assert tr.accept_length("foobar", "foo", "word") == 0  # a word is taken whole or not at all


def test_boundaries() -> None:
    assert tr.is_boundary(" ", "x") and tr.is_boundary("(", "a") and tr.is_boundary("\n", "")
    assert tr.is_boundary("f", "(") and tr.is_boundary("f", "")
    assert not tr.is_boundary("f", "o") and not tr.is_boundary("_", "x")


def test_insertion_from_an_edit() -> None:
    doc = "x = fo\ny"
    assert tr.insertion(doc, 6, "foo(1)", 4, 6) == "o(1)"  # replaces the word at the cursor
    assert tr.insertion(doc, 6, "bar", 4, 6) is None  # rewrites text before the cursor
    assert tr.insertion(doc, 6, "o(1)\ny", 6, 8) == "o(1)"  # keeps the text after the cursor
    assert tr.insertion(doc, 6, "z", 0, 3) is None  # not at the cursor


def test_answers_are_shared_between_modes() -> None:
    suggest, asked = scripted(lambda rest: "@@ nope\n")
    tr.replay([case()], suggest)
    assert len(asked) == len(set(asked))
    suggest2, asked2 = scripted(lambda rest: "@@ nope\n")
    tr.replay([case()], suggest2, cache=False)
    assert len(asked2) == len(tr.MODES) * len(set(asked2))


@st.composite
def cases_and_suggesters(draw: st.DrawFn) -> tuple[tr.Case, list[str]]:
    alphabet = st.sampled_from(list("ab_( )\n.:,x1"))
    region = draw(st.text(alphabet, min_size=1, max_size=60))
    before = draw(st.text(alphabet, max_size=10))
    after = draw(st.text(alphabet, max_size=10))
    answers = draw(st.lists(st.text(alphabet, max_size=12), min_size=1, max_size=8))
    return case(region, before, after), answers


@settings(max_examples=150, deadline=None)
@given(cases_and_suggesters(), st.sampled_from(tr.MODES), st.integers(0, 3))
def test_characters_add_up_and_the_file_is_rebuilt(drawn: tuple[tr.Case, list[str]], mode: str, k: int) -> None:
    c, answers = drawn
    calls = [0]

    def suggest(document: str, cursor: int, language: str, uri: str) -> tr.Suggestion | None:
        calls[0] += 1
        rest = truth_at(c, document, cursor)
        # Mix of random text and true text with a random tail, so accepts of every kind happen.
        pick = answers[calls[0] % len(answers)]
        text = rest[:len(pick)] + pick[:k] if calls[0] % 2 else pick
        return tr.Suggestion(text, "model", 0.5) if text else None

    r = tr.replay_case(c, suggest, mode)
    assert r.accepted_chars + r.typed_chars == r.region_chars == tr.nonblank(c.text[c.start:c.end])
    assert r.final == c.text
    assert r.accepted <= r.shown and r.wrong + r.accepted <= r.shown


def test_report_shape_and_load_cases(tmp_path: Path) -> None:
    rows = [{"id": f"d-{lang}-{i}", "split": "dev", "language": lang, "package": "p", "version": "1",
             "path": "a", "kind": "body", "text": "ab", "start": 0, "end": 2}
            for lang in ("python", "go") for i in range(3)]
    (tmp_path / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert [c.id for c in tr.load_cases(tmp_path, "dev", "go", 2)] == ["d-go-0", "d-go-1"]
    assert len(tr.load_cases(tmp_path, "dev", "all", None)) == 6


@pytest.fixture(scope="module")
def engine() -> object:
    from edit_engine import Engine

    return Engine.load(threads=2)


def test_end_to_end_through_the_packaged_engine(engine: object, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A tiny inline case through ``engine_suggester`` and the CLI entry: the report's shape."""
    before = "def add(a, b):\n    return a + b\n\n\ndef total(xs):\n"
    region = "    s = 0\n    for x in xs:\n        s = add(s, x)\n"
    row = {"id": "e2e-0", "split": "dev", "language": "python", "package": "tiny", "version": "0", "path": "t.py",
           "kind": "body", "text": before + region + "    return s\n", "start": len(before),
           "end": len(before) + len(region)}
    (tmp_path / "dev.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    results = tr.replay(tr.load_cases(tmp_path, "dev"), tr.engine_suggester(engine, max_tokens=16))
    rep = tr.report(results, {"benchmark": "typing"})
    s = rep["summary"]["python"]
    assert set(s) == set(tr.MODES)
    for mode in tr.MODES:
        m = s[mode]
        assert m["accepted_chars"] + m["typed_chars"] == m["region_chars"] == tr.nonblank(region)
        assert m["requests"] > 0 and m["latency_ms"]["n"] == m["requests"] and m["latency_ms"]["p50"] > 0
        assert set(m["sources"]) <= {"model", "copy"} and m["accepted"] + m["wrong"] <= m["shown"]
    assert all(r.final == row["text"] for r in results)
    json.dumps(rep)  # serialisable
    # The CLI entry with the floor suggester writes the same shape.
    out = tmp_path / "r.json"
    p = argparse.ArgumentParser()
    tr.add_arguments(p)
    capsys.readouterr()
    assert tr.run_from_args(p.parse_args(["--data", str(tmp_path), "--fill", "none", "--json", str(out)])) == 0
    assert "case/s" in capsys.readouterr().err  # the progress bar, which --no-progress leaves out
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["summary"]["python"]["line"]["share"] == 0.0 and len(written["cases"]) == len(tr.MODES)
    assert tr.run_from_args(p.parse_args(["--data", str(tmp_path), "--fill", "none", "--no-progress"])) == 0
    assert "case/s" not in capsys.readouterr().err


def test_an_accept_that_writes_only_blanks_is_not_taken() -> None:
    """A suggestion whose first line is empty ("\\n" then wrong code) is right only about a line break: in line
    mode no one presses Tab for that, so it is not accepted and counts as wrong."""
    c = case(region="x = 1\n\ny = 2\n")

    def suggest(document: str, cursor: int, language: str, uri: str) -> tr.Suggestion | None:
        rest = truth_at(c, document, cursor)
        return tr.Suggestion("\n@@@ wrong @@@" if rest.startswith("\n") else "", "model", 1.0)

    r = tr.replay_case(c, suggest, "line")
    assert r.shown > 0 and r.accepted == 0 and r.wrong == r.shown
