"""Typing through a fill: when the user types the first characters of the fill the engine just proposed at that
place, the rest of it is the answer, with no forward pass; any other change asks the model again."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine import Engine

DOC = "def area(radius):\n    return \n"
AT = DOC.index("return ") + len("return ")


def first(engine: Engine, uri: str) -> str:
    c = engine.complete(DOC, AT, uri=uri)
    assert c.start == c.end == AT and len(c.text) >= 2, c
    return c.text


def typed(k: int, fill: str, text: str = DOC) -> tuple[str, int]:
    return text[:AT] + fill[:k] + text[AT:], AT + k


def test_typing_the_fill_keeps_the_rest_without_a_pass(packaged_engine: Engine) -> None:
    fill = first(packaged_engine, "mem://typed-1")
    doc, at = typed(1, fill)
    c = packaged_engine.complete(doc, at, uri="mem://typed-1")
    assert (c.text, c.nfe, c.passes, c.start, c.end) == (fill[1:], 0, 1, at, at)
    doc2, at2 = doc[:at] + fill[1] + doc[at:], at + 1  # and the next keystroke goes on through it
    c2 = packaged_engine.complete(doc2, at2, uri="mem://typed-1")
    assert c2.text == fill[2:] and c2.nfe == 0


def test_anything_else_asks_the_model(packaged_engine: Engine) -> None:
    fill = first(packaged_engine, "mem://typed-2")
    other = "#" if fill[0] != "#" else "@"
    doc, at = DOC[:AT] + other + DOC[AT:], AT + 1
    assert packaged_engine.complete(doc, at, uri="mem://typed-2").nfe > 0  # a different character
    fill = first(packaged_engine, "mem://typed-2")
    doc, at = typed(1, fill)
    assert packaged_engine.complete(doc, at, uri="mem://typed-3").nfe > 0  # another document
    assert packaged_engine.complete(doc, at).nfe > 0  # no uri
    edited = "import math\n" + doc
    assert packaged_engine.complete(edited, at + len("import math\n"), uri="mem://typed-2").nfe > 0  # edited above


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 40))
def test_every_typed_prefix_keeps_the_rest(packaged_engine: Engine, k: int) -> None:
    fill = first(packaged_engine, "mem://typed-4")
    k = min(k, len(fill) - 1)
    doc, at = typed(k, fill)
    c = packaged_engine.complete(doc, at, uri="mem://typed-4")
    assert c.text == fill[k:] and c.nfe == 0
