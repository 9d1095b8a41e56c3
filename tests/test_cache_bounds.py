"""Caches bounded in bytes as well as entries: the ``BoundedLRU`` they share, the syntax tree cache's use of it,
the memory of code's running token count, and the engine's document path under a stream of large distinct
documents and related files, whose caches must stay within their budgets in their own accounting and in the
process's resident memory."""

from __future__ import annotations

import functools
import gc
import importlib
import os
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.engine import Engine, analysis, proposals, runtime
from edit_engine.memory import Memory
from edit_engine.syntax import lru, repair
from edit_engine.syntax import trees as syntax
from edit_engine.syntax.lru import BoundedLRU

# ---------------------------------------------------------------------------------------------------- BoundedLRU
PUT = st.tuples(st.integers(0, 12), st.integers(0, 120))  # (key, size)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 6), st.integers(0, 100), st.lists(PUT, max_size=60))
def test_bounds_hold_after_any_puts(max_entries: int, max_bytes: int, puts: list[tuple[int, int]]) -> None:
    cache: BoundedLRU[int, int] = BoundedLRU(max_entries, max_bytes)
    model: dict[int, int] = {}  # key -> size, least recent first
    for key, size in puts:
        kept = cache.put(key, key * 1000 + size, size)
        assert kept == (size <= max_bytes and max_entries > 0)
        assert len(cache) <= max_entries and cache.nbytes <= max_bytes
        assert cache.nbytes == sum((cache.peek(k) or 0) % 1000 for k in range(13) if k in cache)
        if kept:  # the most recent entry that fits is held
            assert cache.peek(key) == key * 1000 + size
        else:
            assert key not in cache
        model.pop(key, None)
        if kept:
            model[key] = size
        while len(model) > max_entries or sum(model.values()) > max_bytes:
            del model[next(iter(model))]
        assert {k for k in range(13) if k in cache} == set(model)  # least recently used out first


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "get", "resize", "pop"]), st.integers(0, 5), st.integers(0, 60)),
                max_size=50))
def test_gets_resizes_and_pops_keep_the_bounds(ops: list[tuple[str, int, int]]) -> None:
    cache: BoundedLRU[int, str] = BoundedLRU(3, 50)
    for op, key, size in ops:
        if op == "put":
            cache.put(key, str(key), size)
        elif op == "get":
            assert cache.get(key) in (None, str(key))
        elif op == "resize":
            cache.resize(key, size)
        else:
            cache.pop(key)
        assert len(cache) <= 3 and 0 <= cache.nbytes <= 50


def test_a_get_makes_an_entry_the_most_recent() -> None:
    cache: BoundedLRU[str, int] = BoundedLRU(2, 100)
    cache.put("a", 1, 10)
    cache.put("b", 2, 10)
    assert cache.get("a") == 1  # "b" is now the least recent
    cache.put("c", 3, 10)
    assert "a" in cache and "b" not in cache and "c" in cache
    assert cache.peek("a") == 1 and cache.get("zz", 7) == 7
    cache.put("d", 4, 95)  # over the byte budget with anything else: the rest goes
    assert list(k for k in "abcd" if k in cache) == ["d"] and cache.nbytes == 95
    assert not cache.put("e", 5, 101) and "e" not in cache  # larger than the whole budget: not kept


def test_resize_drops_older_entries_then_the_entry_itself() -> None:
    cache: BoundedLRU[str, int] = BoundedLRU(4, 100)
    for k in "abc":
        cache.put(k, 0, 30)
    cache.resize("c", 60)
    assert "a" not in cache and "b" in cache and cache.nbytes == 90
    cache.resize("c", 200)
    assert "c" not in cache and cache.nbytes == 30
    cache.resize("zz", 10)  # unknown: nothing
    assert len(cache) == 1


def test_held_sums_the_live_caches_by_name() -> None:
    a: BoundedLRU[int, int] = BoundedLRU(4, 1000, "test: held")
    b: BoundedLRU[int, int] = BoundedLRU(4, 1000, "test: held")
    a.put(1, 1, 100)
    b.put(1, 1, 50)
    assert lru.held()["test: held"] == 150
    del b
    gc.collect()
    assert lru.held()["test: held"] == 100


