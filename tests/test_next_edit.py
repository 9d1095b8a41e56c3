"""Next edit (``Engine.next_edit``, ``edit_engine/edits/next_edit.py``): each pattern kind on small synthetic
histories, a property (a rename carried to its next site), bad input, the HTTP route (Mercury Edit's request,
plain and streamed) and the websocket method against the real server, and ``edit-engine eval --benchmark
next-edit`` on a tiny synthetic set. Nothing here reads ``../shared``."""

from __future__ import annotations

import difflib
import gzip
import json
import keyword
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import chat_stream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

from edit_engine import protocol as rpc
from edit_engine.edits import next_edit as ne_mod
from edit_engine.edits import patterns
from edit_engine.engine import NO_EDIT, Engine
from edit_engine.eval import next_edit_set
from edit_engine.model.network import DiffusionLM
from edit_engine.model.tokenizer import Tokenizer
from edit_engine.serve.app import BackgroundServer, create_app
from edit_engine.serve.protocol import parse_edit_prompt, split_diffs
from edit_engine.serve.settings import Settings

TIMEOUT = 30.0


def diff(before: str, after: str, path: str = "x.py") -> str:
    """A unified diff with 3 context lines, as an editor or git writes one."""
    out = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}", n=3))
    assert out, "no change"
    return out


def history_of(*states: str) -> list[str]:
    """The diffs between consecutive states of a file, oldest first."""
    return [diff(a, b) for a, b in zip(states, states[1:], strict=False)]


def after(doc: str, cursor_line: int) -> int:
    """The offset of the end of row ``cursor_line`` (where an editor's cursor sits after typing it)."""
    rows = doc.split("\n")
    return sum(len(r) + 1 for r in rows[:cursor_line]) + len(rows[cursor_line])


def propose(engine: Engine, doc: str, cursor: int, history: list[str], **kw: Any) -> str | None:
    """The document after the proposal (None: no proposal). Patterns only: the tiny model is random."""
    ne = engine.next_edit(doc, cursor, history, use_model=False, **kw)
    if ne is None:
        return None
    assert ne.kind == "pattern" and ne.elapsed_ms >= 0 and ne.patterns
    assert 0 <= ne.start <= ne.end <= len(doc)
    return ne.apply(doc)


# ---------------------------------------------------------------------------------------------------- patterns
V0 = """def area(r):
    return 3.14 * r * r


a = area(1)
b = area(2)
c = area(3)
"""


def test_rename_goes_to_the_next_site_after_the_cursor(tiny_engine: Engine) -> None:
    v1 = V0.replace("def area", "def circle_area")
    v2 = v1.replace("a = area(1)", "a = circle_area(1)")
    got = propose(tiny_engine, v2, after(v2, 4), history_of(V0, v1, v2))
    # One edit at a time: the adjacent rows after the cursor form the hunk a diff tool would show.
    assert got == v2.replace("b = area(2)\nc = area(3)", "b = circle_area(2)\nc = circle_area(3)")
    ne = tiny_engine.next_edit(v2, after(v2, 4), history_of(V0, v1, v2), use_model=False)
    assert ne is not None and ne.patterns == ("rename",) and v2[ne.start : ne.end] == "b = area(2)\nc = area(3)"


def test_with_no_site_after_the_cursor_the_nearest_before_it_that_the_code_needs(tiny_engine: Engine) -> None:
    """Behind the cursor, where the user has passed, only a name left dangling is renamed: the uses of a
    renamed definition, not the other calls of a function one call stopped using."""
    v1 = V0.replace("def area", "def circle_area")
    v2 = v1.replace("c = area(3)", "c = circle_area(3)")
    got = propose(tiny_engine, v2, after(v2, 6), history_of(V0, v1, v2), region=(0, 7))
    assert got == v2.replace("a = area(1)\nb = area(2)", "a = circle_area(1)\nb = circle_area(2)")
    # ``area`` is still defined: calling it above is the user's choice, left alone (after the cursor, the
    # next call would still be proposed).
    v1 = V0.replace("c = area(3)", "c = circle_area(3)")
    assert propose(tiny_engine, v1, after(v1, 6), history_of(V0, v1), region=(0, 7)) is None
    v1 = V0.replace("a = area(1)", "a = circle_area(1)")
    assert propose(tiny_engine, v1, after(v1, 4), history_of(V0, v1)) == \
        v1.replace("b = area(2)\nc = area(3)", "b = circle_area(2)\nc = circle_area(3)")
    # A comment above is not renamed either, nor is a repeated statement change made again there.
    v0 = "# area of a circle\n" + V0
    v1 = v0.replace("def area", "def circle_area").replace("a = area(1)\nb = area(2)\nc = area(3)",
                                                           "a = circle_area(1)\nb = circle_area(2)\nc = circle_area(3)")
    assert propose(tiny_engine, v1, after(v1, 7), history_of(v0, v1)) is None


