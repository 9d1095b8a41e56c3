"""Static analysis at a cursor (``engine/analysis.py``): what jedi completes there, the call signatures, the
time budget and the cache behind it, the offset conversion, and the novel-name penalty sparing the names it
knows."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jedi
import parso
import pytest
import torch
from helpers import STACK_METHODS
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.decoding.sampler import SamplerConfig
from edit_engine.engine import Engine, analysis
from edit_engine.engine.analysis import Analyser, Analysis, Signature
from edit_engine.syntax import positions

WAIT_MS = 120_000  # a budget no analysis here needs: the call waits on the computation itself

STACK = 'class Stack:\n    """A stack of items."""\n\n' + STACK_METHODS + "\n\ns = Stack()\n"

SCOPE = '''import os

LIMIT = 10


def helper(x):
    return x


def work(items, scale=2):
    total = 0
    count = len(items)

    return total * scale
'''


def at(text: str, marker: str) -> int:
    """The offset right after the only occurrence of ``marker``."""
    assert text.count(marker) == 1, marker
    return text.index(marker) + len(marker)


@pytest.fixture()
def gated() -> Iterator[tuple[ThreadPoolExecutor, threading.Event]]:
    """A one-thread executor held busy until the event is set: work submitted meanwhile cannot have run."""
    pool, gate = ThreadPoolExecutor(max_workers=1), threading.Event()
    pool.submit(gate.wait)
    yield pool, gate
    gate.set()
    pool.shutdown(wait=True)


# -------------------------------------------------------------------------------------------- what jedi knows
def test_attributes_of_a_receiver_whose_type_jedi_infers() -> None:
    text = STACK + "s."
    a = Analyser().analyse(text, len(text), budget_ms=WAIT_MS)
    assert a is not None
    assert a.receiver and a.partial == ""
    assert {"push", "pop", "items"} <= set(a.names)
    assert "Stack" not in a.names and "len" not in a.names  # attributes, not the names in scope
    assert a.names.index("pop") < a.names.index("__init__")  # jedi's order: public names before dunders

    typed = STACK + "s.pu"
    b = Analyser().analyse(typed, len(typed), budget_ms=WAIT_MS)
    assert b is not None and b.receiver and b.partial == "pu"
    assert analysis.name_candidates(b) == ["sh"]
    assert set(b.names) == set(a.names)  # every attribute (for the penalty); the partial filters candidates


def test_names_in_scope_at_a_blank_line_of_a_function() -> None:
    off = at(SCOPE, "count = len(items)\n")
    text = SCOPE[:off] + "    " + SCOPE[off:]  # the blank line, indented, with the cursor at its end
    a = Analyser().analyse(text, off + 4, budget_ms=WAIT_MS)
    assert a is not None and not a.receiver and a.partial == ""
    assert {"items", "scale", "total", "count"} <= set(a.names)  # parameters and locals
    assert {"helper", "work", "LIMIT", "os"} <= set(a.names)  # module names
    assert {"len", "print"} <= set(a.names)  # builtins
    assert "x" not in a.names  # another function's parameter
    assert {"items", "LIMIT"} <= analysis.known_words(a)


def test_a_partial_name_is_completed_in_jedis_order() -> None:
    text = SCOPE.replace("    return total * scale", "    return co")
    off = at(text, "return co")
    a = Analyser().analyse(text, off, budget_ms=WAIT_MS)
    assert a is not None and a.partial == "co"
    cands = analysis.name_candidates(a, limit=100)
    assert "unt" in cands and "mplex" in cands  # ``count`` (a local), ``complex`` (a builtin)
    line, col = analysis.jedi_position(text, off)
    script = jedi.Script(text, environment=jedi.InterpreterEnvironment())
    jedis = [c.name[2:] for c in script.complete(line, col) if c.name.startswith("co")]
    assert cands == jedis  # jedi's own completions there, in its order
    assert analysis.name_candidates(a, limit=2) == jedis[:2]


def test_signature_param_names_inside_a_call() -> None:
    text = "def area(width, height=1):\n    return width * height\n\n\nxs = [3, 1]\nn = area(3, "
    a = Analyser().analyse(text, len(text), budget_ms=WAIT_MS)
    assert a is not None
    assert a.signatures == (Signature("area", ("width", "height"), 1, a.signatures[0].text),)
    assert a.signatures[0].text.startswith("area(width, height=1)")
    assert "height" in analysis.known_words(a)

    text = "xs = [3, 1]\nys = sorted(xs, "
    b = Analyser().analyse(text, len(text), budget_ms=WAIT_MS)
    assert b is not None and b.signatures
    for sig in b.signatures:
        assert sig.name == "sorted" and sig.params[-2:] == ("key", "reverse") and sig.index == 1
    assert {"key", "reverse"} <= set(b.names)  # keyword arguments, without their ``=``
    assert len({s.text for s in b.signatures}) == len(b.signatures)  # overloads once each


def test_columns_count_characters_on_non_ascii_lines() -> None:
    """A line with characters of 2, 3 and 4 UTF-8 bytes (one outside the BMP, two UTF-16 units) before the
    cursor: a column counted in bytes or UTF-16 units would land past the end of the line, or mid-name."""
    text = STACK + 'label = "é€😀"; s.pu'
    a = Analyser().analyse(text, len(text), budget_ms=WAIT_MS)
    assert a is not None and a.receiver and a.partial == "pu"
    assert analysis.name_candidates(a) == ["sh"]
    line, col = analysis.jedi_position(text, len(text))
    assert line == text.count("\n") + 1 and col == len('label = "é€😀"; s.pu')


# --------------------------------------------------------------------------------------------- time and cache
def test_a_tiny_budget_returns_none_and_the_work_goes_on_into_the_cache(
        gated: tuple[ThreadPoolExecutor, threading.Event]) -> None:
    pool, gate = gated
    an = Analyser(executor=pool)
    text = STACK + "s."
    assert an.analyse(text, len(text), budget_ms=1) is None  # the worker is busy: it cannot have run
    assert an.stats.late == 1 and an.stats.submitted == 1
    gate.set()
    first = an.analyse(text, len(text), budget_ms=WAIT_MS)  # waits on the same computation
    assert first is not None and "push" in first.names and first.elapsed_ms > 0
    again = an.analyse(text, len(text), budget_ms=0)  # no wait at all: only a cached result can answer
    assert again == first
    st_ = an.stats
    assert (st_.submitted, st_.computed, st_.hits) == (1, 1, 1)


def test_typing_on_in_the_same_identifier_reuses_the_analysis(
        gated: tuple[ThreadPoolExecutor, threading.Event]) -> None:
    pool, gate = gated
    an = Analyser(executor=pool)
    one, two = STACK + "s.p", STACK + "s.pu"
    an.prefetch(one, len(one))
    gate.set()
    assert an.analyse(one, len(one), budget_ms=WAIT_MS) is not None
    b = an.analyse(two, len(two), budget_ms=0)
    assert b is not None and b.partial == "pu" and analysis.name_candidates(b) == ["sh"]
    assert an.stats.submitted == 1


def test_only_a_few_computations_wait_and_the_oldest_is_dropped(
        gated: tuple[ThreadPoolExecutor, threading.Event]) -> None:
    pool, gate = gated
    an = Analyser(executor=pool, max_pending=2)
    texts = [STACK + f"t{k} = 1\ns." for k in range(3)]
    for t in texts:
        an.prefetch(t, len(t))
    assert an.stats.cancelled == 1 and an.stats.submitted == 3
    gate.set()
    for t in texts[1:]:
        assert an.analyse(t, len(t), budget_ms=WAIT_MS) is not None
    assert an.analyse(texts[0], len(texts[0]), budget_ms=0) is None  # dropped: asked again, it starts anew
    assert an.stats.submitted == 4
    assert an.analyse(texts[0], len(texts[0]), budget_ms=WAIT_MS) is not None


def test_the_cache_keeps_the_latest_places(gated: tuple[ThreadPoolExecutor, threading.Event]) -> None:
    pool, gate = gated
    gate.set()
    an = Analyser(executor=pool, max_entries=2)
    texts = [STACK + f"t{k} = 1\ns." for k in range(3)]
    for t in texts:
        assert an.analyse(t, len(t), budget_ms=WAIT_MS) is not None
    assert an.analyse(texts[2], len(texts[2]), budget_ms=0) is not None
    assert an.analyse(texts[0], len(texts[0]), budget_ms=0) is None  # evicted
    assert an.stats.submitted == 4


def test_the_path_is_part_of_the_place(tmp_path: Path) -> None:
    an = Analyser()
    text = STACK + "s."
    assert an.analyse(text, len(text), path=str(tmp_path / "a.py"), budget_ms=WAIT_MS) is not None
    assert an.analyse(text, len(text), path=str(tmp_path / "b.py"), budget_ms=0) is None
    assert an.stats.submitted == 2


def test_a_huge_document_is_not_analysed() -> None:
    an = Analyser()
    text = "x = 1\n" * (analysis.MAX_CHARS // 6 + 1)
    assert len(text) > analysis.MAX_CHARS
    assert an.analyse(text, len(text), budget_ms=WAIT_MS) is None
    assert an.stats.submitted == 0  # refused before any work: nothing to wait for


@pytest.mark.parametrize("text", [
    "def f(:\n    x = \n    x.",
    "class A(\n    def m(self) -> \n        return self.",
    's = """never closed\nprint(s.',
    "x = [1, 2\ny = {3: \nlambda: x.",
    "\x00\x01\x02 = \ud800.",
    "if True:\n\tif 1:\n        pass\n\t  x.",
])
def test_a_broken_document_does_not_raise(text: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    jedi_thread = ThreadPoolExecutor(1)  # its own, so the test can wait for every job (a busy CPU is slow)
    an = Analyser(executor=jedi_thread)
    for off in (0, len(text) // 2, len(text)):
        a = an.analyse(text, off, budget_ms=WAIT_MS)
        assert a is None or isinstance(a, Analysis)
    jedi_thread.shutdown(wait=True)
    assert an.stats.computed == an.stats.submitted


def test_an_analyser_failure_is_no_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object) -> Analysis:
        raise RecursionError("jedi went too deep")

    monkeypatch.setattr(analysis, "_run_jedi", boom)
    an = Analyser()
    text = STACK + "s."
    assert an.analyse(text, len(text), budget_ms=WAIT_MS) is None
    assert (an.stats.failed, an.stats.computed) == (1, 1)
    assert an.analyse(text, len(text), budget_ms=0) is None and an.stats.submitted == 1  # not retried


def test_an_offset_outside_the_document_is_an_error() -> None:
    with pytest.raises(ValueError, match="outside"):
        Analyser().analyse("x = 1\n", 7)
    with pytest.raises(ValueError, match="outside"):
        analysis.jedi_position("x", -1)


def test_the_module_functions_share_one_analyser() -> None:
    before = analysis.default_analyser().stats.submitted
    analysis.warm_up()
    warm = "import os\nimport typing\n\nos.path."
    assert analysis.analyse(warm, len(warm), budget_ms=WAIT_MS) is not None  # the warm-up's own analysis
    assert analysis.default_analyser().stats.submitted == before + 1
    text = STACK + "stack_of_module_test = Stack()\nstack_of_module_test."
    analysis.prefetch(text, len(text))
    a = analysis.analyse(text, len(text), budget_ms=WAIT_MS)
    assert a is not None and "push" in a.names
    assert analysis.analyse(text, len(text), budget_ms=0) == a


# ------------------------------------------------------------------------------------------------ offsets
TEXT_CHARS = st.sampled_from(["a", "_", " ", "\t", ".", "(", "\n", "\r", "\r\n", "é", "€", "😀", "\u2028",
                              "\x0c", "\x0b", "\x85", "\x1c", "\ufeff"])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(TEXT_CHARS, max_size=40), data=st.data())
