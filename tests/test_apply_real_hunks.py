"""Apply on random real hunks: a property over this package's own source files.

Each example takes one of the package's Python files, makes one random edit to it (lines deleted, lines
replaced by a new one, a new line inserted, a line changed) whose result still parses, and writes the edit as a
marker snippet the way a chat model does: the new lines with 1-3 non-blank lines of the edited file on each side
and a ``# ... existing code ...`` marker wherever the snippet does not reach the file's edge. ``merge`` must
then give the edited file, or refuse; and where the snippet reads two ways (its context line also stands a few
lines farther away, the code between kept in one reading and deleted in the other), the reading the contract
takes keeps code: a merge never loses a line the edited file has.
"""

from __future__ import annotations

import ast
import difflib
from functools import cache
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import edit_engine
from edit_engine.edits.apply import merge
from edit_engine.eval.apply_set import context_span, lost_lines

MARKER = "# ... existing code ..."


@cache
def _files() -> tuple[str, ...]:
    root = Path(edit_engine.__file__).parent
    texts = (p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.py")) if 2_000 < p.stat().st_size < 60_000)
    return tuple(t for t in texts if MARKER not in t)  # a file that holds marker lines itself is another question


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def _edited(rows: list[str], at: int, kind: str, k: int, n: int) -> list[str]:
    out = list(rows)
    indent = out[at][: len(out[at]) - len(out[at].lstrip())]
    if kind == "delete":
        del out[at : at + k]
    elif kind == "replace":
        out[at : at + k] = [f"{indent}changed_{n} = compute({n})"]
    elif kind == "insert":
        out[at:at] = [f"{indent}added_{n} = compute({n})"]
    else:
        out[at] = out[at] + f"  # note {n}"
    return out


def _snippet(before: list[str], after: list[str], context: int) -> str:
    """The edit as a marker snippet: its new lines with ``context`` non-blank lines of ``after`` on each side."""
    ops = [o for o in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes() if o[0] != "equal"]
    j1, j2 = ops[0][3], ops[-1][4]
    s, e = context_span(after, j1, j2, context)
    return "\n".join(([MARKER] if s > 0 else []) + after[s:e] + ([MARKER] if e < len(after) else [])) + "\n"


@settings(max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(pick=st.integers(0, 10**6), where=st.floats(0, 1, exclude_max=True),
       kind=st.sampled_from(["delete", "replace", "insert", "change"]), k=st.integers(1, 3), context=st.integers(1, 3),
       n=st.integers(0, 99))
def test_a_real_hunk_applies_exactly_or_is_refused_and_never_loses_code(pick: int, where: float, kind: str, k: int,
                                                                        context: int, n: int) -> None:
    files = _files()
    assert files, "the package's own sources are the corpus"
    before_text = files[pick % len(files)]
    before = before_text.split("\n")[:-1]  # every file ends with a newline
    at = int(where * len(before))
    assume(kind in ("delete", "insert") or before[at].strip())
    after = _edited(before, at, kind, k, n)
    after_text = "\n".join(after) + "\n"
    assume(after != before and any(x.strip() for x in after) and _parses(after_text))
    try:
        merged = merge(before_text, _snippet(before, after, context), "python").text
    except ValueError:
        return  # refused, with the reason: seen, and nothing changed
    if merged != after_text:
        assert not lost_lines(merged, after_text), "the merge lost code the edited file keeps"
        assert _parses(merged)