def test_attribute_rename_leaves_plain_names(tiny_engine: Engine) -> None:
    v0 = """class Box:
    def __init__(self, size):
        self.size = size

    def double(self):
        return self.size * 2

    def half(self, size):
        return self.size / 2 + size
"""
    v1 = v0.replace("self.size = size", "self.width = size")
    got = propose(tiny_engine, v1, after(v1, 2), history_of(v0, v1), region=(0, 9))
    assert got == v1.replace("return self.size * 2", "return self.width * 2")
    v2 = got
    got = propose(tiny_engine, v2, after(v2, 5), history_of(v0, v1, v2), region=(0, 9))
    assert got == v2.replace("self.size / 2 + size", "self.width / 2 + size")  # the parameter keeps its name


def test_call_changed_the_same_way_at_other_call_sites(tiny_engine: Engine) -> None:
    v0 = """def run(a, b, c=0):
    return a + b + c


x = run(1, 2)
y = run(x, 3)
z = run(y, 4)
"""
    v1 = v0.replace("x = run(1, 2)", "x = run(1, 2, c=5)")
    got = propose(tiny_engine, v1, after(v1, 4), history_of(v0, v1))
    assert got == v1.replace("y = run(x, 3)\nz = run(y, 4)", "y = run(x, 3, c=5)\nz = run(y, 4, c=5)")
    ne = tiny_engine.next_edit(v1, after(v1, 4), history_of(v0, v1), use_model=False)
    assert ne is not None and ne.patterns == ("call",)
    # Reordered arguments: the same permutation at a call with other arguments.
    w1 = v0.replace("x = run(1, 2)", "x = run(2, 1)")
    assert propose(tiny_engine, w1, after(w1, 4), history_of(v0, w1)) == \
        w1.replace("y = run(x, 3)\nz = run(y, 4)", "y = run(3, x)\nz = run(4, y)")


def test_parameter_added_gets_its_argument_where_the_name_is_in_scope(tiny_engine: Engine) -> None:
    v0 = """def scale(x):
    return x * 2


def first(values, factor):
    return scale(values[0])


def second(values):
    return scale(values[1])
"""
    v1 = v0.replace("def scale(x):\n    return x * 2", "def scale(x, factor):\n    return x * factor")
    got = propose(tiny_engine, v1, after(v1, 1), history_of(v0, v1), region=(0, 11))
    assert got == v1.replace("return scale(values[0])", "return scale(values[0], factor)")
    # In ``second`` no ``factor`` is in scope: no argument is made up there.
    v2 = got
    assert propose(tiny_engine, v2, after(v2, 5), history_of(v0, v1, v2), region=(6, 11)) is None


def test_repeated_statement_edit_on_a_row_of_the_same_shape(tiny_engine: Engine) -> None:
    v0 = """def losses(log_probs, logits_chunk, labels):
    chosen_logps_sum = log_probs[labels].sum()
    chosen_logits_sum = logits_chunk[labels].sum()
    return chosen_logps_sum, chosen_logits_sum
"""
    v1 = v0.replace("chosen_logps_sum = log_probs[labels].sum()",
                    "chosen_logps_sum = (log_probs * labels.unsqueeze(1)).sum()")
    got = propose(tiny_engine, v1, after(v1, 1), history_of(v0, v1))
    assert got == v1.replace("chosen_logits_sum = logits_chunk[labels].sum()",
                             "chosen_logits_sum = (logits_chunk * labels.unsqueeze(1)).sum()")
    ne = tiny_engine.next_edit(v1, after(v1, 1), history_of(v0, v1), use_model=False)
    assert ne is not None and ne.patterns == ("line",)


def test_a_differently_shaped_row_is_not_edited(tiny_engine: Engine) -> None:
    v0 = "if self.bias:\n    pass\nif self.weight:\n    pass\n"
    v1 = v0.replace("if self.bias:", "if self.bias is not None:")
    # ``if self.weight:`` has the shape but shares no word with the edited row but ``self``: not the same edit.
    assert propose(tiny_engine, v1, after(v1, 0), history_of(v0, v1)) is None


def test_alias_replaces_the_expression_it_names(tiny_engine: Engine) -> None:
    v0 = """def render(rows):
    out = []
    for row in rows:
        row.append(1)
        row.append(2)
    return out
"""
    v1 = v0.replace("    for row in rows:\n", "    for row in rows:\n        append = row.append\n")
    v2 = v1.replace("        row.append(1)", "        append(1)")
    got = propose(tiny_engine, v2, after(v2, 4), history_of(v0, v1, v2))
    assert got == v2.replace("        row.append(2)", "        append(2)")


