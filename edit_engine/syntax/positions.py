"""Every position conversion in one place.

The engine works in *character offsets* into a Python ``str`` (code points). Editors speak (line, character)
where character counts UTF-16 code units (the LSP default), UTF-8 bytes or UTF-32 code points; the CLI speaks
1-based (line, column) in characters; tree-sitter speaks UTF-8 byte offsets. Lines end at ``\\n``, ``\\r\\n`` or
``\\r`` (as LSP defines them).

Out-of-range LSP positions follow the LSP rule: a character past the end of its line means the end of the line,
and a line past the end of the document means the end of the document. A position inside a UTF-16 surrogate
pair or a UTF-8 multi-byte sequence is moved to the start of that character. The CLI instead rejects positions
outside the file (``ValueError``), because a user typed them.
"""

from __future__ import annotations

import bisect
import re
from typing import Literal, TypeVar

Encoding = Literal["utf-8", "utf-16", "utf-32"]
ENCODINGS: tuple[Encoding, ...] = ("utf-16", "utf-8", "utf-32")


_BREAK = re.compile(r"\r\n?|\n")


def line_starts(text: str) -> list[int]:
    """Character offsets where each line starts (line 0 starts at 0)."""
    return [0, *(m.end() for m in _BREAK.finditer(text))]


def _line_end(text: str, starts: list[int], line: int) -> int:
    """Offset of the end of ``line``'s content (before its line break)."""
    end = starts[line + 1] if line + 1 < len(starts) else len(text)
    while end > starts[line] and text[end - 1] in "\r\n":
        end -= 1
    return end


def _units(ch: str, encoding: Encoding) -> int:
    if encoding == "utf-32":
        return 1
    cp = ord(ch)
    if encoding == "utf-16":
        return 2 if cp > 0xFFFF else 1
    return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4


def code_units(s: str, encoding: Encoding) -> int:
    """Length of ``s`` in the encoding's code units."""
    if encoding == "utf-32":
        return len(s)
    if encoding == "utf-16":
        return len(s) + sum(1 for c in s if ord(c) > 0xFFFF)
    return len(s.encode("utf-8", "surrogatepass"))


def position_to_offset(text: str, line: int, character: int, encoding: Encoding = "utf-16",
                       starts: list[int] | None = None) -> int:
    """LSP (line, character), 0-based, to a character offset (clamped as LSP says)."""
    if line < 0 or character < 0:
        raise ValueError(f"negative position ({line}, {character})")
    starts = starts if starts is not None else line_starts(text)
    if line >= len(starts):
        return len(text)
    off, end = starts[line], _line_end(text, starts, line)
    if encoding == "utf-32":
        return min(off + character, end)
    used = 0
    while off < end:
        u = _units(text[off], encoding)
        if used + u > character:
            break
        used += u
        off += 1
    return off


def offset_to_position(text: str, offset: int, encoding: Encoding = "utf-16",
                       starts: list[int] | None = None) -> tuple[int, int]:
    """Character offset to LSP (line, character), 0-based."""
    if not 0 <= offset <= len(text):
        raise ValueError(f"offset {offset} outside the document (length {len(text)})")
    starts = starts if starts is not None else line_starts(text)
    line = bisect.bisect_right(starts, offset) - 1
    # An offset between '\r' and '\n' of a CRLF belongs to the line the CRLF ends.
    return line, code_units(text[starts[line] : offset], encoding)


def offset_of_line_col(text: str, line: int, col: int) -> int:
    """1-based (line, column) in characters, as editors show them, to an offset. Rejects positions outside."""
    starts = line_starts(text)
    if line < 1 or line > len(starts):
        raise ValueError(f"line {line} is outside the file (1..{len(starts)})")
    end = _line_end(text, starts, line - 1)
    width = end - starts[line - 1]
    if col < 1 or col > width + 1:
        raise ValueError(f"column {col} is outside line {line} (1..{width + 1})")
    return starts[line - 1] + col - 1


def line_col_of_offset(text: str, offset: int) -> tuple[int, int]:
    """Character offset to 1-based (line, column) in characters."""
    line, ch = offset_to_position(text, offset, "utf-32")
    return line + 1, ch + 1


def byte_offset(text: str, offset: int) -> int:
    """Character offset to UTF-8 byte offset (what tree-sitter uses)."""
    return len(text[:offset].encode("utf-8", "surrogatepass"))


def char_offset(text: str, byte: int) -> int:
    """UTF-8 byte offset to character offset; a byte inside a character maps to that character's start."""
    data = text.encode("utf-8", "surrogatepass")
    byte = max(0, min(byte, len(data)))
    while byte > 0 and byte < len(data) and (data[byte] & 0xC0) == 0x80:
        byte -= 1
    return len(data[:byte].decode("utf-8", "surrogatepass"))


_S = TypeVar("_S", str, list[int])


def common_prefix(a: _S, b: _S) -> int:
    """Length of the longest common prefix of two strings (or two token lists). Bisects on slice comparisons,
    which run in C: about 0.01 ms for two 8,000-character documents against 0.7 ms for a loop over characters."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def changed_span(old: str, new: str) -> tuple[int, int, int]:
    """The one edit that turns ``old`` into ``new``: (start, old_end, new_end) in characters, with
    ``new == old[:start] + new[start:new_end] + old[old_end:]``, the unchanged prefix and suffix as long as they
    can be (the prefix first)."""
    a = common_prefix(old, new)
    # The common suffix, at most what is left after the prefix so that the two never overlap.
    b = min(common_prefix(old[::-1], new[::-1]), min(len(old), len(new)) - a)
    return a, len(old) - b, len(new) - b