def test_offsets_become_jedis_line_and_column_and_back(parts: list[str], data: st.DataObject) -> None:
    """(line, column) as jedi's own line splitting (parso's) sees the text: lines end at \\n, \\r\\n and \\r
    only; the column counts characters and stays within the line's text."""
    text = "".join(parts)
    offset = data.draw(st.integers(0, len(text)))
    line, col = analysis.jedi_position(text, offset)
    want = offset - 1 if 0 < offset < len(text) and text[offset - 1 : offset + 1] == "\r\n" else offset
    lines = parso.split_lines(text, keepends=True)
    assert 1 <= line <= len(lines)
    body = lines[line - 1].removesuffix("\n").removesuffix("\r")
    assert 0 <= col <= len(body)
    assert sum(len(x) for x in lines[: line - 1]) + col == want
    assert analysis.jedi_offset(text, line, col) == want
    assert positions.offset_to_position(text, want, "utf-32") == (line - 1, col)  # the project's own rules


def test_partial_is_the_identifier_before_the_cursor() -> None:
    assert analysis.partial_at("x = s.pu", 8) == "pu"
    assert analysis.partial_at("x = total", 9) == "total"
    assert analysis.partial_at("x = tot", 5) == "t"
    assert analysis.partial_at("x = 12", 6) == ""  # a number, not a name
    assert analysis.partial_at("x = é_ü", 7) == "é_ü"
    assert analysis.partial_at("", 0) == ""