@pytest.mark.parametrize("v0, v1, line, want", [
    # A call gained a keyword argument on a line of its own: the next call gets it, laid out the same way, its
    # names renamed as this call's arguments differ from the edited one's (base_ -> sub_).
    ("a = make(size=base_size,\n         slots=base_slots)\nb = make(size=sub_size,\n         slots=sub_slots)\n",
     "a = make(size=base_size,\n         slots=base_slots,\n         weak=base_weak)\nb = make(size=sub_size,\n"
     "         slots=sub_slots)\n", 2,
     "b = make(size=sub_size,\n         slots=sub_slots,\n         weak=sub_weak)\n"),
    # Calls gained a first argument: the callee's definition gains the parameter, annotated as elsewhere.
    ("def draw(self, console: 'Console'):\n    self.measure(1, 2)\n\n\ndef measure(self, a, b):\n    pass\n",
     "def draw(self, console: 'Console'):\n    self.measure(console, 1, 2)\n\n\ndef measure(self, a, b):\n    pass\n",
     1, "def measure(self, console: 'Console', a, b):\n"),
    # A definition that gained a parameter forwards it where it forwards the others (k=k).
    ("def conv(x, weight, bias=None):\n    return kernel(\n        x=x,\n        weight=weight,\n    )\n",
     "def conv(x, weight, bias=None, seq_idx=None):\n    return kernel(\n        x=x,\n        weight=weight,\n    )\n",
     0, "        seq_idx=seq_idx,\n"),
    # A new variable named like a keyword argument takes the place of a constant of the same kind there ...
    ("import torch\n\n\nwith torch.autocast(device_type='cuda', dtype=torch.bfloat16):\n    pass\n",
     "import torch\ndtype = torch.float16\n\n\nwith torch.autocast(device_type='cuda', dtype=torch.bfloat16):\n    pass\n",
     1, "with torch.autocast(device_type='cuda', dtype=dtype):\n"),
    # A newly imported function whose name extends a called one takes over its calls.
    ("from ._make import fields\n\n\ndef evolve(new, k, v):\n    setattr(new, k, v)\n",
     "from ._make import fields, _obj_setattr\n\n\ndef evolve(new, k, v):\n    setattr(new, k, v)\n",
     0, "    _obj_setattr(new, k, v)\n"),
    # A name renamed in a parenthesized import list (removed in one place, added in another).
    ("from ._config import (\n    _ng_default,\n    other,\n)\n\nhook = _ng_default\n",
     "from ._config import (\n    _default,\n    other,\n)\n\nhook = _ng_default\n", 1, "hook = _default\n"),
    # A name whose definition was removed leaves the lists it was an item of.
    ("valid = {'a': 1}\ninvalid = {'b': 2}\nboth = {**valid, **invalid, **extra}\n",
     "valid = {'a': 1}\nboth = {**valid, **invalid, **extra}\n", 0, "both = {**valid, **extra}\n"),
    # One inserted row is repeated between rows shaped like the ones around it.
    ("f(\n    a,\n    b,\n)\ng(\n    a,\n    b,\n)\n", "f(\n    a,\n    None,\n    b,\n)\ng(\n    a,\n    b,\n)\n", 2,
     "g(\n    a,\n    None,\n    b,\n)\n"),
])
def test_more_pattern_kinds(tiny_engine: Engine, v0: str, v1: str, line: int, want: str) -> None:
    ne = tiny_engine.next_edit(v1, after(v1, line), history_of(v0, v1), use_model=False,
                               region=(0, v1.count("\n")))
    assert ne is not None, "no proposal"
    new = ne.apply(v1)
    assert want in new and want not in v1, (want, new)


def test_a_constant_of_another_kind_keeps_its_value(tiny_engine: Engine) -> None:
    v0 = "import torch\n\n\nmask = torch.ones(4, dtype=torch.bool)\ndata = load(dtype='u2')\n"
    v1 = v0.replace("import torch\n", "import torch\ndtype = compute_dtype()\n")
    assert propose(tiny_engine, v1, after(v1, 1), history_of(v0, v1), region=(0, 6)) is None


def test_proposal_that_breaks_the_parse_is_skipped(tiny_engine: Engine) -> None:
    v0 = "x = compute(1)\ny = compute(2)\n"
    v1 = v0.replace("x = compute(1)", "x = (compute(1)")
    # Repeating the edit would open a bracket nothing closes on the next row: no proposal beats a wrong one.
    assert propose(tiny_engine, v1, after(v1, 0), history_of(v0, v1)) is None


def test_an_edit_far_below_is_found_without_a_region_and_not_inside_one(tiny_engine: Engine) -> None:
    filler = "".join(f"step_{i} = {i}\n" for i in range(60))
    v0 = "def area(r):\n    return 3.14 * r * r\n\n\n" + filler + "a = area(1)\n"
    v1 = v0.replace("def area", "def circle_area")
    assert propose(tiny_engine, v1, after(v1, 0), history_of(v0, v1)) == v1.replace("a = area(1)", "a = circle_area(1)")
    assert propose(tiny_engine, v1, after(v1, 0), history_of(v0, v1), region=(0, 30)) is None


def test_a_change_of_indentation_alone_is_not_repeated(tiny_engine: Engine) -> None:
    """Rows shifted right and back (``>>``, ``<<``) and then a rename: the proposals carry the rename only, and
    the file still parses after each (the shifts once came back with the rename, at the wrong depth)."""
    import ast

    from edit_engine.lsp.history import EditHistory

    text = "def load(path):\n    data = read(path)\n    if not data:\n        raise ValueError()\n    return data\n"
    h = EditHistory("load.py")

    def replace(text: str, start: int, end: int, new: str) -> str:
        out = text[:start] + new + text[end:]
        h.record(text, start, end, new, out)
        return out

    def shift(text: str, row: int, right: bool) -> str:
        s = sum(len(x) + 1 for x in text.split("\n")[:row])
        return replace(text, s, s, "    ") if right else replace(text, s, s + 4, "")

    text = shift(shift(shift(text, 2, True), 3, True), 2, False)  # 3>>, 4>>, 3<<
    s = text.index("data")
    text = replace(text, s, s + 4, "content")
    cursor = s + len("content")
    for _ in range(3):
        ne = tiny_engine.next_edit(text, cursor, h.diffs(text), use_model=False)
        if ne is None:
            break
        assert ne.patterns == ("rename",), ne
        text = replace(text, ne.start, ne.end, ne.text)
        ast.parse(text)
        cursor = ne.start + len(ne.text)
    assert "data" not in text and "            raise ValueError()" in text  # the user's own shift stays


