from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine import positions as P

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
