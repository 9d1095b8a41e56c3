"""Drafts from the memory of code as answers, and the show gate: what is likely wrong is not shown."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edit_engine.engine import Engine, document
from edit_engine.engine.drafts import DraftPolicy, set_workspace
from edit_engine.engine.gate import FEATURES, ShowGate, features
from edit_engine.memory import Memory

# A document whose own code makes the next line's start certain to a count-based memory.
DOC = "".join(f"def handler_{i}(request):\n    response = build_response(request, code={i})\n" for i in range(12))
CURSOR_DOC = DOC + "def handler_x(request):\n    response = "


@pytest.fixture()
def memory_engine(tiny_engine: Engine) -> Engine:
    tiny_engine.rt.memory = Memory(models_dir=None)  # the document and related files only: no background
    tiny_engine.rt.draft_policy = DraftPolicy.uniform(0.5, min_score=0.3)
    yield tiny_engine
    tiny_engine.rt.memory = None
    tiny_engine.rt.gate = ShowGate()


def test_a_sure_draft_is_the_answer_without_a_forward_pass(memory_engine: Engine) -> None:
    c = memory_engine.complete(CURSOR_DOC + "\n", len(CURSOR_DOC), uri="file:///h.py")
    assert c.source == "memory" and c.text.startswith("build_response(request"), c
    assert c.nfe == 0 and 0.3 <= c.score <= 1.0


def test_without_a_memory_the_model_answers(tiny_engine: Engine) -> None:
    assert tiny_engine.rt.memory is None
    assert tiny_engine.complete(CURSOR_DOC + "\n", len(CURSOR_DOC)).source != "memory"


def test_the_gate_hides_what_is_unlikely_and_says_why(memory_engine: Engine) -> None:
    memory_engine.rt.gate = ShowGate({"memory": (-10.0, 0, 0, 0, 0, 0, 0, 0)}, threshold=0.3)
    c = memory_engine.complete(CURSOR_DOC + "\n", len(CURSOR_DOC), uri="file:///g.py", show_threshold=None)
    assert c.text == "" and c.source == "none" and "below the show threshold" in c.reason
    assert c.estimate is not None and c.estimate < 0.3
    # An explicit request (the library's default) shows it anyway.
    shown = memory_engine.complete(CURSOR_DOC + "\n", len(CURSOR_DOC), uri="file:///g.py")
    assert shown.source == "memory" and shown.text
    # The stream's final pass is gated the same way.
    last = list(memory_engine.stream_complete(CURSOR_DOC + "\n", len(CURSOR_DOC), uri="file:///g2.py",
                                              show_threshold=None))[-1]
    assert last.final and last.text == "" and last.source == "none"


def test_typing_through_a_shown_answer_keeps_the_rest_whatever_the_gate(memory_engine: Engine) -> None:
    first = memory_engine.complete(CURSOR_DOC + "\n", len(CURSOR_DOC), uri="file:///t.py")
    assert first.text
    memory_engine.rt.gate = ShowGate({s: (-10.0, 0, 0, 0, 0, 0, 0, 0) for s in ("memory", "model", "copy")}, 0.3)
    typed = CURSOR_DOC + first.text[:3]
    kept = memory_engine.complete(typed + "\n", len(typed), uri="file:///t.py", show_threshold=None)
    assert kept.text == first.text[3:] and kept.source == "memory"


def test_the_workspace_tier_is_replaced_not_grown() -> None:
    m = Memory(models_dir=None)
    set_workspace(m, [("a.py", "x = 1\n"), ("b.py", "y = 2\n")], "python")
    set_workspace(m, [("b.py", "y = 2\n"), ("c.py", "z = 3\n")], "python")
    assert sorted(m.workspace_paths()) == ["b.py", "c.py"]


def test_a_workspace_file_teaches_the_memory_a_name(tiny_engine: Engine) -> None:
    tiny_engine.rt.memory = Memory(models_dir=None)
    try:
        lib = "".join(f"result_{i} = compute_checksum_digest(payload_{i})\n" for i in range(10))
        tiny_engine.set_workspace([("lib.py", lib)], "python")
        doc = "value = "
        d = tiny_engine.rt.memory.draft(doc, "\n", "python", min_prob=0.3)
        assert d is not None and d.text.startswith("compute_checksum_digest"), d
    finally:
        tiny_engine.rt.memory = None


@given(st.text(max_size=80), st.floats(0, 1), st.text(max_size=20))
def test_the_estimate_is_a_probability(text: str, score: float, line: str) -> None:
    gate = ShowGate({"model": (0.3, -0.5, 1.0, -1.0, 2.0, -0.4, -1.0, 0.2)}, 0.5)
    e = gate.estimate(text, "model", score, line)
    assert 0.0 <= e <= 1.0
    assert len(features(text, score, line)) == len(FEATURES)
    assert (e == 0.0) if not text.strip() else True


def test_the_shipped_gate_loads_and_a_mismatched_one_is_refused(tmp_path: Path) -> None:
    gate = ShowGate.load()
    assert 0.0 <= gate.threshold < 1.0 and set(gate.weights) <= {"copy", "memory", "model"}
    bad = tmp_path / "gate.json"
    bad.write_text(json.dumps({"features": ["bias"], "weights": {}, "threshold": 0.2}))
    with pytest.raises(ValueError, match="features"):
        ShowGate.load(bad)
    assert ShowGate.load(tmp_path / "missing.json").threshold == 0.0


def test_gate_fit_learns_what_separates_taken_from_not(tmp_path: Path) -> None:
    from edit_engine.eval import gate_fit

    rows = [{"text": "name_" * (1 + i % 3), "source": "memory", "score": (i % 10) / 10, "accepted": i % 10 >= 6,
             "accepted_chars": 5, "line_before": "    x = "} for i in range(200)]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "gate.json"
    assert gate_fit.main([str(path), "--target", "0.6", "--out", str(out)]) == 0
    gate = ShowGate.load(out)
    assert gate.estimate("name_", "memory", 0.9, "    x = ") > 0.8 > 0.2 > gate.estimate("name_", "memory", 0.1)
    assert 0.0 < gate.threshold <= 0.6


def test_the_language_server_setting_is_checked() -> None:
    from edit_engine.lsp import settings

    s, warnings = settings.parse({"showThreshold": 0.25})
    assert s.show_threshold == 0.25 and warnings == []
    s, warnings = settings.parse({"showThreshold": 1.5})
    assert s.show_threshold is None and warnings and "showThreshold" in warnings[0]
    assert settings.parse({"showThreshold": None})[0].show_threshold is None


def test_engines_load_with_the_shipped_memory_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    from edit_engine.engine.drafts import MEMORY_ENV, memory_for

    monkeypatch.setenv(MEMORY_ENV, "on")
    assert isinstance(memory_for(None), Memory) and memory_for(False) is None
    monkeypatch.setenv(MEMORY_ENV, "off")
    assert memory_for(None) is None and isinstance(memory_for(True), Memory)


def test_the_packaged_engine_drafts_from_its_memory_of_real_code() -> None:
    """The shipped engine (memory on): a line that real Python writes one way is drafted with no forward pass."""
    engine = Engine.load(memory=True)
    doc = "import os\n\n\ndef main(root):\n    for name in os.listdir(root):\n        path = os.path.join("
    c = engine.complete(doc + "\n", len(doc), uri="file:///m.py", show_threshold=None)
    assert engine.rt.memory is not None and c.source in ("memory", "none"), c
    assert c.source == "none" or (c.nfe == 0 and c.text)


def test_a_related_file_keeps_its_key_and_an_edit_makes_a_new_one() -> None:
    from edit_engine.engine.drafts import related_key

    text = "def f():\n    return 1\n" * 100
    assert related_key(text) == related_key(text) == related_key("".join([text]))
    assert related_key(text + "x") != related_key(text)


@pytest.mark.parametrize(("prefix", "draft", "dropped"), [
    ("def f():\n    total = ", "total", True),  # a name assigned to itself
    ("def f():\n    total = ", "total + 1", False),
    ("def area(w, h) -> int:\n    return w * h\n\n\n", "def area(w, h) -> int:", True),  # a header again
    ("def area(w, h) -> int:\n    return w * h\n\n\n", "def volume(w, h, d) -> int:", False),
])
def test_drafts_that_do_nothing_or_repeat_a_definition_are_dropped(prefix: str, draft: str, dropped: bool) -> None:
    from edit_engine.engine import drafts

    text = prefix + "\n"
    assert (drafts._assigns_itself(prefix, draft) or drafts._redefines(text, len(prefix), draft)) is dropped


@pytest.mark.parametrize("doc", ["function add(a, b) {\n  // add the two numbers and ",
                                 "const s = 'the total of the ", "package main\n\n// Sum adds the "])
def test_the_model_never_writes_in_a_language_it_was_not_trained_on(tiny_engine: Engine, doc: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Not in code, and not in a comment or a string either (there only a draft may answer)."""
    language = "go" if doc.startswith("package") else "javascript"
    monkeypatch.setattr(tiny_engine.rt, "record", {**tiny_engine.rt.record, "languages": ["python"]})
    c = tiny_engine.complete(doc, len(doc), language)
    assert c.source != "model" and c.text == "" and "not trained on" in (c.reason or ""), c