# ---------------------------------------------------------------------------------------------------- syntax trees
def test_syntax_cache_keeps_the_newest_documents_within_its_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "def f(a, b):\n    return a + b\n" * 200
    size = syntax.document_bytes(syntax.Document.parse(text, "python"))
    cache = syntax.SyntaxCache(capacity=64, max_bytes=3 * size + size // 2)
    for i in range(10):
        cache.get(f"d{i}", text + f"# {i}\n", "python")
    assert len(cache) == 3 and cache.nbytes <= 3 * size + size // 2
    parses: list[str] = []
    real = syntax.Document.parse

    def counted(t: str, language: str) -> syntax.Document:
        parses.append(t)
        return real(t, language)

    monkeypatch.setattr(syntax.Document, "parse", counted)
    doc = cache.get("d9", text + "# 9\nx", "python")  # a keystroke in the newest: re-parsed incrementally
    assert parses == [] and doc.text.endswith("# 9\nx") and not doc.tree.root_node.has_error  # type: ignore[union-attr]
    cache.edit("d9", len(doc.text), len(doc.text), " = 1\n")
    assert cache.get("d9", doc.text + " = 1\n", "python").text.endswith("x = 1\n") and parses == []
    cache.get("d0", text + "# 0\n", "python")  # dropped earlier: parsed anew
    assert len(parses) == 1 and len(cache) == 3


def test_a_document_over_the_whole_budget_is_parsed_and_not_kept() -> None:
    cache = syntax.SyntaxCache(max_bytes=50_000)
    cache.get("small", "x = 1\n", "python")
    big = "x = f(a, b[1], c.d)\n" * 5_000
    doc = cache.get("big", big, "python")
    assert doc.text == big and doc.tree is not None
    assert "big" not in cache._docs and len(cache) == 1


def test_tree_estimate_follows_the_node_count() -> None:
    sparse = syntax.Document.parse("# a comment line with nothing to parse in it\n" * 2_000, "python")
    dense = syntax.Document.parse("x = f(a, b[1], c.d) + g[2] * 3\n" * 3_000, "python")
    assert abs(len(dense.text) - len(sparse.text)) < len(sparse.text) // 10  # as long, five times the tree
    assert syntax.document_bytes(dense) > 5 * syntax.document_bytes(sparse)


def test_a_large_source_parses_in_chunks_to_the_same_tree_and_leaves_no_chunk_behind() -> None:
    import tracemalloc

    text = _code(300_000, "chunks")
    assert len(text.encode()) > 16 * syntax.CHUNK_BYTES
    whole = str(syntax.load("python").parser().parse(text.encode()).root_node)  # type: ignore[union-attr]
    doc = syntax.Document.parse(text, "python")
    assert str(doc.tree.root_node) == whole  # type: ignore[union-attr]
    at = text.index("\ndef ") + 1
    doc.edit(at, at, "x = [1, 2]\n")
    assert str(doc.tree.root_node) == str(syntax.Document.parse(doc.text, "python").tree.root_node)  # type: ignore[union-attr]
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(4):
            syntax.Document.parse(text, "python")
            doc.parse_with(at, at, "y = 2\n")
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert kept < 200_000  # measured 20 kB; a fresh slice returned for each read kept 3.3 MB


# ---------------------------------------------------------------------------------------------------- memory of code
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["observe", "close", "add", "package", "remove"]), st.integers(0, 4),
                          st.integers(0, 30)), max_size=40))
def test_memory_keeps_a_running_count_of_its_tokens(ops: list[tuple[str, int, int]]) -> None:
    mem = Memory(models_dir=None, order=4, max_bytes=200_000, max_documents=3)
    for op, k, n in ops:
        text = f"def f{k}(a, b):\n    return a + b * {n}\n" * n
        if op == "observe":
            mem.observe(f"file:///d{k}.py", text, "python" if n % 5 else "javascript")
        elif op == "close":
            mem.close(f"file:///d{k}.py")
        elif op in ("add", "package"):
            mem.add_workspace(f"/ws/m{k}.py", text, "python", "workspace" if op == "add" else "packages")
        else:
            mem.remove_workspace(f"/ws/m{k}.py")
        assert mem._tokens == mem._count_tokens()
        assert mem.cache_bytes() <= 200_000 or len(mem._docs) <= 1


# ---------------------------------------------------------------------------------------------------- the engine
DOCUMENTS = 100  # distinct documents, each with a distinct related file
DOC_CHARS = 200_000
RELATED_CHARS = 200_000
SLACK = 160 << 20  # what the budgets leave out: the requests' own texts and trees, encoded contexts, allocator slack
# Resident memory the stream may add: the byte budgets of the caches it fills (``_budgets``, 272 MB) and ``SLACK``.
# Measured: +350 MB. Bounded by entries only, the same stream kept 64 documents' trees, spans and sources: +757 MB.
RSS_CEILING = 432 << 20


