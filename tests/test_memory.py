"""Tests of the n-gram memory: lexing, counting, incremental caches, drafting and shipped models."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.memory import Draft, DraftRule, Memory, Thresholds
from edit_engine.memory.lexer import LANGUAGES, tokenize
from edit_engine.memory.ngram import DynamicNgrams, build_static, witten_bell
from edit_engine.memory.tiers import DocumentCounts

CODE_ALPHABET = st.sampled_from(list("abcxyz_019 \t\n\r\"'`\\#/*.,:;()[]{}<>=+-!&|%^~@$?") + ["é", "\u3000"])


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=CODE_ALPHABET, max_size=200), st.sampled_from(LANGUAGES + ("typescript",)))
def test_lexer_round_trip(text: str, language: str) -> None:
    tokens = tokenize(text, language)
    assert "".join(tokens) == text
    assert all(tokens)
    assert all("\n" not in t.removeprefix("\r")[1:] for t in tokens)  # a line break (CRLF too) only starts a token


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=100))
def test_lexer_round_trip_any_unicode(text: str) -> None:
    assert "".join(tokenize(text, "python")) == text


def test_lexer_tokens() -> None:
    toks = tokenize('def f(x):\n    return x ** 2 != "utf-8"\n', "python")
    assert toks == ["def", " f", "(", "x", ")", ":", "\n    ", "return", " x", " **", " 2", " !=",
                    ' "utf-8"', "\n"]
    assert " =>" in tokenize("const f = (a) => a;", "javascript")
    assert "::" in tokenize("std::io::Result", "rust")


@pytest.mark.parametrize("chunk", [" ", "\t ", '"', "'", '"a', "\\'", "\n ", "0.", "a", "/*", "é "])
def test_lexer_linear_on_adversarial_input(chunk: str) -> None:
    text = chunk * (200_000 // len(chunk))
    t0 = time.perf_counter()
    tokens = tokenize(text, "python")
    assert time.perf_counter() - t0 < 0.5
    assert "".join(tokens) == text


def _fresh(order: int = 4) -> Memory:
    return Memory(models_dir=None, order=order)


CORPUS = '''import socket


class Client:
    def __init__(self, host, port):
        self._send_lock = threading.Lock()
        self._sock = socket.create_connection((host, port))

    def send(self, data):
        with self._send_lock:
            self._sock.sendall(data)

    def recv(self, size):
        with self._send_lock:
            return self._sock.recv(size)
'''


def test_name_defined_above_is_completed() -> None:
    mem = _fresh()
    prefix = CORPUS + "\n    def close(self):\n        with self."
    d = mem.draft(prefix, "", "python", min_prob=0.3)
    assert isinstance(d, Draft)
    assert d.text.startswith("_send_lock:")
    assert len(d.probs) == len(d.tiers) == len(d.tokens)
    assert 0 < d.score <= d.min_prob <= 1


def test_partial_word_is_completed() -> None:
    mem = _fresh()
    d = mem.draft(CORPUS + "\n    def close(self):\n        with self._send_lo", "", "python", min_prob=0.3)
    assert d is not None and d.text.startswith("ck")
    assert d.tokens[0] == "_send_lock"


def test_draft_stops_at_end_of_line_and_at_low_probability() -> None:
    mem = _fresh()
    d = mem.draft(CORPUS + "\n    def close(self):\n        with self._send_lock", "", "python", min_prob=0.3)
    assert d is not None and "\n" not in d.text and d.text.startswith(":")
    # After "return self._sock." both "sendall" and "recv" were seen: neither reaches 0.9.
    assert mem.draft(CORPUS + "\n    def peek(self):\n        self._sock.", "", "python", min_prob=0.9) is None
    # Text already after the cursor is not drafted again.
    d2 = mem.draft(CORPUS + "\n    def close(self):\n        with self._send_lock", ":\n", "python",
                   min_prob=0.3)
    assert d2 is None or not d2.text.startswith(":")


def test_rule_picks_the_first_tokens_thresholds_by_place() -> None:
    rule = DraftRule(line_start=Thresholds(0.9, 0.95), member=Thresholds(0.1, 0.2), first=Thresholds(0.5, 0.6))
    at = lambda prefix, lang="python": rule.opening(tokenize(prefix, lang), prefix)  # noqa: E731
    assert at("x = 1\n    ") is rule.line_start and at("") is rule.line_start
    assert at("x = self.") is rule.member and at("use std::", "rust") is rule.member and at("a?.", "typescript") is rule.member
    assert at("x = ") is rule.first and at("f(a, ") is rule.first and at("fn f() -> ", "rust") is rule.first


def test_a_draft_grows_only_while_it_keeps_its_probability() -> None:
    mem = _fresh()
    prefix = CORPUS + "\n    def close(self):\n        with self."
    long = mem.draft(prefix, "", "python", rule=DraftRule.uniform(0.3))
    assert long is not None and len(long.tokens) > 1
    keep = long.probs[0] * long.probs[1] + 1e-9  # the second token takes the draft below this: it stops there
    short = mem.draft(prefix, "", "python", rule=DraftRule(member=Thresholds(None, 0.3), then=Thresholds(None, 0.3),
                                                           keep=keep))
    assert short is not None and short.tokens == long.tokens[:1]


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab_.(): \n=")), max_size=40),
       st.floats(0.05, 0.9), st.floats(0.05, 0.9), st.floats(0.0, 0.9))
def test_every_drafted_token_clears_its_thresholds(tail: str, first: float, then: float, keep: float) -> None:
    """Whatever the text: the first token clears the threshold of its place, every later one clears ``then``'s,
    and a draft of several tokens keeps at least ``keep`` of probability."""
    mem = _fresh()
    rule = DraftRule(Thresholds(None, first), Thresholds(None, first), Thresholds(None, first),
                     Thresholds(None, then), keep)
    d = mem.draft(CORPUS + tail, "", "python", rule=rule)
    if d is None:
        return
    assert d.probs[0] >= first - 1e-9 and all(p >= then - 1e-9 for p in d.probs[1:])
    if len(d.tokens) > 1:
        assert d.score >= keep - 1e-9


def test_document_tier_beats_background() -> None:
    bg = build_static([tokenize("x = foo.bar(1)\n" * 50, "python")], order=4, min_count=[1] * 4)
    mem = _fresh()
    mem._background["python"] = bg
    mem.observe("file:///a.py", "x = foo.baz(2)\nx = foo.baz(2)\n", "python")
    d = mem.draft("x = foo.baz(2)\nx = foo.baz(2)\nx = foo.", "", "python", uri="file:///a.py", min_prob=0.3)
    assert d is not None and d.text.startswith("baz") and d.tiers[0] == "document"
    d_bg = mem.draft("y = foo.", "", "python", uri=None, min_prob=0.3)
    assert d_bg is not None and d_bg.text.startswith("ba")


def test_workspace_tier_and_budget() -> None:
    mem = Memory(models_dir=None, order=4, max_bytes=500_000)  # two of these files at order 8
    for i in range(20):
        mem.add_workspace(f"/ws/m{i}.py", f"def helper_{i}(a, b):\n    return a + b\n" * 20, "python")
    assert mem.cache_bytes() <= 500_000 and len(mem.workspace_paths()) == 2
    d = mem.draft("def helper_19(a", "", "python", min_prob=0.3)
    assert d is not None and d.text.startswith(", b)")
    assert d.tiers[0] == "workspace"


def test_incremental_document_counts_match_recount() -> None:
    text = CORPUS
    model = DynamicNgrams(4)
    doc = DocumentCounts("python", [model])
    edits = [(50, 50, "x"), (10, 30, "\n    "), (0, 0, "# head\n"), (len(CORPUS) - 5, len(CORPUS), ""),
             (100, 140, "a\nb\n\nc"), (3, 4, "")]
    for i, j, ins in edits:
        doc.set_text(text)
        ref = DynamicNgrams(4)
        toks = tokenize(text, "python")
        ref.update(toks, 0, len(toks), 1)
        assert doc.tokens == toks
        assert model._follow == ref._follow and model._total == ref._total
        text = text[:i] + ins + text[j:]


def test_keystroke_in_large_document_is_cheap() -> None:
    big = (CORPUS * 400)[:200_000]
    doc = DocumentCounts("python", [DynamicNgrams(4)])
    t0 = time.perf_counter()
    doc.set_text(big)
    full = time.perf_counter() - t0
    t0 = time.perf_counter()
    for k in range(20):
        big = big[: 100_000 + k] + "x" + big[100_000 + k :]
        doc.set_text(big)
    per_key = (time.perf_counter() - t0) / 20
    assert per_key < full / 10


def test_witten_bell_is_a_distribution() -> None:
    m = DynamicNgrams(3)
    toks = tokenize("a b c a b d a b c\n", "python")
    m.update(toks, 0, len(toks), 1)
    vocab = sorted(set(toks))
    probs, best_m, conf = witten_bell(m, toks[:2], vocab)
    assert best_m == 2 and 0 < conf < 1
    assert sum(probs) == pytest.approx(1.0, abs=0.05)


@pytest.fixture(scope="module")
def shipped() -> Memory:
    return Memory.load()


def test_shipped_python_model_loads_fast_and_drafts(shipped: Memory) -> None:
    t0 = time.perf_counter()
    bg = shipped.background("python")
    assert bg is not None, "edit_engine/memory/models/python.npz is missing"
    assert time.perf_counter() - t0 < 1.0
    d = shipped.draft("import os\n\ndef main():\n    path = os.path.", "", "python", min_prob=0.2)
    assert d is not None and d.text.split("(")[0] in {"join", "dirname", "exists", "abspath", "basename",
                                                       "isfile", "isdir", "splitext", "realpath"}
    d2 = shipped.draft("import numpy as np\n\ndef f(a):\n    return np.", "", "python", min_prob=0.05)
    assert d2 is not None and d2.text[:1].isalpha()


@pytest.mark.parametrize("language", ["javascript", "typescript", "go", "rust"])
def test_other_shipped_models_load(shipped: Memory, language: str) -> None:
    assert shipped.background(language) is not None, f"no model for {language} in the package"
    assert shipped.load_seconds.get("javascript" if language == "typescript" else language, 0) < 1.0


def test_draft_latency_on_1000_line_document(shipped: Memory) -> None:
    lines = [ln for ln in CORPUS.splitlines()] * 80
    text = "\n".join(lines[:1000]) + "\n"
    uri = "file:///big.py"
    shipped.observe(uri, text, "python")
    prefix = text + "    def close(self):\n        with self._send_lo"
    shipped.observe(uri, prefix, "python")
    shipped.draft(prefix, "", "python", uri=uri)
    t0 = time.perf_counter()
    for _ in range(20):
        shipped.draft(prefix, "", "python", uri=uri)
    assert (time.perf_counter() - t0) / 20 < 0.02  # 5 ms on an idle core; slack for shared CI machines


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([2, 3, 4]))
def test_size_budget_takes_the_smallest_top_threshold_that_fits(seed: int, order: int) -> None:
    """With a size budget the longest contexts' threshold rises to the smallest value that fits, as raising
    it one by one would find (the search prunes a few times, not once per value)."""
    import random

    rng = random.Random(seed)
    words = [f"w{i}" for i in range(40)]
    streams = [[rng.choice(words[: rng.randint(3, 40)]) for _ in range(rng.randint(50, 400))] for _ in range(6)]
    full = build_static(streams, order, [1] * order)
    budget = int(full.nbytes() * rng.uniform(0.3, 0.95))
    t = 1  # the one-by-one reference
    while (ref := build_static(streams, order, [1] * (order - 1) + [t])).nbytes() > budget and t < 500:
        t += 1
    if ref.nbytes() > budget:  # it does not fit even without the longest contexts: a clear error
        with pytest.raises(ValueError, match="do not fit"):
            build_static(streams, order, [1] * order, max_bytes=budget)
        return
    got = build_static(streams, order, [1] * order, max_bytes=budget)
    assert got.nbytes() == ref.nbytes() <= budget and got.vocab == ref.vocab
