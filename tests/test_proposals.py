"""Copy proposals: candidates found in the document and related files, verified by the packaged model in one
batched pass; languages the model was not trained on get a copy or no fill, never the model's guess."""

from __future__ import annotations

import pytest
from helpers import STACK_METHODS
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine import Engine
from edit_engine.engine import proposals
from edit_engine.syntax import planner

SRC = 'class Stack:\n' + STACK_METHODS + '''
    def peek(self):
        return self.items[-1]

    def size(self):
        return len(self.items)


def check(a, b):
    if a is None:
        raise ValueError("a is None")
    if b is None:
        raise ValueError("b is None")
    return a + b
'''


def cut(src: str, hole: str, nth: int = 0) -> tuple[str, int]:
    """``src`` with the ``nth`` occurrence of ``hole`` removed, and where it was."""
    i = -1
    for _ in range(nth + 1):
        i = src.index(hole, i + 1)
    return src[:i] + src[i + len(hole) :], i


def plan_at(doc: str, offset: int, language: str = "python") -> planner.Plan:
    return planner.plan(doc, offset, None, None, language)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.load()


def test_blank_line_finds_the_line_with_the_same_context() -> None:
    doc, i = cut(SRC, 'raise ValueError("b is None")')
    texts = [c.text for c in proposals.candidates(doc, plan_at(doc, i))]
    assert texts[0] == 'raise ValueError("a is None")'


def test_after_code_continues_a_line_found_elsewhere() -> None:
    doc = SRC + "\n\ndef top(s):\n    return s.items[-1]\n\n\ndef last(s):\n    return s.\n"
    i = doc.rindex("return s.") + len("return s.")
    cands = proposals.candidates(doc, plan_at(doc, i))
    assert cands and cands[0].text == "items[-1]"


def test_inside_brackets_stops_where_the_line_goes_on() -> None:
    doc, i = cut(SRC + "\n\nn = len(self.items) + 1\n", "self.items", 5)
    assert doc.endswith("n = len() + 1\n")
    cands = proposals.candidates(doc, plan_at(doc, i))
    assert "self.items" in [c.text for c in cands]
    assert all(c.text.count("(") == c.text.count(")") for c in cands)


def test_related_files_are_searched_and_marked() -> None:
    other = "def load(path):\n    with open(path, encoding='utf-8') as f:\n        return f.read()\n"
    doc = "def read_all(path):\n    with open(path, encoding='utf-8') as f:\n        \n"
    i = doc.index("f:\n") + len("f:\n        ")
    assert "return f.read()" not in [c.text for c in proposals.candidates(doc, plan_at(doc, i))]
    cands = proposals.candidates(doc, plan_at(doc, i), [other])
    assert cands[0].text == "return f.read()" and cands[0].origin == "related"


def test_no_candidates_for_comments_strings_and_headers() -> None:
    doc = "x = 1\n# a comment about x = 1\ns = 'x = 1'\n"
    i = doc.index("# a comment about ") + len("# a comment about ")
    assert proposals.candidates(doc, plan_at(doc, i)) == []


lines = st.lists(st.sampled_from(["x = 1", "y = f(x)", "return y", "if x:", "z = [x, y]", "print(z)", "pass"]),
                 min_size=2, max_size=12)


@settings(max_examples=60, deadline=None)
@given(lines, st.data())
def test_candidates_come_from_elsewhere_never_from_the_hole(body: list[str], data: st.DataObject) -> None:
    """Every candidate is code found in the document outside the hole (or in a related file): a hole whose text
    appears nowhere else is never proposed back."""
    src = "def f(x):\n" + "".join(f"    {ln}\n" for ln in body)
    rows = src.split("\n")
    k = data.draw(st.integers(1, len(body)))
    hole = rows[k].strip()
    doc = "\n".join(rows[:k] + ["    "] + rows[k + 1 :])
    offset = sum(len(r) + 1 for r in rows[:k]) + 4
    others = [r.strip() for j, r in enumerate(rows) if j != k]
    for c in proposals.candidates(doc, plan_at(doc, offset)):
        for line in c.text.split("\n"):  # a block body copies several lines
            assert line.strip() in others
        assert c.text.strip() != hole or hole in others


