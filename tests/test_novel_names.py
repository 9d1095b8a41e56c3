"""The novel-name penalty (sampler module doc, "Novel names"): which tokens it marks, that every sampler path
applies it (the fused head, the logits path; the batched scheduler's test is in test_serve_batching.py), and that
it is off where it should be."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine import kernels
from edit_engine.decoding.sampler import SamplerConfig, denoise
from edit_engine.engine import Engine
from edit_engine.kernels import head as khead
from edit_engine.model.network import DiffusionLM
from edit_engine.model.tokenizer import Tokenizer

DOC = "def total(numbers):\n    s = 0\n    for x in numbers:\n        s += x\n    return s\n"


def _single(tok: Tokenizer, text: str) -> int | None:
    ids = tok.encode(text)
    return ids[0] if len(ids) == 1 else None


def test_novelty_bias_marks_only_names_new_to_the_context(packaged_engine: Engine) -> None:
    eng, tok = packaged_engine, packaged_engine.tokenizer
    cfg = SamplerConfig(novel_penalty=3.0)
    p_ids, s_ids = tok.encode(DOC), tok.encode("\n")
    bias = eng.novelty_bias(p_ids, s_ids, "python", cfg)
    assert bias is not None and bias.shape == (eng.model.cfg.vocab_size,)
    assert set(bias.unique().tolist()) == {-3.0, 0.0}

    def at(text: str) -> float:
        i = _single(tok, text)
        assert i is not None, f"{text!r} is not one token of this tokenizer"
        return float(bias[i])

    assert at(" numbers") == 0.0  # in the context
    assert at("numbers") == 0.0  # the same word without its space: one word, seen
    assert at(" len") == 0.0 and at(" range") == 0.0 and at(" append") == 0.0  # common words of Python
    assert at(" return") == 0.0  # a keyword
    assert at("(") == 0.0 and at(" +=") == 0.0  # not names
    novel = [w for w in (" widget", " matrix", " buffer", " request", " parser") if _single(tok, w) is not None]
    assert novel, "no test word is one token"
    assert all(at(w) == -3.0 for w in novel)  # names the context never uses
    assert int((bias < 0).sum()) > 1000  # most of the vocabulary's names


def test_novelty_bias_is_off_without_a_penalty_or_a_word_list(packaged_engine: Engine) -> None:
    eng, tok = packaged_engine, packaged_engine.tokenizer
    ids = tok.encode(DOC)
    assert eng.novelty_bias(ids, [], "python", SamplerConfig()) is None  # penalty 0
    assert eng.novelty_bias(ids, [], "no-such-language", SamplerConfig(novel_penalty=2.0)) is None
    assert eng.novelty_bias(ids, [], "rust", SamplerConfig(novel_penalty=2.0)) is None  # no common_words listed
    with pytest.raises(ValueError, match="novel_penalty"):
        SamplerConfig(novel_penalty=-1.0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), rows=st.sampled_from([1, 3]), per_row=st.booleans())
def test_head_twin_with_bias_is_the_biased_logits(seed: int, rows: int, per_row: bool) -> None:
    """The fused head's twin adds the bias before the bans, per batch row when it is (B, V)."""
    g = torch.Generator().manual_seed(seed)
    h, w = torch.randn(rows, 5, 16, generator=g), torch.randn(40, 16, generator=g)
    bias = torch.randn((rows, 40) if per_row else (40,), generator=g) * 3
    ban = torch.rand(rows, 5, generator=g) < 0.5
    idx, s = khead.head_token_stats_ref(h, w, khead.HeadBans(1, 0, ban, bias))
    logits = h @ w.T + (bias.unsqueeze(1) if per_row else bias)
    logits[..., 1] = float("-inf")
    logits[..., 0].masked_fill_(ban, float("-inf"))
    want_idx, want_s = kernels.commit.token_stats_ref(logits)
    assert torch.equal(idx, want_idx)
    torch.testing.assert_close(s, want_s)


def test_denoise_never_commits_a_token_the_bias_rules_out(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> None:
    """A bias of -100 on the tokens a free run committed keeps every one of them out of the biased run, on the
    length pass (logits path) and the greedy passes after it (the fused head's path)."""
    tok = tiny_tokenizer
    cfg = SamplerConfig(initial_canvas=8, max_tokens=8, min_commit=2)

    def run(bias: torch.Tensor | None) -> list[int]:
        cache = tiny_model.encode_context([tok.encode("def f(x):\n")], [tok.encode("\n")], capacity=8)
        steps = list(denoise(tiny_model, cache, cfg, tok.pad_id, tok.mask_id, bias=bias))
        assert steps[-1].final
        return steps[-1].tokens.tolist()

    free = run(None)
    out = {t for t in free if t not in (tok.pad_id, tok.mask_id)}
    assert out, "the free run wrote only pads"
    bias = torch.zeros(tiny_model.cfg.vocab_size)
    bias[list(out)] = -100.0
    biased = run(bias)
    assert not out & set(biased), (free, biased)
