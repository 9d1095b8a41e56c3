"""Invariants of the denoising loop, and the fast sampler against the plain reference sampler."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.model import DiffusionLM
from edit_engine.sampler import SamplerConfig, denoise, reference_denoise
from edit_engine.tokenizer import Tokenizer

CONTEXT = st.lists(st.integers(3, 511), max_size=24)


def _run(model: DiffusionLM, tok: Tokenizer, p: list[int], s: list[int], cfg: SamplerConfig, seed: int = 0):
    cache = model.encode_context([p], [s], capacity=cfg.max_tokens)
    return list(denoise(model, cache, cfg, tok.pad_id, tok.mask_id, seed))


@settings(max_examples=30, deadline=None)
@given(p=CONTEXT, s=CONTEXT, thr=st.floats(0.0, 1.5), temp=st.sampled_from([0.0, 0.7]),
       init=st.sampled_from([1, 4, 8]), mx=st.sampled_from([8, 16, 24]),
       score=st.sampled_from(["confidence", "margin", "entropy"]), seed=st.integers(0, 99))
def test_stream_invariants(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer, p, s, thr, temp, init, mx, score,
                           seed) -> None:
    cfg = SamplerConfig(threshold=thr, temperature=temp, initial_canvas=init, max_tokens=mx, score=score)
    steps = _run(tiny_model, tiny_tokenizer, p, s, cfg, seed)
    mask = tiny_tokenizer.mask_id
    assert steps and steps[-1].final and all(not x.final for x in steps[:-1])
    assert steps[-1].masked == 0 and steps[-1].stop_reason in ("complete", "length")
    assert [x.nfe for x in steps] == list(range(1, len(steps) + 1))  # one forward pass per pass
    for a, b in zip(steps, steps[1:], strict=False):
        assert b.masked <= a.masked, "undecided count rose"
        n = len(a.tokens)
        assert len(b.tokens) >= n
        committed = a.tokens != mask
        assert torch.equal(b.tokens[:n][committed], a.tokens[committed]), "a committed token was rewritten"
    assert mask not in steps[-1].tokens.tolist()
    assert len(steps[-1].tokens) <= mx


@settings(max_examples=20, deadline=None)
@given(p=st.lists(st.integers(3, 511), min_size=1, max_size=24), s=CONTEXT, init=st.sampled_from([2, 4, 8]),
       mx=st.sampled_from([8, 16]))
def test_fast_equals_reference_one_token_per_pass(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer, p, s,
                                                  init, mx) -> None:
    """Threshold > 1 and a ceiling of one: the cached sampler must reproduce the full-recompute oracle.

    In float64, so float noise cannot flip a near-tie. (With an empty context the canvas is symmetric enough
    for exact ties, which either order may break, so the prefix is never empty here.)"""
    m = tiny_model.double()
    try:
        cfg = SamplerConfig(threshold=2.0, max_commit=1, initial_canvas=init, max_tokens=mx)
        fast = _run(m, tiny_tokenizer, p, s, cfg)
        ref = list(reference_denoise(m, p, s, cfg, tiny_tokenizer.pad_id, tiny_tokenizer.mask_id))
        assert [x.tokens.tolist() for x in fast] == [x.tokens.tolist() for x in ref]
        assert [x.masked for x in fast] == [x.masked for x in ref]
        assert fast[-1].stop_reason == ref[-1].stop_reason
    finally:
        tiny_model.float()


def test_threshold_zero_commits_everything_in_one_pass(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> None:
    steps = _run(tiny_model, tiny_tokenizer, [5, 6], [7], SamplerConfig(threshold=0.0, initial_canvas=8,
                                                                      max_tokens=8))
    assert len(steps) == 1 and steps[0].final


def test_ceiling_limits_commits_per_pass(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> None:
    cfg = SamplerConfig(threshold=0.0, max_commit=2, initial_canvas=8, max_tokens=8, pad_rules=False)
    steps = _run(tiny_model, tiny_tokenizer, [5, 6], [7], cfg)
    assert len(steps) == 4
    assert [s.masked for s in steps] == [6, 4, 2, 0]


def test_pad_rules_keep_pads_at_the_tail(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> None:
    t = tiny_tokenizer
    # Bias the head toward pad so pads are committed, then check none precedes a real token.
    w = tiny_model.embed.weight
    saved = w.data[t.pad_id].clone()
    try:
        w.data[t.pad_id] *= 8
        for seed in range(5):
            cfg = SamplerConfig(threshold=0.5, initial_canvas=8, max_tokens=8, temperature=1.0)
            toks = _run(tiny_model, t, [5, 6, 7], [8], cfg, seed)[-1].tokens.tolist()
            if t.pad_id in toks:
                first = toks.index(t.pad_id)
                assert all(x == t.pad_id for x in toks[first:]), toks
    finally:
        w.data[t.pad_id] = saved


def test_init_canvas_keeps_decided_slots(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> None:
    t = tiny_tokenizer
    cfg = SamplerConfig(initial_canvas=6, max_tokens=6)
    cache = tiny_model.encode_context([[5, 6]], [[7]], capacity=6)
    init = torch.tensor([40, t.mask_id, 41, t.mask_id, t.mask_id, 42])
    last = list(denoise(tiny_model, cache, cfg, t.pad_id, t.mask_id, init=init))[-1]
    got = last.tokens.tolist()
    assert got[0] == 40 and got[2] == 41 and got[5] == 42 and t.mask_id not in got


def test_seeded_sampling_is_reproducible(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> None:
    cfg = SamplerConfig(temperature=1.0, initial_canvas=8, max_tokens=16)
    a = _run(tiny_model, tiny_tokenizer, [5, 6], [7], cfg, seed=3)[-1].tokens
    b = _run(tiny_model, tiny_tokenizer, [5, 6], [7], cfg, seed=3)[-1].tokens
    assert torch.equal(a, b)


def test_bad_config_rejected() -> None:
    import pytest

    for kw in ({"score": "vibes"}, {"min_commit": 0}, {"max_commit": 1, "min_commit": 2}, {"temperature": -1}):
        with pytest.raises(ValueError):
            SamplerConfig(**kw)  # type: ignore[arg-type]