def _budgets() -> dict[str, int]:
    """The byte budgets of the caches a document request with related files fills, by cache name."""
    return {"syntax trees": syntax.MAX_BYTES, "related spans": proposals.SPANS_MAX_BYTES,
            "related sources": proposals.SOURCES_MAX_BYTES, "compile checks": repair.ERRORS_MAX_BYTES,
            "recent insertions": runtime.RECENT_MAX_BYTES}


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@functools.cache
def _stdlib_code() -> str:
    return "".join(Path(importlib.import_module(m).__file__ or "").read_text(encoding="utf-8")
                   for m in ("tokenize", "json.decoder", "ast", "inspect"))


def _code(chars: int, tag: str) -> str:
    """``chars`` characters of real Python (stdlib modules, shuffled by top-level definition), one of a kind by
    ``tag``."""
    parts = _stdlib_code().split("\n\n\n")
    random.Random(tag).shuffle(parts)
    body = "\n\n\n".join(parts)
    body = (body * (chars // len(body) + 1))[:chars]
    return f"# {tag}\n" + body[: body.rfind("\n") + 1]


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="resident memory is read from /proc")
def test_distinct_large_documents_stay_within_the_cache_budgets(tiny_engine: Engine) -> None:
    e = tiny_engine
    e.complete("def f(a, b):\n    return \n", 24, uri="file:///bounds/warm.py", related=["x = 1\n"], max_tokens=4)
    gc.collect()
    before = _rss()
    peak = 0
    last = ""
    for i in range(DOCUMENTS):
        text = _code(DOC_CHARS, f"document {i}") + "def f(a, b):\n    return "
        related = [_code(RELATED_CHARS, f"related {i}")]
        e.complete(text + "\n", len(text), uri=f"file:///bounds/d{i}.py", related=related, max_tokens=8)
        peak = max(peak, _rss() - before)
        last = text
    gc.collect()
    grown = _rss() - before
    print(f"resident memory: +{grown / 2**20:.0f} MB after {DOCUMENTS} documents, +{peak / 2**20:.0f} MB at most")
    assert max(peak, grown) < RSS_CEILING, f"resident memory grew {peak / 2**20:.0f} MB at most"
    budgets = _budgets()
    assert sum(budgets.values()) + SLACK <= RSS_CEILING
    # The caches' own accounting: this engine's, and the process-wide ones of related files and compile checks.
    held = {**lru.held(), "syntax trees": e.syntax_cache.nbytes, "recent insertions": e.rt._recent.nbytes}
    cached = sum(held.get(name, 0) for name in budgets)
    print(f"cached: {cached / 2**20:.0f} MB", {name: round(held.get(name, 0) / 2**20) for name in budgets})
    assert all(held.get(name, 0) <= budget for name, budget in budgets.items()), held
    # The caches were filled, not bypassed: the trees' share is near its budget, and the estimates account for
    # what the process kept.
    assert e.syntax_cache.nbytes > syntax.MAX_BYTES // 2
    assert grown < cached + SLACK
    # The document being typed in is still kept: its next keystroke re-parses incrementally.
    assert f"file:///bounds/d{DOCUMENTS - 1}.py" in e.syntax_cache._docs
    assert e.syntax_cache.get(f"file:///bounds/d{DOCUMENTS - 1}.py", last + "x", "python").text.endswith("x")


def test_analysis_entries_are_sized_when_they_finish() -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        an = analysis.Analyser(executor=pool, max_bytes=300_000)
        text = "".join(f"name_{i} = {i}\n" for i in range(3_000)) + "na"
        got = an.analyse(text, len(text), budget_ms=30_000)
        assert got is not None and len(got.names) >= 3_000
        assert an._cache.nbytes == analysis.analysis_bytes(got) > 3_000 * 60
        text2 = text.replace("name_", "other_")
        an.analyse(text2, len(text2), budget_ms=30_000)  # a second one over the budget together: the first goes
        assert len(an._cache) == 1 and an._cache.nbytes <= 300_000


def test_metrics_report_the_bytes_each_cache_holds() -> None:
    """/metrics carries ``edit_engine_cache_bytes{cache=...}``, read from the live caches at each scrape."""
    from edit_engine.serve.metrics import Metrics

    c: BoundedLRU[int, int] = BoundedLRU(4, 1000, "test: scraped")
    m = Metrics()
    c.put(1, 1, 300)
    assert 'edit_engine_cache_bytes{cache="test: scraped"} 300.0' in m.render()
    c.put(2, 2, 900)  # the first entry goes: 900 bytes held
    assert 'edit_engine_cache_bytes{cache="test: scraped"} 900.0' in m.render()