def test_a_repeated_insertion_is_not_proposed_beside_its_own_copy(tiny_engine: Engine) -> None:
    v0 = '__all__ = [\n    "Engine",\n    "Pass",\n    "Result",\n]\n'
    v1 = v0.replace('    "Pass",\n', '    "Pass",\n    "NextEdit",\n')
    assert propose(tiny_engine, v1, after(v1, 3), history_of(v0, v1)) is None


def test_parse_diff_reads_hunks_and_refuses_bad_ones() -> None:
    d = "--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n d\n"
    (h,) = patterns.parse_diff(d)
    assert (h.old_start, h.new_start, h.old_rows, h.new_rows) == (0, 0, ["a", "b", "d"], ["a", "c", "d"])
    assert patterns.parse_diff("@@ -2 +2 @@\n-x\n+y\n\\ No newline at end of file\n")[0].rows == (("-", "x"), ("+", "y"))
    with pytest.raises(ValueError, match="no '@@"):
        patterns.parse_diff("just words")
    with pytest.raises(ValueError, match="rows end after"):
        patterns.parse_diff("@@ -1,3 +1,3 @@\n a\n-b\n")


# ---------------------------------------------------------------------------------------------------- property
_FILLER = ["total = 0", "print(total)", "items = []", "items.append(total)", "total += 1", ""]
_name = st.from_regex(r"[a-z][a-z_]{2,9}", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s) and s not in {"total", "print", "items", "append"} and not s.endswith("_"))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(old=_name, new=_name, k=st.integers(2, 5), gaps=st.lists(st.lists(st.sampled_from(_FILLER), max_size=3),
                                                                 min_size=5, max_size=5))
def test_rename_at_k_sites_proposes_the_kth(old: str, new: str, k: int, gaps: list[list[str]]) -> None:
    """A name used at k sites (between filler rows); the first k-1 renamed, one diff each: the proposal renames
    the k-th."""
    if old == new:
        return
    rows: list[str] = []
    sites = []
    for i in range(k):
        rows += gaps[i]
        sites.append(len(rows))
        rows.append(f"value_{i} = {old}({i})")
    rows += ["", "done = True"]
    states = ["\n".join(rows) + "\n"]
    for i in range(k - 1):
        rows[sites[i]] = rows[sites[i]].replace(old, new)
        states.append("\n".join(rows) + "\n")
    doc = states[-1]
    want = doc.replace(f"value_{k - 1} = {old}(", f"value_{k - 1} = {new}(")
    ne = ne_mod.next_edit(None, ne_mod.check_request(doc, after(doc, sites[k - 2]), history_of(*states),
                                                     region=(0, len(rows))))
    assert ne is not None and ne.apply(doc) == want


