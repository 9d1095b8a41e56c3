from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.syntax import positions as P

TEXT = st.text(alphabet=st.sampled_from(list("ab \t\n\r😀é\u0301中x")), max_size=40)


@settings(max_examples=200, deadline=None)
@given(text=TEXT, data=st.data())
def test_offset_position_round_trip(text: str, data: st.DataObject) -> None:
    enc = data.draw(st.sampled_from(P.ENCODINGS))
    off = data.draw(st.integers(0, len(text)))
    # An offset between \r and \n is not a position an editor can name: it maps to the line end.
    if 0 < off < len(text) and text[off - 1] == "\r" and text[off] == "\n":
        off -= 1
    line, ch = P.offset_to_position(text, off, enc)
    assert P.position_to_offset(text, line, ch, enc) == off


@pytest.mark.parametrize(
    ("enc", "char", "want"),
    [("utf-16", 3, 2), ("utf-8", 5, 2), ("utf-32", 2, 2), ("utf-16", 2, 1), ("utf-8", 3, 1)],
)
def test_astral_character_widths(enc: P.Encoding, char: int, want: int) -> None:
    text = "a😀b"
    # utf-16: a=1, 😀=2; utf-8: a=1, 😀=4. A position inside 😀 snaps to its start.
    assert P.position_to_offset(text, 0, char, enc) == want


def test_clamping_rules() -> None:
    text = "ab\ncd"
    assert P.position_to_offset(text, 0, 99) == 2  # past the line end -> line end
    assert P.position_to_offset(text, 9, 0) == len(text)  # past the last line -> document end
    with pytest.raises(ValueError):
        P.position_to_offset(text, -1, 0)


def test_line_col_is_strict() -> None:
    text = "ab\ncd\n"
    assert P.offset_of_line_col(text, 2, 3) == 5
    assert P.line_col_of_offset(text, 5) == (2, 3)
    for bad in ((0, 1), (4, 1), (1, 4), (1, 0)):
        with pytest.raises(ValueError):
            P.offset_of_line_col(text, *bad)


@settings(max_examples=100, deadline=None)
@given(text=TEXT, data=st.data())
def test_byte_char_offsets(text: str, data: st.DataObject) -> None:
    off = data.draw(st.integers(0, len(text)))
    assert P.char_offset(text, P.byte_offset(text, off)) == off


def test_crlf_lines() -> None:
    text = "a\r\nb\rc\nd"
    assert P.line_starts(text) == [0, 3, 5, 7]
    assert P.offset_to_position(text, 5) == (2, 0)


def _naive_span(old: str, new: str) -> tuple[int, int, int]:
    n = min(len(old), len(new))
    a = 0
    while a < n and old[a] == new[a]:
        a += 1
    b = 0
    while b < n - a and old[len(old) - 1 - b] == new[len(new) - 1 - b]:
        b += 1
    return a, len(old) - b, len(new) - b


SMALL = st.text(alphabet="ab\n é😀", max_size=12)


@settings(max_examples=300)
@given(old=SMALL, new=SMALL, common=st.text(alphabet="ab\n", max_size=6))
def test_changed_span_is_the_one_minimal_edit(old: str, new: str, common: str) -> None:
    """The incremental reparse's edit (``syntax.Document.update``): rebuilds the new text from the old, keeps
    the longest prefix first, then the longest suffix that does not overlap it; the same as a character loop."""
    for o, n in ((old, new), (common + old + common, common + new + common), (old, old + new), (new + old, old)):
        start, old_end, new_end = P.changed_span(o, n)
        assert n == o[:start] + n[start:new_end] + o[old_end:]
        assert (start, old_end, new_end) == _naive_span(o, n)


@given(a=st.lists(st.integers(0, 3), max_size=10), b=st.lists(st.integers(0, 3), max_size=10))
def test_common_prefix_of_token_lists(a: list[int], b: list[int]) -> None:
    k = P.common_prefix(a, b)
    assert a[:k] == b[:k] and (k == min(len(a), len(b)) or a[k] != b[k])