VIABLE = [  # (text before the cursor, a draft, whether it can still become code that parses)
    ("class A:\n    def discard(self, key):\n        if key in ", "self.", True),  # the header's ":" is to come
    ("class A:\n    def f(self):\n        ", '"""', True),  # a docstring opened
    ("def f(x):\n    value = evaluate(literal.", "text", True),  # inside a call opened before the cursor
    ("def f(x):\n    return [\n        field.", "split", True),  # inside a list opened lines before
    ("def f(x):\n    return (x.next - datetime.datetime.", "now(", True),
    ('def f(x):\n    """doc\n    """\n    ', "if", True),  # a keyword: a name and the header's end to come
    ("import csv\n\n\ndef f(path):\n    reader = csv.", "0(", False),
    ("def f(index):\n    while index", " = 0.0:", False),
    ("def f(index):\n    if index", " = 1", False),  # an error the line already had is no excuse
    ("def f(index):\n    x = ", "foo bar", False),
    ("def f(jobs):\n    for ", "job", True),  # "in" is still to come
    ("def f(jobs):\n    return [job ", "for", True),
    ('def f(x):\n    logger.debug("', "Cancelling", True),  # inside a string opened before the cursor
    ("def f(x):\n    if x:\n        pass\n    ", "else:", True),
    ("class A:\n    ", "def self(,, is -> None:", False),
    ("def f(x):\n    for path in ", "range. None:", False),
]