# ---------------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("args, message", [
    (("x = 1\n", 99, []), "cursor 99 is outside"),
    (("x = 1\n", -1, []), "cursor -1 is outside"),
    (("x = 1\n", 0, ["not a diff"]), r"history\[0\]: not a unified diff"),
    (("x = 1\n", 0, ["@@ -1,2 +1,2 @@\n-x\n"]), r"history\[0\]: hunk 1"),
    (("x = 1\n", 0, "a string, not a list"), "history must be a list"),
    (("x = 1\n", 0, [1]), "history must be a list"),
])
def test_bad_requests_are_refused(tiny_engine: Engine, args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny_engine.next_edit(*args)
    with pytest.raises(ValueError, match=message):  # the stream checks before it returns
        tiny_engine.stream_next_edit(*args)


def test_region_and_size_limits(tiny_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="region rows"):
        tiny_engine.next_edit("x = 1\n", 0, [], region=(1, 9))
    with pytest.raises(ValueError, match="region of"):
        tiny_engine.next_edit("x\n" * 1000, 0, [], region=(0, 1000))
    with pytest.raises(ValueError, match="lone surrogate"):
        tiny_engine.next_edit("x = '\ud800'\n", 0, [])
    from edit_engine.engine import runtime

    monkeypatch.setattr(runtime, "MAX_DOCUMENT_CHARS", 100)
    with pytest.raises(ValueError, match="too large"):
        tiny_engine.next_edit("x = 1\n" * 50, 0, [])


def test_stream_ends_with_a_final_pass(tiny_engine: Engine) -> None:
    v1 = V0.replace("def area", "def circle_area")
    passes = list(tiny_engine.stream_next_edit(v1, after(v1, 0), history_of(V0, v1)))
    assert passes[-1].final and not any(p.final for p in passes[:-1])
    ne = tiny_engine.next_edit(v1, after(v1, 0), history_of(V0, v1))
    assert ne is not None and (passes[-1].start, passes[-1].end, passes[-1].text) == (ne.start, ne.end, ne.text)
    # No history, no pattern, and no row sharing a word with a change: the final pass says there is no edit.
    (p,) = list(tiny_engine.stream_next_edit("x = 1\n", 3, []))
    assert p.final and p.stop_reason == NO_EDIT and p.start == p.end == 3 and p.text == ""


def test_model_path_runs_and_answers_an_edit_or_none(tiny_engine: Engine) -> None:
    """Where no pattern applies the model rewrites the row sharing words with the last change; whatever the
    random tiny model writes, the answer is a checked edit of one row or None, and the stream ends final."""
    v0 = "def f(data):\n    return data\n\n\nresult = f(values)\nprint(result)\n"
    v1 = v0.replace("return data", "return sorted(data)")
    doc, cursor, hist = v1, after(v1, 1), history_of(v0, v1)
    ne = tiny_engine.next_edit(doc, cursor, hist)
    if ne is not None:
        assert ne.kind == "model" and "\n" not in ne.text and ne.confidence >= ne_mod.MODEL_MARGIN
    passes = list(tiny_engine.stream_next_edit(doc, cursor, hist))
    assert passes[-1].final


# ---------------------------------------------------------------------------------------------------- front ends
@pytest.fixture(scope="module")
def server(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> Iterator[BackgroundServer]:
    s = Settings(port=0, log_level="warning", max_document_chars=5_000)
    with BackgroundServer(create_app(s, engine=Engine(tiny_model, tiny_tokenizer)), s) as srv:
        yield srv


def prompt(doc: str, region: tuple[int, int], cursor: int, history: list[str], related: str = "") -> str:
    """A Mercury Edit next-edit prompt: the editable region's rows between code_to_edit tags, the cursor."""
    rows = doc.splitlines(True)
    marked = doc[:cursor] + "<|cursor|>" + doc[cursor:]
    mrows = marked.splitlines(True)
    body = "".join(mrows[: region[0]]) + "<|code_to_edit|>\n" + "".join(mrows[region[0] : region[1]]) + \
        "<|/code_to_edit|>\n" + "".join(mrows[region[1] :])
    assert len(rows) == len(mrows)
    return (f"<|recently_viewed_code_snippets|>\n{related}\n<|/recently_viewed_code_snippets|>\n\n"
            f"<|current_file_content|>\ncurrent_file_path: src/x.py\n{body}<|/current_file_content|>\n\n"
            f"<|edit_diff_history|>\n{''.join(history)}<|/edit_diff_history|>")


V1 = V0.replace("def area", "def circle_area")
REGION = (3, 7)
WANT = "\na = circle_area(1)\nb = circle_area(2)\nc = circle_area(3)"


def _post(server: BackgroundServer, **body: Any) -> httpx.Response:
    return httpx.post(server.url + "/v1/edit/completions", json=body, timeout=TIMEOUT)


def test_prompt_parts_are_read_robustly() -> None:
    p = parse_edit_prompt(prompt(V1, REGION, after(V1, 0), history_of(V0, V1), "<|recently_viewed_code_snippet|>\n"
                                 "code_snippet_file_path: y.py\nimport math\n<|/recently_viewed_code_snippet|>"))
    assert p.document == V1 and p.cursor == after(V1, 0) and p.path == "src/x.py"
    assert p.region_text == "\na = area(1)\nb = area(2)\nc = area(3)" and p.related == ["import math"]
    assert p.history == history_of(V0, V1)
    # Mercury's own example: no region newline after the cursor, a note in words for a history, no file path.
    q = parse_edit_prompt("<|current_file_content|>\n<|code_to_edit|>\ndef add(a, b):\n    return a - b<|cursor|>\n"
                          "<|/code_to_edit|>\n<|/current_file_content|>\n<|edit_diff_history|>\n# use + here\n"
                          "<|/edit_diff_history|>")
    assert q.document == "def add(a, b):\n    return a - b\n" and q.cursor == len(q.document) - 1
    assert q.history == [] and q.path is None and q.region == (0, len(q.document))
    assert split_diffs("note\n" + diff("a\n", "b\n") + "--- a/y\n+++ b/y\n@@ -1 +1 @@\n-c\n+d\n") == \
        [diff("a\n", "b\n"), "--- a/y\n+++ b/y\n@@ -1 +1 @@\n-c\n+d\n"]
    with pytest.raises(ValueError, match="current_file_content"):
        parse_edit_prompt("<|code_to_edit|>x<|/code_to_edit|>")


def test_http_next_edit(server: BackgroundServer) -> None:
    content = prompt(V1, REGION, after(V1, 0), history_of(V0, V1))
    r = _post(server, model="edit-engine", messages=[{"role": "user", "content": content}])
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["choices"] == [{"index": 0, "message": {"role": "assistant", "content": f"```\n{WANT}\n```"},
                                "finish_reason": "stop"}]
    assert body["usage"]["prompt_tokens"] > 0
    # No history: the region comes back as it is.
    same = _post(server, messages=[{"role": "user", "content": prompt(V0, REGION, 0, [])}]).json()
    assert same["choices"][0]["message"]["content"] == "```\n\na = area(1)\nb = area(2)\nc = area(3)\n```"
    # Without code_to_edit tags the region is the engine's default around the cursor (here the whole file).
    bare = (f"<|current_file_content|>\n{V1[:20]}<|cursor|>{V1[20:]}<|/current_file_content|>\n"
            f"<|edit_diff_history|>\n{''.join(history_of(V0, V1))}<|/edit_diff_history|>")
    got = _post(server, messages=[{"role": "user", "content": bare}]).json()["choices"][0]["message"]["content"]
    assert got == "```\n" + V1.replace("= area(", "= circle_area(").rstrip("\n") + "\n```"


def test_http_next_edit_streams(server: BackgroundServer) -> None:
    content = prompt(V1, REGION, after(V1, 0), history_of(V0, V1))
    chunks = chat_stream(server.url + "/v1/edit/completions", {"messages": [{"role": "user", "content": content}]},
                         TIMEOUT)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == f"```\n{WANT}\n```"


@pytest.mark.parametrize("body, status, code", [
    ({"messages": [{"role": "user", "content": "no tags at all"}]}, 400, "invalid_params"),
    ({"messages": [{"role": "system", "content": prompt(V1, REGION, 0, [])}]}, 400, "invalid_params"),
    ({"messages": [{"role": "user", "content": prompt(V1, REGION, 0, ["@@ -1,9 +1,9 @@\n-x\n"])}]}, 400,
     "invalid_params"),
    ({"model": "gpt-4", "messages": [{"role": "user", "content": prompt(V1, REGION, 0, [])}]}, 404,
     "model_not_found"),
    ({"messages": [{"role": "user", "content": prompt(V1 + "x = 1\n" * 1000, REGION, 0, [])}]}, 413,
     "max_document_chars"),
])
def test_http_next_edit_errors(server: BackgroundServer, body: dict[str, Any], status: int, code: str) -> None:
    r = _post(server, **body)
    assert r.status_code == status and r.json()["error"]["code"] == code, r.text


def test_http_next_edit_is_documented(server: BackgroundServer) -> None:
    op = httpx.get(server.url + "/openapi.json", timeout=TIMEOUT).json()["paths"]["/v1/edit/completions"]["post"]
    assert {"200", "400", "401", "404", "413", "500", "503"} <= set(op["responses"])
    assert "text/event-stream" in op["responses"]["200"]["content"]


def _ws_call(ws: Any, rid: int | str, params: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.NEXT_EDIT, "params": params}))
    m = json.loads(ws.recv(timeout=TIMEOUT))
    assert m["id"] == rid, m
    return m  # type: ignore[no-any-return]


