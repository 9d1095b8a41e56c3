"""The scheduler alone (no server): its passes are the sampler's, and a batched row computes what it would
alone, whatever the mix of requests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edit_engine.engine import DocumentPlan, Engine, Pass
from edit_engine.model.network import ContextCache, DiffusionLM
from edit_engine.model.tokenizer import Tokenizer
from edit_engine.serve.batching import (
    Cancelled,
    Continuation,
    JobPass,
    JobSpec,
    Overloaded,
    Scheduler,
    shape_bucket,
)
from edit_engine.serve.metrics import Metrics

CODE = st.text(alphabet="abcdefxyz_ ()=:+\n\t0123456789", max_size=120)


@pytest.fixture(scope="module")
def engine(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> Engine:
    return Engine(tiny_model, tiny_tokenizer)


async def _run_all(sched: Scheduler, specs: list[JobSpec]) -> list[list[JobPass]]:
    loop = asyncio.get_running_loop()
    with sched._cond:  # every job waits before the first admission, so they are admitted together
        jobs = [sched.submit(s, loop) for s in specs]

    async def collect(j):  # type: ignore[no-untyped-def]
        return [p async for p in j.passes()]

    return list(await asyncio.wait_for(asyncio.gather(*(collect(j) for j in jobs)), 120))


def _scheduled(engine: Engine, specs: list[JobSpec], max_batch: int = 1) -> list[list[JobPass]]:
    """Every job's passes, all submitted before the first admission to a fresh scheduler."""
    sched = Scheduler(engine, Metrics(), max_batch=max_batch, max_queue=len(specs))
    try:
        return asyncio.run(_run_all(sched, specs))
    finally:
        sched.close()


def _unbatched_equals_engine(engine: Engine, reqs: list[tuple[str, str, int, int]], **kw: float) -> None:
    """Each request through the scheduler at max_batch = 1 gives exactly the passes of ``engine.stream`` alone
    (token healing on in both, as the server's ``{prefix, suffix}`` requests have it)."""
    specs = [JobSpec(p, s, max_tokens=m, initial_canvas=c, overrides=dict(kw), heal=True) for p, s, m, c in reqs]
    sched = Scheduler(engine, Metrics(), max_batch=1, max_queue=len(specs))
    try:
        got = asyncio.run(_run_all(sched, specs))
    finally:
        sched.close()
    for (p, s, m, c), passes in zip(reqs, got, strict=True):
        want = list(engine.stream(p, s, max_tokens=m, initial_canvas=c, **kw))
        assert [(x.index, x.text, x.masked, x.final, x.nfe, x.stop_reason) for x in passes] == \
               [(x.index, x.text, x.masked, x.final, x.nfe, x.stop_reason) for x in want]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reqs=st.lists(st.tuples(CODE, CODE, st.integers(1, 40), st.integers(1, 16)), min_size=1, max_size=4))
def test_unbatched_scheduler_passes_equal_the_engine_alone(engine: Engine,
                                                           reqs: list[tuple[str, str, int, int]]) -> None:
    """max_batch = 1: the scheduler's loop (commit, growth, stop, counts) is the sampler's, exactly."""
    _unbatched_equals_engine(engine, reqs)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reqs=st.lists(st.tuples(CODE, CODE, st.integers(1, 40), st.integers(1, 16)), min_size=2, max_size=6),
       max_batch=st.integers(2, 4))
