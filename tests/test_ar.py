"""The autoregressive baseline: PSM format, key/value-cached greedy decoding equal to a full recompute, and
the engine's dispatch (infill, stream, complete) on an AR checkpoint."""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.decoding import ar
from edit_engine.decoding.sampler import Step
from edit_engine.engine import ContextCacheConfig, Engine
from edit_engine.model.network import PREFIX, PRESETS, DiffusionLM
from edit_engine.model.tokenizer import Tokenizer

SOURCE = inspect.getsource(json.decoder)


def _examples(tok: Tokenizer) -> list[tuple[list[int], list[int], list[int]]]:
    """(prefix, suffix, middle) token ids cut from real code."""
    out = []
    for i in range(4):
        text = SOURCE[1000 + 700 * i : 1000 + 700 * i + 600]
        out.append((tok.encode(text[:300]), tok.encode(text[320:600]), tok.encode(text[300:320])))
    return out


@pytest.fixture(scope="module")
def ar_model(tiny_tokenizer: Tokenizer) -> DiffusionLM:
    """A tiny AR model trained for a few steps on four PSM sequences, so that it produces varied tokens and
    ends middles with eos (random weights repeat one token forever)."""
    torch.manual_seed(0)
    model = DiffusionLM(dataclasses.replace(PRESETS["tiny"], objective="ar"))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-2)
    seqs = [ar.psm_sequence(tiny_tokenizer, p, s, m) for p, s, m in _examples(tiny_tokenizer)]
    T = max(len(q) for q in seqs)
    tokens = torch.zeros(len(seqs), T, dtype=torch.long)
    kind = torch.zeros(len(seqs), T, dtype=torch.int8)  # ABSENT left padding
    targets = torch.full((len(seqs), T), -100)
    for r, q in enumerate(seqs):
        tokens[r, T - len(q) :] = torch.tensor(q)
        kind[r, T - len(q) :] = PREFIX
        targets[r, T - len(q) : -1] = torch.tensor(q[1:])
    for _ in range(80):
        loss = F.cross_entropy(model.head(model(tokens, kind)).flatten(0, 1), targets.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def test_psm_format(tiny_tokenizer: Tokenizer) -> None:
    tok = tiny_tokenizer
    assert ar.psm_prompt(tok, [10, 11], [12]) == [10, 11, tok.mask_id, 12, tok.pad_id]
    assert ar.psm_sequence(tok, [10], [12], [13, 14]) == [10, tok.mask_id, 12, tok.pad_id, 13, 14, tok.eos_id]
    assert (ar.fim_suffix_id(tok), ar.fim_middle_id(tok)) == (tok.mask_id, tok.pad_id)


def _generate(model: DiffusionLM, tok: Tokenizer, p: list[int], s: list[int], n: int,
              **kw: object) -> list[Step]:
    return list(ar.ar_generate(model, tok, p, s, n, **kw))  # type: ignore[arg-type]


@settings(max_examples=15, deadline=None)
@given(i=st.integers(0, 3), cut=st.integers(0, 40), max_tokens=st.integers(1, 40),
       min_tokens=st.integers(0, 5))
def test_cached_decoding_equals_full_recompute(ar_model: DiffusionLM, tiny_tokenizer: Tokenizer, i: int,
                                               cut: int, max_tokens: int, min_tokens: int) -> None:
    tok = tiny_tokenizer
    p, s, _ = _examples(tok)[i]
    p = p[cut:]  # other prompts than the trained ones too
    min_tokens = min(min_tokens, max_tokens)
    steps = _generate(ar_model, tok, p, s, max_tokens, min_tokens=min_tokens)
    want = ar.reference_generate(ar_model, tok, p, s, max_tokens, min_tokens)
    got = steps[-1].tokens.tolist()
    assert got == want
    assert [st_.tokens.tolist() for st_ in steps] == [want[: j + 1] for j in range(len(steps) - 1)] + [want]
    last = steps[-1]
    assert last.final and not any(x.final for x in steps[:-1])
    assert last.stop_reason == ("length" if len(want) == max_tokens else "complete")
    assert last.nfe == len(steps) == len(want) + (last.stop_reason == "complete")  # a pass per token, and eos
    assert len(want) >= min_tokens and not {tok.mask_id, tok.pad_id} & set(want)
    masked = [x.masked for x in steps]
    assert masked == sorted(masked, reverse=True) and masked[-1] == 0


def test_training_made_it_end_with_eos(ar_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> None:
    """The trained prompts give their middle back and stop: the eos path is exercised, not only the length."""
    p, s, m = _examples(tiny_tokenizer)[0]
    steps = _generate(ar_model, tiny_tokenizer, p, s, 40)
    assert steps[-1].stop_reason == "complete" and steps[-1].tokens.tolist() == m


def test_kv_cache_keeps_the_common_prefix_of_a_new_prompt(ar_model: DiffusionLM,
                                                          tiny_tokenizer: Tokenizer) -> None:
    tok = tiny_tokenizer
    p, s, _ = _examples(tok)[1]
    kv = ar.KVCache.empty(ar_model)
    first = _generate(ar_model, tok, p, s, 12, kv=kv)[-1].tokens.tolist()
    assert kv.ids[: len(p)] == p  # the prompt and the generated tokens are in the cache
    again = _generate(ar_model, tok, p + [tok.encode(" x")[0]], s, 12, kv=kv)[-1].tokens.tolist()
    assert again == ar.reference_generate(ar_model, tok, p + [tok.encode(" x")[0]], s, 12)
    assert _generate(ar_model, tok, p, s, 12, kv=kv)[-1].tokens.tolist() == first


def test_should_stop_stops_before_the_next_pass(ar_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> None:
    p, s, _ = _examples(tiny_tokenizer)[2]
    n = 0

    def stop() -> bool:
        return n >= 3

    for _ in ar.ar_generate(ar_model, tiny_tokenizer, p, s, 30, stop, min_tokens=30):
        n += 1
    assert n == 3


@pytest.fixture(scope="module")
def ar_checkpoint(save_tiny_checkpoint: Callable[[str, DiffusionLM, str], Path], ar_model: DiffusionLM) -> Path:
    return save_tiny_checkpoint("tiny-ar", ar_model, "tests only")


def test_engine_dispatches_on_the_objective(ar_checkpoint: Path, tiny_tokenizer: Tokenizer) -> None:
    eng = Engine.load(ar_checkpoint)
    assert eng.is_ar and eng.model.cfg.objective == "ar"
    p, s, m = _examples(tiny_tokenizer)[0]
    prefix, suffix = tiny_tokenizer.decode(p), tiny_tokenizer.decode(s)
    r = eng.infill(prefix, suffix, max_tokens=40)
    assert r.stop_reason in ("complete", "length", "line") and r.nfe >= 1 and r.passes == r.nfe
    p_ids, s_ids = eng.context_ids(prefix, suffix)
    want = ar.reference_generate(eng.model, tiny_tokenizer, p_ids, s_ids, 40, min_tokens=1)
    assert r.text == tiny_tokenizer.decode(want)
    passes = list(eng.stream(prefix, suffix, max_tokens=40))
    assert passes[-1].final and passes[-1].text == r.text and len(passes) == r.passes
    assert [x.index for x in passes] == list(range(len(passes)))
    forced = eng.infill(prefix, suffix, max_tokens=12, min_tokens=12)  # the bench's fixed-length span
    assert forced.nfe == 12 and forced.stop_reason == "length"


def test_ar_engine_in_bf16(ar_checkpoint: Path, tiny_tokenizer: Tokenizer) -> None:
    """The baseline decodes in bf16 too (``Engine.load(dtype=...)``): the key/value cache takes the model's dtype."""
    eng = Engine.load(ar_checkpoint, dtype="bf16")
    assert eng.is_ar and eng.dtype == "bfloat16"
    p, s, _ = _examples(tiny_tokenizer)[0]
    r = eng.infill(tiny_tokenizer.decode(p), tiny_tokenizer.decode(s), max_tokens=12, min_tokens=12)
    assert r.nfe == 12 and r.stop_reason == "length"


def test_ar_engine_in_int8(ar_checkpoint: Path, tiny_tokenizer: Tokenizer, int8_serving: None) -> None:
    """The baseline serves in int8 too (same network class), so both models can be compared in one dtype: the
    key/value-cached decoder runs on the int8 projections and head."""
    eng = Engine.load(ar_checkpoint, dtype="int8")
    assert eng.is_ar and eng.dtype == "int8" and eng.model.int8
    p, s, _ = _examples(tiny_tokenizer)[0]
    r = eng.infill(tiny_tokenizer.decode(p), tiny_tokenizer.decode(s), max_tokens=12, min_tokens=12)
    assert r.nfe == 12 and r.stop_reason == "length"


def test_ar_takes_the_novel_name_penalty(ar_checkpoint: Path, tiny_tokenizer: Tokenizer) -> None:
    """The baseline gets the diffusion sampler's prior: the cached decoder with a bias equals the no-cache oracle
    with it, a token the bias rules out never appears, and the engine applies ``--novel-penalty`` to it."""
    eng = Engine.load(ar_checkpoint)
    p, s, _ = _examples(tiny_tokenizer)[0]
    plain = ar.reference_generate(eng.model, tiny_tokenizer, p, s, 12, min_tokens=12)
    bias = torch.zeros(eng.model.cfg.vocab_size)
    bias[plain[0]] = -100.0  # rule out the token the baseline starts with
    want = ar.reference_generate(eng.model, tiny_tokenizer, p, s, 12, min_tokens=12, bias=bias)
    got = [step.tokens.tolist() for step in ar.ar_generate(eng.model, tiny_tokenizer, p, s, 12, min_tokens=12,
                                                          bias=bias)][-1]
    assert got == want and plain[0] not in want and want != plain
    prefix, suffix = tiny_tokenizer.decode(p), tiny_tokenizer.decode(s)
    cfg = eng.sampler_for({"novel_penalty": 3.0})
    b = eng.novelty_bias(*eng.context_ids(prefix, suffix), "python", cfg)
    assert b is not None and bool((b < 0).any())
    r = eng.infill(prefix, suffix, max_tokens=12, min_tokens=12, novel_penalty=3.0)
    assert r.text == tiny_tokenizer.decode(
        ar.reference_generate(eng.model, tiny_tokenizer, *eng.context_ids(prefix, suffix), 12, min_tokens=12, bias=b))


def test_ar_engine_cache_and_complete(ar_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> None:
    cached = Engine(ar_model, tiny_tokenizer)
    plain = Engine(ar_model, tiny_tokenizer, context_cache=ContextCacheConfig(budget_bytes=0))
    doc = SOURCE[:1500]
    for j in range(0, 12, 3):  # typing: each request keeps the cached prompt up to the cursor
        a = cached.infill(doc[: 1000 + j], doc[1000 + j :], uri="d", max_tokens=10)
        b = plain.infill(doc[: 1000 + j], doc[1000 + j :], max_tokens=10)
        assert (a.text, a.nfe, a.stop_reason) == (b.text, b.nfe, b.stop_reason)
    assert cached.contexts.stats.partial >= 3
    c = cached.complete(doc, 1000, uri="file:///x.py", max_tokens=8)
    d = plain.complete(doc, 1000, max_tokens=8)
    assert (c.text, c.start, c.end, c.nfe) == (d.text, d.start, d.end, d.nfe) and c.nfe >= 1
    passes = list(cached.stream_complete(doc, 1000, uri="file:///x.py", max_tokens=8))
    assert passes[-1].final and passes[-1].text == c.text
    stream = cached.stream(doc[:900], doc[900:], uri="s", max_tokens=10, min_tokens=10)
    next(stream)
    assert ("uri", "s") not in cached.contexts  # the running request owns its cache...
    stream.close()
    assert ("uri", "s") in cached.contexts  # ...and gives it back when closed between two tokens
    a = cached.infill(doc[:900], doc[900:], uri="s", max_tokens=10)
    assert a.text == plain.infill(doc[:900], doc[900:], max_tokens=10).text