def test_websocket_next_edit(server: BackgroundServer) -> None:
    hist = history_of(V0, V1)
    with connect(server.ws_url, open_timeout=TIMEOUT) as ws:
        m = _ws_call(ws, 1, {"text": V1, "position": {"line": 0, "character": 20}, "history": hist,
                             "languageId": "python", "version": 7})
        res = m["result"]
        assert res["kind"] == "pattern" and res["patterns"] == ["rename"] and res["elapsedMs"] >= 0
        assert res["edit"] == {"range": rpc.lsp_range((4, 0), (6, 11)),
                               "text": "a = circle_area(1)\nb = circle_area(2)\nc = circle_area(3)"}
        assert res["version"] == 7
        # A region (its rows) and an offset; then nothing to propose.
        m = _ws_call(ws, 2, {"text": V1, "offset": 0, "history": hist, "range": rpc.lsp_range((5, 0), (6, 0))})
        assert m["result"]["edit"]["range"] == rpc.lsp_range((5, 0), (5, 11))
        m = _ws_call(ws, 3, {"text": "x = 1\n", "offset": 0, "history": []})
        assert m["result"] == {"edit": None, "kind": None, "elapsedMs": m["result"]["elapsedMs"], "patterns": []}
        bad: list[tuple[int, dict[str, Any], int]] = [
            (4, {"text": V1, "offset": 0, "history": ["junk"]}, rpc.INVALID_PARAMS),
            (5, {"text": V1, "history": []}, rpc.INVALID_PARAMS),
            (6, {"text": V1, "offset": 999, "history": []}, rpc.INVALID_PARAMS),
            (7, {"text": 1, "offset": 0}, rpc.INVALID_PARAMS),
            (8, {"text": "x" * 6000, "offset": 0}, rpc.SERVER_OVERLOADED)]
        for rid, params, code in bad:
            m = _ws_call(ws, rid, params)
            assert m["error"]["code"] == code, m
        # The connection still serves.
        assert _ws_call(ws, 9, {"text": V1, "offset": 20, "history": hist})["result"]["kind"] == "pattern"
        # Another open document: the renamed function's use there, in that document's positions.
        done = V0.replace("area(", "circle_area(")
        other = "from shapes import area\n\nprint(area(9))\n"
        m = _ws_call(ws, 10, {"text": done, "offset": 0, "history": history_of(V0, done),
                              "others": {"file:///b.py": other}})
        assert m["result"]["edit"] == {"range": rpc.lsp_range((0, 0), (0, 23)),
                                       "text": "from shapes import circle_area", "uri": "file:///b.py"}
        half = V0.replace("def area(", "def circle_area(")  # its own calls not renamed yet: they come first ...
        m = _ws_call(ws, 13, {"text": half, "offset": 0, "history": history_of(V0, half),
                              "others": {"file:///b.py": other}})
        assert "uri" not in m["result"]["edit"]
        m = _ws_call(ws, 14, {"text": half, "offset": 0, "history": history_of(V0, half),  # ... unless asked
                              "others": {"file:///b.py": other}, "othersFirst": True})
        assert m["result"]["edit"]["uri"] == "file:///b.py"
        m = _ws_call(ws, 11, {"text": done, "offset": 0, "history": [], "others": {"file:///b.py": 3}})
        assert m["error"]["code"] == rpc.INVALID_PARAMS, m
        m = _ws_call(ws, 12, {"text": done, "offset": 0, "history": [], "others": {"file:///b.py": "x" * 6000}})
        assert m["error"]["code"] == rpc.SERVER_OVERLOADED, m