def test_each_batched_row_computes_what_it_would_alone(engine: Engine, reqs: list[tuple[str, str, int, int]],
                                                       max_batch: int) -> None:
    """Every batched forward pass: each row's logits equal that request's own forward pass on the same canvas
    (own context cache, no padding) up to float summation order. Discrete outputs are not compared: with the
    random tiny model many slots tie to 1e-7, so summation order alone can change which one is committed."""
    model = engine.model
    specs = [JobSpec(p, s, max_tokens=m, initial_canvas=c) for p, s, m, c in reqs]
    sched = Scheduler(engine, Metrics(), max_batch=max_batch, max_queue=len(specs))
    batched, encode = model.canvas_logits, model.encode_context
    worst: list[float] = []
    rows: list[int] = []

    def checked(canvas: torch.Tensor, cache: ContextCache) -> torch.Tensor:  # runs in the scheduler thread
        out = batched(canvas, cache)  # (B, C, V)
        for r, a in enumerate(sched._active):
            prep = a.job.prepared
            assert prep is not None
            alone = encode([prep.prefix_ids], [prep.suffix_ids], capacity=prep.cfg.max_tokens)
            ref = batched(canvas[r : r + 1, : a.size], alone)[0]  # (c_r, V)
            worst.append(float((out[r, : a.size] - ref).abs().max()))
        rows.append(canvas.shape[0])
        # Only a few shapes ever run (see shape_bucket): bucketed context, capacity and canvas widths.
        assert cache.ctx_len == shape_bucket(cache.ctx_len) and cache.capacity % 16 == 0
        assert canvas.shape[1] % 8 == 0 or canvas.shape[1] == cache.capacity
        return out

    contexts: list[int] = []

    def encoded(*args: Any, **kw: Any) -> ContextCache:  # the admissions' contexts: bucketed lengths too
        cache = encode(*args, **kw)
        contexts.append(cache.ctx_len)
        return cache

    model.canvas_logits = checked  # type: ignore[method-assign]
    model.encode_context = encoded  # type: ignore[method-assign]
    try:
        got = asyncio.run(_run_all(sched, specs))
    finally:
        del model.canvas_logits, model.encode_context
        sched.close()
    assert all(p[-1].final for p in got)
    assert max(worst) < 1e-4, max(worst)
    assert contexts and all(n % 16 == 0 for n in contexts)
    if len(specs) > 1:
        assert max(rows) > 1  # some passes were shared


@pytest.mark.parametrize("overrides", [{}, {"min_commit": 3}])
def test_stable_text_only_grows_and_ends_at_the_result(engine: Engine, overrides: dict[str, float]) -> None:
    """The committed leading text (what append-only streams send) never takes anything back."""
    sched = Scheduler(engine, Metrics())
    try:
        (passes,) = asyncio.run(_run_all(sched, [JobSpec("def f(x):\n    return ", "\n", 40, stable=True,
                                                         overrides=dict(overrides))]))
    finally:
        sched.close()
    stables = [p.stable for p in passes]
    assert all(s is not None for s in stables)
    for a, b in zip(stables, stables[1:], strict=False):
        assert b is not None and a is not None and b.startswith(a)
    assert stables[-1] == passes[-1].text


@pytest.mark.parametrize("max_batch", [1, 2])
def test_token_healing_in_the_scheduler_equals_the_engine(packaged_engine: Engine, max_batch: int) -> None:
    """A ``{prefix, suffix}`` request whose prefix ends inside a word: the scheduler heals it as
    ``Engine.stream`` does (same passes alone; batched, the same healed start), and the stable text of an
    append-only stream never holds the part of the word the prefix already has."""
    reqs = [("def f(xs):\n    ys = sor", "\n    return ys\n"), ("import o", "\n")]
    assert all(packaged_engine.healing(p, s)[0] for p, s in reqs)
    specs = [JobSpec(p, s, 16, heal=True, stable=True) for p, s in reqs]
    sched = Scheduler(packaged_engine, Metrics(), max_batch=max_batch, max_queue=len(specs))
    try:
        got = asyncio.run(_run_all(sched, specs))
    finally:
        sched.close()
    for (p, s), passes in zip(reqs, got, strict=True):
        want = list(packaged_engine.stream(p, s, max_tokens=16))
        word = p.rsplit(" ", 1)[-1]
        assert not passes[-1].text.startswith(word) and not want[-1].text.startswith(word)
        if max_batch == 1:
            assert [(x.index, x.text, x.nfe) for x in passes] == [(x.index, x.text, x.nfe) for x in want]
        else:  # batched rows may differ by float rounding: the healed word's first token is what counts
            assert passes[-1].text[:2] == want[-1].text[:2]
        stables = [x.stable or "" for x in passes]
        assert all(b.startswith(a) for a, b in zip(stables, stables[1:], strict=False))
        assert stables[-1] == passes[-1].text
    unhealed = list(packaged_engine.stream(reqs[0][0], reqs[0][1], max_tokens=16, heal=False))
    assert unhealed[-1].text != got[0][-1].text  # the test can fail: healing changes this fill


def test_queue_bound_and_cancel_before_admission(engine: Engine) -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        sched = Scheduler(engine, Metrics(), max_batch=1, max_queue=2, before_pass=lambda: None)
        try:
            with sched._cond:  # hold the scheduler thread so the queue fills deterministically
                a = sched.submit(JobSpec("a = ", "", 4), loop)
                b = sched.submit(JobSpec("b = ", "", 4), loop)
                with pytest.raises(Overloaded):
                    sched.submit(JobSpec("c = ", "", 4), loop)
                b.cancel("client")
                c = sched.submit(JobSpec("c = ", "", 4), loop)  # a cancelled waiter makes room
            assert [p async for p in a.passes()][-1].final
            with pytest.raises(Cancelled):
                async for _ in b.passes():
                    pass
            assert [p async for p in c.passes()][-1].final
        finally:
            sched.close()
        assert sched.metrics.retired.value(reason="cancelled") == 1
        assert sched.metrics.retired.value(reason="done") == 2

    asyncio.run(go())