@pytest.mark.parametrize(("before", "draft", "viable"), VIABLE)
def test_a_draft_may_stop_inside_a_statement_but_never_break_it(tiny_engine: Engine, before: str, draft: str,
                                                                viable: bool) -> None:
    text = before + "\n\n\ndef after(y):\n    return y\n"
    dp = document.plan_document(tiny_engine.rt, text, len(before), "python")
    assert document._viable(dp, draft) is viable


@pytest.mark.parametrize(("before", "draft", "viable"), [
    ("function f(a) {\n  return foo(a.", "bar", True),  # the call's ")" and the body's "}" are to come
    ("function f(a) {\n  const rows = [\n    a.", "name", True),
    ("function f(a) {\n  const x = a.", "0(", False),
    ("function f(a) {\n  if (a) ", "= 1", False),
])
def test_a_draft_in_another_language_may_stop_inside_a_statement(tiny_engine: Engine, before: str, draft: str,
                                                                 viable: bool) -> None:
    text = before + "\n}\n\nfunction after(y) {\n  return y;\n}\n"
    dp = document.plan_document(tiny_engine.rt, text, len(before), "javascript")
    assert document._viable(dp, draft) is viable


def test_an_automatic_request_gets_the_sure_start_an_explicit_one_the_line(memory_engine: Engine) -> None:
    """While the user types, a draft stops where its tokens stop being likely together; asked for a fill, the
    user gets the whole line the same tokens make."""
    from edit_engine.memory import DraftRule

    doc = "".join(f"def handler_{i}(request):\n    response = build_response(request, code={1 + (i % 3 == 0)})\n"
                  for i in range(12)) + "def handler_x(request):\n    response = "
    memory_engine.rt.draft_policy = DraftPolicy(dataclasses.replace(DraftRule.uniform(0.3), keep=0.9))
    explicit = memory_engine.complete(doc, len(doc), uri="file:///h.py")  # "code=" is followed by 1 twice in three
    automatic = memory_engine.complete(doc, len(doc), uri="file:///h.py", show_threshold=None)
    assert explicit.source == automatic.source == "memory"
    assert explicit.text.startswith(automatic.text) and len(automatic.text) < len(explicit.text)


def test_the_gate_hides_what_saves_no_key_unless_asked() -> None:
    gate = ShowGate(threshold=0.1, min_chars=2)
    assert not gate.shows(":", "model")[0] and not gate.shows(" )\n", "copy", threshold=0.05)[0]
    assert gate.shows(":", "model", threshold=0)[0]  # asked for: shown whatever its size
    assert gate.shows("x)", "model")[0]
    assert ShowGate.load().min_chars == 2