def test_a_repeated_line_is_verified_and_answered_without_denoising(engine: Engine) -> None:
    block = "    result = compute(values, scale=2.0)\n    log.info('done %s', result)\n"
    doc = "def a(values):\n" + block + "    return result\n\n\ndef b(values):\n    result = compute(values, scale=2.0)\n" \
          "    \n    return result\n"
    i = doc.rindex("    \n") + 4
    c = engine.complete(doc, i)
    assert c.source == "copy", c
    assert c.text == "log.info('done %s', result)"
    assert c.nfe == 1 and c.passes == 1
    assert "verify" in c.timings and "propose" in c.timings


def test_a_poor_copy_is_refused_and_the_model_fills(engine: Engine) -> None:
    doc = "import os\n\n\ndef main():\n    path = os.getcwd()\n    \n"
    i = doc.rindex("    \n") + 4
    c = engine.complete(doc, i)
    assert c.source == "model"


def test_untrained_language_gets_no_fill_with_a_reason(engine: Engine) -> None:
    doc = "function f(a) {\n  return a + 1;\n}\n\nfunction g(b) {\n  \n}\n"
    c = engine.complete(doc, doc.index("{\n  \n") + 4, language="javascript")
    assert c.source == "none" and c.text == "" and "javascript" in c.reason and c.nfe == 0


def test_untrained_language_still_gets_a_strong_copy(engine: Engine) -> None:
    doc = ("function check(a, b) {\n  if (a === undefined) {\n    throw new Error('missing argument');\n  }\n"
           "  if (b === undefined) {\n    \n  }\n  return a + b;\n}\n")
    i = doc.index("(b === undefined) {\n    ") + len("(b === undefined) {\n    ")
    c = engine.complete(doc, i, language="javascript")
    assert c.source == "copy" and c.text == "throw new Error('missing argument');"
    assert c.nfe == 0


def test_python_is_known_and_open_checkpoints_know_everything(engine: Engine) -> None:
    assert engine.rt.languages == frozenset({"python"})
    assert engine.rt.knows("python") and engine.rt.knows("plaintext") and not engine.rt.knows("rust")


def test_verify_scores_the_true_line_above_a_wrong_one(engine: Engine) -> None:
    doc = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    \n"
    dp = engine.plan_document(doc, doc.rindex("    \n") + 4)
    tok = engine.tokenizer
    p_ids, s_ids = engine.context_ids(dp.model_prefix, dp.model_suffix)
    cache = engine.model.encode_context([p_ids], [s_ids], 64)
    good, bad = tok.encode(" return a * b"), tok.encode(" import zzz.qqq as xx")
    (gm, gw), (bm, bw) = proposals.verify(engine.model, cache.repeat, [good, bad], tok.pad_id, tok.mask_id)
    assert gm > bm and gw > bw


def test_the_document_is_searched_only_near_the_span(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded work on a large document: only ``WINDOW_CHARS`` either side of the span are searched, so a copy
    beyond them is not found and one inside is."""
    far = "def far(a):\n    raise ValueError('far away')\n\n\n"
    filler = "".join(f"x{i} = {i}\n" for i in range(400))
    doc = far + filler + "def near(a):\n    \n"
    at = doc.rindex("    \n") + 4
    monkeypatch.setattr(proposals, "WINDOW_CHARS", len(filler) // 2)
    assert "raise ValueError('far away')" not in [c.text for c in proposals.candidates(doc, plan_at(doc, at))]
    monkeypatch.setattr(proposals, "WINDOW_CHARS", len(doc))
    assert "raise ValueError('far away')" in [c.text for c in proposals.candidates(doc, plan_at(doc, at))]


def test_non_ascii_documents_map_expression_spans_to_characters() -> None:
    doc = "names = ['é', 'ü']\nfirst = sorted(names)[0]\nsecond = sorted(names)[1]\nthird = \n"
    at = doc.index("third = ") + len("third = ")
    texts = [c.text for c in proposals.candidates(doc, plan_at(doc, at))]
    assert "sorted(names)[1]" in texts or "sorted(names)[0]" in texts, texts
    for c in proposals.candidates(doc, plan_at(doc, at)):
        assert c.text in doc