# ------------------------------------------------------------------------------------------------ the helpers
def test_known_words_and_name_candidates_of_an_analysis() -> None:
    a = Analysis(("push", "pop", "pull", "_peek", "__init__"), True, "pu",
                 (Signature("f", ("key", "reverse"), 0, "f(key, reverse)"),), 1.0)
    assert analysis.known_words(a) == {"push", "pop", "pull", "_peek", "__init__", "key", "reverse"}
    assert analysis.name_candidates(a) == ["sh", "ll"]
    assert analysis.name_candidates(a, limit=1) == ["sh"]
    exact = Analysis(("push",), True, "push", (), 1.0)
    assert analysis.name_candidates(exact) == []  # nothing left to add
    assert analysis.known_words(None) == frozenset() and analysis.name_candidates(None) == []


# ------------------------------------------------------------------------------------------------ the penalty
def test_novelty_bias_spares_exactly_the_extra_words_tokens(packaged_engine: Engine) -> None:
    eng, tok = packaged_engine, packaged_engine.tokenizer
    tables = eng.rt.tables
    cfg = SamplerConfig(novel_penalty=3.0)
    p_ids, s_ids = tok.encode("def total(numbers):\n    s = 0\n"), tok.encode("\n    return s\n")
    base = tables.novelty_bias(p_ids, s_ids, "python", cfg)
    assert base is not None
    assert torch.equal(tables.novelty_bias(p_ids, s_ids, "python", cfg, extra_words=None), base)
    assert torch.equal(tables.novelty_bias(p_ids, s_ids, "python", cfg, extra_words=frozenset()), base)

    extra = frozenset({"widget", "matrix", "add_mutually_exclusive_group", "numbers"})
    spared = tables.novelty_bias(p_ids, s_ids, "python", cfg, extra_words=extra)
    assert spared is not None
    # The words of the tokens each extra word is written with (after a space), as the context would show them.
    words = {tok.decode([i]).lstrip(" \t") for w in extra for i in tok.encode(" " + w)}
    n = min(eng.model.cfg.vocab_size, tok.vocab_size)
    want = {i for i in range(n) if float(base[i]) < 0 and tok.decode([i]).lstrip(" \t") in words}
    changed = set((spared != base).nonzero().flatten().tolist())
    assert changed == want
    assert len(want) >= 4  # " widget" and "widget" at least, and pieces of the long name
    assert all(float(spared[i]) == 0.0 for i in changed)
    assert int((spared < 0).sum()) == int((base < 0).sum()) - len(want)
    # The words' tokens are kept after the first call: the same words again (and with a new one) agree.
    assert torch.equal(tables.novelty_bias(p_ids, s_ids, "python", cfg, extra_words=extra), spared)
    more = tables.novelty_bias(p_ids, s_ids, "python", cfg, extra_words=extra | {"parser"})
    assert more is not None and int((more < 0).sum()) < int((spared < 0).sum())