def test_metrics_exposition_format() -> None:
    m = Metrics()
    m.requests.inc(route="ws", outcome="ok")
    m.latency.observe(0.02)
    m.latency.observe(100.0)
    text = m.render()
    assert 'edit_engine_requests_total{outcome="ok",route="ws"} 1' in text
    assert 'edit_engine_request_latency_seconds_bucket{le="0.025"} 1' in text
    assert 'edit_engine_request_latency_seconds_bucket{le="+Inf"} 2' in text
    assert "edit_engine_request_latency_seconds_count 2" in text
    assert "# TYPE edit_engine_queue_depth gauge" in text
    for line in text.splitlines():
        assert line.startswith("#") or len(line.rsplit(" ", 1)) == 2


# Documents whose fills (tiny model, seed 0) take each path: a parse check with repair rounds, a check that
# passes or is not asked for (comment, plain text), a single-line span, a selection.
DOCUMENTS = [
    ("def f(x):\n    return \n", 20, None, "python"),
    ("x = [1, 2, \ny = 3\n", 11, None, "python"),
    ("# a note: \nx = 1\n", 10, None, "python"),
    ("some words \nmore\n", 11, None, "plaintext"),
    ("total = max(a, )\n", 15, None, "python"),
    ("a = 1\nb = 2\nc = 3\n", 6, (6, 11), "python"),
    ("def f(xs):\n    r = []\n\n        r.append(xs)\n", 22, None, "python"),  # a header: keyword slot, ":"
    ("def f(x):\n    if x:\n        y = 1\n\n    return y\n", 34, None, "python"),  # the model picks the indent
]


@pytest.mark.parametrize("batch_context", [True, False])
def test_document_jobs_at_max_batch_1_equal_the_engine_stream(engine: Engine, batch_context: bool) -> None:
    """A document request through the scheduler (plan, batched passes with post-processing, then the check and
    repair rounds on the worker pool) yields exactly ``Engine.stream_complete``'s passes, whether the repair
    rounds reuse the context the batch encoded (as the server does) or ``Engine.finish_document`` encodes it."""
    from edit_engine.serve.batching import LastPass
    from edit_engine.serve.serving import document_spec

    dps = [engine.plan_document(t, o, lang, sel, 24) for t, o, sel, lang in DOCUMENTS]
    specs = [document_spec(engine, dp) for dp in dps]
    if not batch_context:
        def own(dp: DocumentPlan) -> Continuation:
            def then(last: LastPass, should_stop: Callable[[], bool]) -> Iterator[Pass]:
                return engine.finish_document(dp, last.tokens, last.index, last.nfe, last.stop_reason, 0,
                                              should_stop)
            return then

        specs = [replace(s, then=own(dp)) if s.then is not None else s for s, dp in zip(specs, dps, strict=True)]
    assert any(s.then is not None for s in specs) and any(s.then is None for s in specs)
    sched = Scheduler(engine, Metrics(), max_batch=1, max_queue=len(specs))
    try:
        got = asyncio.run(_run_all(sched, specs))
    finally:
        sched.close()
    repaired = 0
    for (t, o, sel, lang), passes in zip(DOCUMENTS, got, strict=True):
        want = list(engine.stream_complete(t, o, lang, sel, 24))
        assert [(x.index, x.text, x.masked, x.final, x.nfe, x.start, x.end) for x in passes] == \
               [(x.index, x.text, x.masked, x.final, x.nfe, x.start, x.end) for x in want], (t, o)
        assert passes[-1].stop_reason == want[-1].stop_reason
        repaired += want[-1].nfe > want[-1].index + 1  # a repair round's scoring pass
    assert repaired, "no document took the repair path"
    assert sched.metrics.retired.value(reason="done") == len(specs)
    assert sched.metrics.passes.value() == sum(len(p) for p in got)


_LINES = [  # (document, the text the cursor follows)
    ("import os\n\n\ndef walk(root):\n    names = os.listdir(root)\n    total = su\n    print(names)\n", "total = su"),
    ("import os\n\n\ndef walk(root):\n    names = os.listdir(root)\n    for name in \n    print(names)\n",
     "for name in "),
    ("def area(w, h):\n    result = w * \n    return result\n", "result = w * "),
    ("def f(xs):\n    r = []\n\n        r.append(xs)\n    return r\n", "    r = []\n"),  # a header
]
LINE_DOCS = [(t, t.index(at) + len(at)) for t, at in _LINES]