# ---------------------------------------------------------------------------------------------------- eval
def _case(case_id: str, states: list[str], cursor_line: int, region: tuple[int, int], target: str) -> dict[str, Any]:
    doc = states[-1]
    rows = doc.splitlines(True)
    before = "".join(rows[region[0] : region[1]])
    return {"id": case_id, "document": doc, "cursor": {"line": cursor_line, "col": len(doc.split("\n")[cursor_line])},
            "history": history_of(*states), "region": {"start_line": region[0], "end_line": region[1]},
            "region_before": before, "region_after": target, "far": False}


def test_eval_command_on_a_tiny_synthetic_set(tiny_checkpoint: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from edit_engine.cli.main import main

    v2 = V1.replace("a = area(1)", "a = circle_area(1)")
    cases = [
        _case("rename", [V0, V1], 0, (3, 7), "\na = circle_area(1)\nb = circle_area(2)\nc = circle_area(3)\n"),
        _case("rename-2", [V0, V1, v2], 4, (3, 7), "\na = circle_area(1)\nb = circle_area(2)\nc = circle_area(3)\n"),
        _case("nothing", [V0, V0.replace("3.14", "3.1416")], 1, (3, 7), "\na = area(1)\nb = area(2)\nc = area(4)\n"),
    ]
    (tmp_path / "next-edit").mkdir()
    with gzip.open(tmp_path / "next-edit" / "next-edit.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(c) + "\n" for c in cases)
    out = tmp_path / "next.json"
    assert main(["eval", "--benchmark", "next-edit", "--data", str(tmp_path), "--model", str(tiny_checkpoint),
                 "--fill", "patterns", "--json", "--no-progress", "--out", str(out)]) == 0
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (s["cases"], s["proposed"], s["exact"], s["breaks"]) == (3, 2, 2, 0)
    assert s["by_kind"]["pattern"]["exact"] == 2 and s["by_pattern"]["rename"]["proposed"] == 2
    assert abs(s["no_proposal"] - 1 / 3) < 1e-9 and s["p50_ms"] >= 0 and 0 < s["chrf"] <= 1
    written = json.loads(out.read_text())
    assert [r["exact"] for r in written["results"]] == [True, True, False]
    # As an editor asks (no region given): the engine finds the same places by itself.
    assert main(["eval", "--benchmark", "next-edit", "--data", str(tmp_path), "--model", str(tiny_checkpoint),
                 "--fill", "patterns", "--region", "cursor", "--json", "--no-progress"]) == 0
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (s["region"], s["proposed"], s["exact"]) == ("cursor", 2, 2)
    # The model-free baseline, side by side: it renames every site of the region at once (right here, where all
    # of them follow the cursor) and proposes nothing for the third.
    assert main(["eval", "--benchmark", "next-edit", "--data", str(tmp_path), "--fill", "rename-baseline",
                 "--no-progress", "--json"]) == 0
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (s["fill"], s["proposed"], s["exact"], s["by_kind"]["baseline"]["proposed"]) == ("rename-baseline", 2, 2, 2)
    assert main(["eval", "--benchmark", "next-edit", "--data", str(tmp_path), "--fill", "rename-baseline",
                 "--no-progress"]) == 0
    assert "kind baseline" in capsys.readouterr().out


def test_cases_cut_from_a_repository_history(tmp_path: Path) -> None:
    """The development set's builder on a two-commit repository: a rename at three sites, one commit."""
    import shutil
    import subprocess

    from edit_engine.eval.next_edit_history import history_cases

    if shutil.which("git") is None:
        pytest.skip("git is not installed")

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       capture_output=True)

    rows = [f"x{i} = {i}" for i in range(40)]
    for at in (2, 15, 30):
        rows[at] = f"y{at} = old_name({at})"
    git("init", "-q")
    (tmp_path / "m.py").write_text("\n".join(rows) + "\n")
    git("add", "m.py")
    git("commit", "-q", "-m", "one")
    (tmp_path / "m.py").write_text("\n".join(r.replace("old_name", "new_name") for r in rows) + "\n")
    git("commit", "-q", "-am", "two")
    cases = history_cases(tmp_path)
    assert len(cases) == 2 and {c.case_id.rsplit("#", 1)[1] for c in cases} == {"1", "2"}
    for c in cases:
        assert "new_name" in c.region_after and "old_name" in c.region_before and c.history
        ne = ne_mod.next_edit(None, ne_mod.check_request(c.document, c.cursor, list(c.history),
                                                         region=(c.first, c.last)))
        start, end = next_edit_set.region_span(c)
        assert ne is not None and next_edit_set.exact_match(
            ne.apply(c.document)[start : end + len(ne.text) - (ne.end - ne.start)], c.region_after)
    # The same cases as apply snippets (benchmarks/apply_hunks.py): each target hunk with its context merges back.
    import sys

    out = tmp_path / "apply.json"
    subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "benchmarks" / "apply_hunks.py"),
                    "--set", "history", "--repo", str(tmp_path), "--context", "1", "2", "--json", str(out)],
                   check=True, capture_output=True, timeout=TIMEOUT)
    rows = json.loads(out.read_text())["rows"]
    assert [(r["context"], r["count"], r["cases"], r["exact"], r["wrong"]) for r in rows] == [
        (1, "lines", 2, 2, 0), (2, "lines", 2, 2, 0), (1, "nonblank", 2, 2, 0), (2, "nonblank", 2, 2, 0)]


