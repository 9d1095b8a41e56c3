"""Each open document's recent edits, as the unified diffs that ``Engine.next_edit`` reads (oldest first).

An editor sends a change per keystroke; the engine wants edits as a person makes them (a renamed word is one
diff, not eight). Changes are therefore grouped: a change that stays inside the rows of the edit in progress
and touches the row where the previous change ended (typing on, a backspace, a line break) extends it; any
other change ends it and starts the next. An edit becomes a diff when it ends, or on demand (``diffs``) while
it is still open, so a request made right after typing a word sees that word.

Rows are the text split at ``\\n`` (a ``\\r`` stays in its row), which is how the engine reads a diff against
the document. The diffs chain: undoing them one by one from the current text, newest first, gives back the
text as it was before each. What is kept is bounded: ``MAX_EDITS`` diffs, an edit of at most ``MAX_EDIT_ROWS``
rows and ``MAX_EDIT_CHARS`` characters. A larger change (a paste, a reformat, the whole text replaced by
something else) is not an edit to carry on elsewhere: the history starts again after it.
"""

from __future__ import annotations

import difflib
from collections import deque
from dataclasses import dataclass

MAX_EDITS = 16  # diffs kept per document (the engine analyses the last 32; 16 edits are minutes of typing)
MAX_EDIT_ROWS = 200  # an edit over more rows (before or after) ends the history
MAX_EDIT_CHARS = 20_000  # ... as does one whose rows hold more characters
CONTEXT = 3  # context rows around each hunk (``diff -u``)


@dataclass
class _Edit:
    """The edit in progress: rows ``[first, first + rows)`` of the current text replaced ``old`` (the rows there
    before it began). ``line``: the row the last change ended on (where typing goes on). ``anchor``: where row
    ``anchor_row`` (the last change's first row) starts in the current text, to find the edit's rows again
    without scanning the text from its start. ``size``: at least the characters of its rows, before and after."""

    first: int
    old: list[str]
    rows: int
    line: int
    anchor_row: int
    anchor: int
    size: int


class EditHistory:
    """The recent edits of one document: ``record`` each change, ``diffs`` for a request."""

    def __init__(self, path: str = "file", max_edits: int = MAX_EDITS) -> None:
        self.path = path  # the name in the diffs' ``---`` / ``+++`` headers
        self.max_edits = max_edits
        self._done: deque[str] = deque(maxlen=max_edits)
        self._open: _Edit | None = None

    def __len__(self) -> int:
        """Edits held (those done, and the one in progress)."""
        return len(self._done) + (self._open is not None)

    def clear(self) -> None:
        self._done.clear()
        self._open = None

    def record(self, old_text: str, start: int, end: int, inserted: str, new_text: str) -> None:
        """``old_text[start:end]`` was replaced by ``inserted``, giving ``new_text``."""
        if start == end and not inserted:
            return
        a = old_text.count("\n", 0, start)  # the rows the change touches in the old text: [a, b]
        b = a + old_text.count("\n", start, end)
        added = inserted.count("\n")
        row_start = old_text.rfind("\n", 0, start) + 1  # row ``a`` starts here in either text
        e = self._open
        if e is not None and e.first <= a and b < e.first + e.rows and e.line in (a, b):
            e.rows += added - (b - a)
            e.line, e.anchor_row, e.anchor = a + added, a, row_start
            e.size += len(inserted)
            if e.rows > MAX_EDIT_ROWS or e.size > MAX_EDIT_CHARS:
                self._close(new_text)
            return
        if e is not None:
            self._close(old_text)
        row_end = old_text.find("\n", end)
        old = old_text[row_start: len(old_text) if row_end < 0 else row_end]
        size = 2 * len(old) + len(inserted)
        if b - a >= MAX_EDIT_ROWS or added >= MAX_EDIT_ROWS or size > MAX_EDIT_CHARS:
            self.clear()
            return
        self._open = _Edit(a, old.split("\n"), 1 + added, a + added, a, row_start, size)

    def diffs(self, text: str) -> list[str]:
        """The recent edits as unified diffs, oldest first (the one in progress last), for ``text``: the current
        text of the document. At most ``max_edits``."""
        out = list(self._done)
        if self._open is not None:
            d = self._diff(self._open, text)
            if d:
                out.append(d)
        return out[-self.max_edits:]

    def _close(self, text: str) -> None:
        """End the edit in progress (whose rows are in ``text``): keep its diff, or start again if too large."""
        e, self._open = self._open, None
        if e is None:
            return
        d = self._diff(e, text)
        if d is None:
            self.clear()
        elif d:
            self._done.append(d)

    def _diff(self, e: _Edit, text: str) -> str | None:
        """The edit as a unified diff: "" when it changed nothing after all, None when it is too large."""
        lo = e.anchor  # from row ``anchor_row`` back to the first context row, and on past the last one
        for _ in range(e.anchor_row - max(0, e.first - CONTEXT)):
            lo = text.rfind("\n", 0, lo - 1) + 1
        hi = e.anchor
        for _ in range(e.first + e.rows + CONTEXT - e.anchor_row):
            nxt = text.find("\n", hi)
            if nxt < 0:
                hi = len(text) + 1
                break
            hi = nxt + 1
        window = text[lo: hi - 1].split("\n")
        top = max(0, e.first - CONTEXT)  # the window's first row
        k = e.first - top
        before, new, after = window[:k], window[k: k + e.rows], window[k + e.rows:]
        if e.old == new:
            return ""
        if sum(map(len, e.old)) + sum(map(len, new)) > MAX_EDIT_CHARS:
            return None
        old_side, new_side = before + e.old + after, before + new + after
        lines = [f"--- a/{self.path}\n", f"+++ b/{self.path}\n"]
        matcher = difflib.SequenceMatcher(None, old_side, new_side, autojunk=False)
        for group in matcher.get_grouped_opcodes(CONTEXT):
            i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
            lines.append(f"@@ -{_span(top + i1, i2 - i1)} +{_span(top + j1, j2 - j1)} @@\n")
            for tag, p1, p2, q1, q2 in group:
                if tag == "equal":
                    lines.extend(f" {r}\n" for r in old_side[p1:p2])
                    continue
                lines.extend(f"-{r}\n" for r in old_side[p1:p2])
                lines.extend(f"+{r}\n" for r in new_side[q1:q2])
        return "".join(lines)


def _span(start: int, length: int) -> str:
    """A hunk header's range: 1-based first row and count; an empty range names the row it follows."""
    return f"{start + 1},{length}" if length else f"{start},0"