@pytest.mark.parametrize("max_batch", [1, 3])
def test_line_stop_in_the_scheduler_matches_the_engine(packaged_engine: Engine, max_batch: int) -> None:
    """Single-line document requests stop at their line in the batched scheduler as in the engine (the packaged
    model writes newlines; the tiny random one almost never does), alone or batched together."""
    from edit_engine.serve.serving import document_spec

    dps = [packaged_engine.plan_document(t, o, "python", None, 24, repair=False) for t, o in LINE_DOCS]
    assert all(dp.cfg.line_stop for dp in dps)
    sched = Scheduler(packaged_engine, Metrics(), max_batch=max_batch, max_queue=len(dps))
    try:
        got = asyncio.run(_run_all(sched, [document_spec(packaged_engine, dp) for dp in dps]))
    finally:
        sched.close()
    reasons = []
    for (t, o), passes in zip(LINE_DOCS, got, strict=True):
        want = list(packaged_engine.stream_complete(t, o, "python", None, 24, repair=False))
        if max_batch == 1:  # batched rows may differ from a lone row by float rounding: compare the stop only
            assert [(x.index, x.text, x.nfe) for x in passes] == [(x.index, x.text, x.nfe) for x in want], (t, o)
        reasons.append(passes[-1].stop_reason)
        assert passes[-1].final and passes[-1].nfe <= 24
    assert "line" in reasons, reasons


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reqs=st.lists(st.tuples(CODE, CODE, st.integers(1, 32), st.integers(1, 16)), min_size=1, max_size=3))
def test_floor_ramp_in_the_scheduler_equals_the_engine(engine: Engine, reqs: list[tuple[str, str, int, int]]) -> None:
    """The floor ramp (the sampler's floor per pass of a fresh canvas) runs the same in the server's scheduler."""
    _unbatched_equals_engine(engine, reqs, min_commit=6, floor_ramp=1, spread=1)


def test_the_scheduler_applies_the_penalty_as_the_engine_does(packaged_engine: Engine) -> None:
    """Document and ``{prefix, suffix}`` requests with the penalty: the scheduler's passes (max_batch 1) are the
    engine's, and the penalty changes at least one of the fills (the test can fail)."""
    from edit_engine.serve.serving import document_spec

    eng = packaged_engine
    docs = [("def mean(values):\n    total = \n    return total / len(values)\n", "total = "),
            ("def count_words(text):\n    words = text.split()\n\n    return counts\n", "split()\n")]
    kw = {"novel_penalty": 4.0}
    dps = [eng.plan_document(t, t.index(at) + len(at), "python", None, 16, repair=False, **kw) for t, at in docs]
    assert all(dp.bias is not None for dp in dps)
    infills = [("def scale(points, k):\n    return [", "]\n")]
    specs = [document_spec(eng, dp) for dp in dps] + [
        JobSpec(p, s, 16, heal=True, overrides=dict(kw), language="python") for p, s in infills]
    got = _scheduled(eng, specs)
    changed = 0
    for (t, at), passes in zip(docs, got, strict=False):
        o = t.index(at) + len(at)
        want = list(eng.stream_complete(t, o, "python", None, 16, repair=False, **kw))
        assert [(x.index, x.text, x.nfe) for x in passes] == [(x.index, x.text, x.nfe) for x in want]
        off = list(eng.stream_complete(t, o, "python", None, 16, repair=False, novel_penalty=0.0))
        changed += want[-1].text != off[-1].text
    for (p, s), passes in zip(infills, got[len(docs):], strict=True):
        want = list(eng.stream(p, s, max_tokens=16, **kw))
        assert [(x.index, x.text, x.nfe) for x in passes] == [(x.index, x.text, x.nfe) for x in want]
        changed += want[-1].text != list(eng.stream(p, s, max_tokens=16, novel_penalty=0.0))[-1].text
    assert changed, "the penalty changed no fill"


@given(st.integers(0, 1 << 16))
def test_shape_buckets_are_few_and_tight(n: int) -> None:
    """A length is padded by at most an eighth (16 below 128), a bucket is its own bucket, and lengths up to
    4,096 fall into few buckets (each distinct shape costs the CPU libraries memory that stays)."""
    b = shape_bucket(n)
    assert n <= b <= max(n + 15, n * 9 // 8 + 1) and shape_bucket(b) == b and b % 16 == 0
    assert len({shape_bucket(x) for x in range(4097)}) <= 64