def test_the_target_s_source_says_whether_copying_could_reach_it() -> None:
    """``target_source``: a target that only deletes, one whose rows stand in the document or the history, one
    whose tokens do, and one that writes a token found in neither (new code)."""
    def source(after: str, history: tuple[str, ...] = ()) -> str:
        doc = "def f(a):\n    x = a + 1\n    return x\n\n\ny = compute(2)\n"
        case = next_edit_set.NextEditCase("c", doc, 0, history, 0, 3, doc.split("\n\n")[0] + "\n", after)
        return next_edit_set.target_source(case)

    assert source("def f(a):\n    return a + 1\n") == "tokens"  # its tokens stand in the document, not its row
    assert source("def f(a):\n    return x\n") == "deletes"
    assert source("def f(a):\n    x = compute(2)\n    return x\n") == "tokens"
    assert source("def f(a):\n    y = compute(2)\n    return x\n") == "lines"
    assert source("def f(a):\n    x = a + 1\n    log(x)\n    return x\n") == "new"
    assert source("def f(a):\n    x = a + 1\n    log(x)\n    return x\n", ("@@ -1 +1 @@\n-a\n+    log(x)\n",)) == "lines"


def test_metrics_follow_the_sets_definition() -> None:
    case = next_edit_set.NextEditCase("c", "a\nb\n", 0, (), 0, 2, "a\nb\n", "a\nc\n")
    assert next_edit_set.exact_match("a  \nc\n", "a\nc\n")
    assert next_edit_set.changed_lines("a\nb\n", "a\nc\n") == "-b\n+c"
    assert next_edit_set.chrf_changed("a\nb\n", case) == 0.0  # no edit: nothing in common with the change
    assert next_edit_set.chrf_changed("a\nc\n", case) == 1.0
    assert 0 < next_edit_set.chrf("-b\n+cd", "-b\n+c") < 1
    assert next_edit_set.replaced_words([diff("x = foo(1)\n", "x = bar(1)\n")]) == {"foo": "bar"}


@pytest.mark.parametrize("blanks", [2_000, 20_000])
def test_a_row_with_a_long_run_of_blanks_costs_linear_time(tiny_engine: Engine, blanks: int) -> None:
    """``x = a<blanks>b`` added by the history: the alias pattern once backtracked cubically on it (2,000
    blanks: 47.7 s, the whole process frozen); now a history of it is handled in well under a second."""
    import time

    v0 = "def f(a, b):\n    return a\n"
    v1 = "def f(a, b):\n    x = a" + " " * blanks + "b\n    return a\n"
    t0 = time.perf_counter()
    tiny_engine.next_edit(v1, v1.index("return"), [diff(v0, v1)], use_model=False)
    assert time.perf_counter() - t0 < 2.0
    assert patterns._alias_value("  a.b(c) ;  # note") == "a.b(c)"
    assert patterns._LISTED.match("x" + " " * blanks + "y") is None


def test_no_pattern_edit_while_the_user_writes_new_code() -> None:
    """A rename to carry, but the last diff also wrote a function of words found nowhere else in the file: the
    user is writing new code, and the rename's repeat is withheld; the same rename alone is proposed."""
    v0 = "def total(items):\n    count = 0\n    for item in items:\n        count += item\n    return count\n"
    v1 = v0.replace("    count = 0\n", "    subtotal = 0\n", 1)
    written = v1 + "\n\ndef shipping_fee(weight, distance):\n    return weight * distance * RATE\n"
    for doc, writing in ((v1, False), (written, True)):
        history = [diff(v0, doc)]
        a = patterns.analyse(history, doc)
        assert (a.new_names >= ne_mod.NEW_NAMES) is writing
        r = ne_mod.next_edit(None, ne_mod.check_request(doc, doc.index("subtotal"), history), use_model=False)
        assert (r is None) is writing
        if not writing:
            assert r is not None and r.patterns == ("rename",) and "subtotal += item" in r.text
