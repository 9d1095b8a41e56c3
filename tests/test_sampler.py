"""Invariants of the denoising loop, and the fast sampler against the plain reference sampler."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.decoding.sampler import (
    SamplerConfig,
    decide_length,
    denoise,
    line_decided,
    newline_tokens,
    reference_denoise,
)
from edit_engine.model.network import DiffusionLM
from edit_engine.model.tokenizer import Tokenizer

CONTEXT = st.lists(st.integers(3, 511), max_size=24)


def _run(model: DiffusionLM, tok: Tokenizer, p: list[int], s: list[int], cfg: SamplerConfig, seed: int = 0):
    cache = model.encode_context([p], [s], capacity=cfg.max_tokens)
    return list(denoise(model, cache, cfg, tok.pad_id, tok.mask_id, seed))


@settings(max_examples=30, deadline=None)
@given(p=CONTEXT, s=CONTEXT, thr=st.floats(0.0, 1.5), temp=st.sampled_from([0.0, 0.7]),
       init=st.sampled_from([1, 4, 8]), mx=st.sampled_from([8, 16, 24]), seed=st.integers(0, 99))
def test_stream_invariants(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer, p, s, thr, temp, init, mx,
                           seed) -> None:
    cfg = SamplerConfig(threshold=thr, temperature=temp, initial_canvas=init, max_tokens=mx)
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


def _line_end(model: DiffusionLM, tok: Tokenizer) -> torch.Tensor:
    table = newline_tokens(tok.decode, tok.vocab_size)
    return torch.cat([table, torch.zeros(model.cfg.vocab_size - len(table), dtype=torch.bool)])


SOURCE = __import__("inspect").getsource(__import__("textwrap"))


@settings(max_examples=30, deadline=None)
@given(cut=st.integers(200, len(SOURCE) - 200), gap=st.integers(0, 120), thr=st.sampled_from([0.5, 0.9, 2.0]),
       temp=st.sampled_from([0.0, 0.7]), init=st.sampled_from([4, 8, 16]), mx=st.sampled_from([16, 24]),
       seed=st.integers(0, 99))
def test_line_stop_gives_the_full_runs_first_line(packaged_engine, cut, gap, thr, temp, init, mx, seed) -> None:
    """The line stop ends the run early, and only that: its passes are the full run's, and the first line of
    the fill is the full run's first line. (The packaged model: real code in, newlines out.)"""
    model, tok = packaged_engine.model, packaged_engine.tokenizer
    p, s = tok.encode(SOURCE[:cut])[-200:], tok.encode(SOURCE[cut + gap :])[:60]
    cfg = SamplerConfig(threshold=thr, temperature=temp, initial_canvas=init, max_tokens=mx)
    full = _run(model, tok, p, s, cfg, seed)
    cache = model.encode_context([p], [s], capacity=mx)
    short = list(denoise(model, cache, cfg.with_(line_stop=True), tok.pad_id, tok.mask_id, seed,
                         line_end=_line_end(model, tok)))
    k = len(short)
    assert k <= len(full) and short[-1].final and not any(x.final for x in short[:-1])
    assert [x.tokens.tolist() for x in short] == [x.tokens.tolist() for x in full[:k]]
    assert [x.nfe for x in short] == [x.nfe for x in full[:k]]
    last = tok.decode(short[-1].tokens.tolist())
    if short[-1].stop_reason == "line":
        assert "\n" in last
        assert last.split("\n")[0] == tok.decode(full[-1].tokens.tolist()).split("\n")[0]
    else:  # no line was decided before the fill ended: the same run
        assert k == len(full) and short[-1].stop_reason == full[-1].stop_reason


def test_line_stop_happens(packaged_engine) -> None:
    """The property above is not vacuous: on real code the packaged model's fills do stop at a line."""
    model, tok = packaged_engine.model, packaged_engine.tokenizer
    reasons, saved = [], 0
    for cut in range(1000, len(SOURCE) - 500, 997):
        p, s = tok.encode(SOURCE[:cut])[-200:], tok.encode(SOURCE[cut + 40 :])[:60]
        cfg = SamplerConfig(max_tokens=24)
        full = _run(model, tok, p, s, cfg)
        cache = model.encode_context([p], [s], capacity=24)
        short = list(denoise(model, cache, cfg.with_(line_stop=True), tok.pad_id, tok.mask_id,
                             line_end=_line_end(model, tok)))
        reasons.append(short[-1].stop_reason)
        saved += full[-1].nfe - short[-1].nfe
    assert reasons.count("line") >= 3, reasons
    assert saved > 0


def test_line_decided_needs_every_slot_before_the_newline() -> None:
    nl = torch.tensor([False, False, True, False])  # token 2 holds a newline; 3 is the mask
    canvas = torch.tensor([[0, 3, 2, 1], [0, 1, 2, 3], [1, 1, 1, 1]])
    masked = canvas == 3
    assert line_decided(canvas, masked, nl).tolist() == [0, 1, 0]


def test_line_stop_needs_its_table(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> None:
    import pytest

    cache = tiny_model.encode_context([[5, 6]], [[7]], capacity=8)
    with pytest.raises(ValueError, match="line_end"):
        next(denoise(tiny_model, cache, SamplerConfig(line_stop=True, max_tokens=8), tiny_tokenizer.pad_id,
                     tiny_tokenizer.mask_id))


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
    cfg = SamplerConfig(threshold=0.0, max_commit=2, initial_canvas=8, max_tokens=8, min_tokens=8)
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

    for kw in ({"min_commit": 0}, {"max_commit": 1, "min_commit": 2}, {"temperature": -1}, {"temperature": 2.5},
               {"floor_ramp": -1}, {"threshold": float("nan")}, {"pad_threshold": 1.5}, {"line_stop": 1},
               {"min_commit": 2.0}, {"novel_penalty": 101}, {"min_tokens": 9, "max_tokens": 8}):
        with pytest.raises(ValueError):
            SamplerConfig(**kw)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        SamplerConfig(score="confidence")  # type: ignore[call-arg]  (a rejected setting, removed)


def test_each_setting_is_checked_and_named_by_its_one_definition() -> None:
    """``SETTINGS`` has exactly the config's fields; the CLI flag and the camelCase key derive from the name;
    a command-line value is parsed and checked by the same rule as the config."""
    import dataclasses

    import pytest

    from edit_engine.decoding.sampler import SETTINGS

    assert list(SETTINGS) == [f.name for f in dataclasses.fields(SamplerConfig)]
    s = SETTINGS["pad_threshold"]
    assert (s.flag, s.key) == ("--pad-threshold", "padThreshold")
    assert s.parse("0.25") == 0.25
    for bad in ("x", "1.5", "nan"):
        with pytest.raises(ValueError):
            s.parse(bad)
    assert SETTINGS["spread"].check(True) == 1 and SETTINGS["min_commit"].parse("3") == 3


@settings(max_examples=200, deadline=None)
@given(c=st.integers(1, 40), levels=st.integers(1, 6), threshold=st.sampled_from([0.0, 0.5, 0.9, 2.0]),
       floor=st.integers(1, 8), seed=st.integers(0, 10_000), radius=st.integers(1, 4))
def test_spread_floor_rule(c: int, levels: int, threshold: float, floor: int, seed: int, radius: int) -> None:
    """The spread floor (SamplerConfig.spread = R): every slot over the threshold still commits, the best masked
    slot always does (so denoising always progresses), no two of the floor's own picks are within R of each
    other, and it picks at most ``floor``, until no more than ``floor`` slots are masked, when it takes them all;
    ties included (few score levels)."""
    from edit_engine.kernels.commit import commit_mask_ref, spread_eligible
    from edit_engine.kernels.rules import CommitRule

    g = torch.Generator().manual_seed(seed)
    s = torch.randint(0, levels, (2, c), generator=g).float() / levels
    masked = torch.rand(2, c, generator=g) < 0.7
    sc, commit = commit_mask_ref(s, masked, CommitRule(threshold, floor, spread=radius))
    _, plain = commit_mask_ref(s, masked, CommitRule(threshold, floor))
    assert not bool((commit & ~masked).any())
    assert bool((commit | ~(masked & (s >= threshold))).all()), "a slot over the threshold was left"
    for r in range(2):
        if masked[r].any():
            best = int(torch.argmax(sc[r]))  # first index of the best masked score
            assert bool(commit[r, best]) and bool(plain[r, best])
    # The endgame: a row with no more than ``floor`` masked slots commits them all, as the plain floor does.
    few = masked.sum(-1) <= floor
    assert torch.equal(commit[few], masked[few]) and torch.equal(commit[few], plain[few])
    picks = commit & (sc < threshold) & ~few[:, None]
    for d in range(1, min(radius, c - 1) + 1):
        assert not bool((picks[:, d:] & picks[:, :-d]).any()), f"the floor took two slots {d} apart"
    assert bool((picks.sum(-1) <= floor).all())
    assert not bool((picks & ~spread_eligible(sc, masked, radius)).any())


def test_spread_floor_changes_what_a_model_commits(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> None:
    """Through the real sampler: with a floor of 4 on a fresh canvas, plain commits 4 slots in the first pass and
    spread commits only non-neighbouring ones."""
    tok = tiny_tokenizer
    pre, suf = tok.encode("def f(x):\n    return "), tok.encode("\n")
    firsts = {}
    for spread in (False, True):
        cfg = SamplerConfig(threshold=2.0, min_commit=4, initial_canvas=12, max_tokens=12,
                            min_tokens=12, spread=spread)
        firsts[spread] = _run(tiny_model, tok, pre, suf, cfg)[0].tokens != tok.mask_id
    assert int(firsts[False].sum()) == 4
    assert bool((firsts[False][1:] & firsts[False][:-1]).any()), "plain picks no neighbours here: test shows nothing"
    picked = firsts[True]
    assert 1 <= int(picked.sum()) <= 4 and not bool((picked[1:] & picked[:-1]).any())


def test_spread_setting_values() -> None:
    """``spread`` is a radius; JSON's true/false mean 1/0; anything else is refused with a clear error."""
    import pytest

    assert SamplerConfig(spread=True).spread == 1 and SamplerConfig(spread=False).spread == 0
    assert SamplerConfig(spread=3).spread == 3
    for bad in ("false", -1, 9, 1.5):
        with pytest.raises(ValueError, match="spread"):
            SamplerConfig(spread=bad)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), c=st.integers(2, 40), lo=st.integers(0, 5),
       t_low=st.floats(0.01, 0.99), t_gap=st.floats(0.0, 0.98))
def test_a_lower_pad_threshold_never_sets_a_later_end(seed: int, c: int, lo: int, t_low: float,
                                                       t_gap: float) -> None:
    """The length rule ends the canvas at the first open slot whose pad probability reaches T, so a lower T
    (``--pad-threshold``, sampler.json) sets the end at the same slot or earlier, never later. (The fill itself
    can come out longer: where no slot reaches a high T nothing is decided and the model may end the line with
    a newline early, while a lower T's end forbids pads before it; docs/results-archive-2026-12-05.md, "The length
    threshold".)"""
    g = torch.Generator().manual_seed(seed)
    vocab, pad_id, mask_id = 12, 0, 1
    logits = torch.randn(1, c, vocab, generator=g) * 3
    ends = []
    for t in (t_low, min(1.0, t_low + t_gap)):
        canvas = torch.full((1, c), mask_id)
        masked = torch.ones(1, c, dtype=torch.bool)
        ban = torch.zeros(1, c, dtype=torch.bool)
        decide_length(logits.clone(), canvas, masked, ban, min(lo, c - 1), SamplerConfig(pad_threshold=t),
                      pad_id, mask_id)
        pads = (canvas[0] == pad_id).nonzero()
        ends.append(int(pads[0]) if len(pads) else c)
        assert bool((canvas[0, ends[-1]:] == pad_id).all())  # everything from the end on is a pad
    assert ends[0] <= ends[1]


def test_floor_at_ramps_by_doubling_up_to_min_commit() -> None:
    assert [SamplerConfig(min_commit=8, floor_ramp=1).floor_at(t) for t in range(6)] == [1, 2, 4, 8, 8, 8]
    assert [SamplerConfig(min_commit=6, floor_ramp=1).floor_at(t) for t in range(5)] == [1, 2, 4, 6, 6]
    assert [SamplerConfig(min_commit=6, floor_ramp=3).floor_at(t) for t in range(3)] == [3, 6, 6]
    assert [SamplerConfig(min_commit=6).floor_at(t) for t in range(3)] == [6, 6, 6]  # off
    assert SamplerConfig(min_commit=2, floor_ramp=5).floor_at(0) == 2  # a ramp above the floor is the floor
    assert SamplerConfig(min_commit=8, floor_ramp=1).floor_at(10**6) == 8  # no overflow on long runs


@settings(max_examples=40, deadline=None)
@given(p=CONTEXT, s=CONTEXT, floor=st.integers(1, 12), ramp=st.integers(0, 12), size=st.sampled_from([4, 9, 16]),
       spread=st.sampled_from([0, 1]))
def test_floor_ramp_sets_how_many_each_pass_commits(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer, p, s,
                                                    floor: int, ramp: int, size: int, spread: int) -> None:
    """With only the floor committing (threshold above 1) and pads banned, pass t of a fresh canvas commits
    exactly ``floor_at(t)`` slots (all that are left once no more than that are masked); with the ramp off, the
    run is exactly the plain floor's. The spread floor may commit fewer (never more) in a pass while more than the
    floor are masked."""
    cfg = SamplerConfig(threshold=2.0, min_commit=floor, floor_ramp=ramp, initial_canvas=size, max_tokens=size,
                        min_tokens=size, pad_threshold=0.0, spread=spread)
    steps = _run(tiny_model, tiny_tokenizer, p, s, cfg)
    left = [size] + [st_.masked for st_ in steps]
    done = [a - b for a, b in zip(left, left[1:], strict=False)]
    for t, n in enumerate(done):
        want = min(left[t], cfg.floor_at(t))
        assert n == want if (spread == 0 or left[t] <= cfg.floor_at(t)) else 1 <= n <= want, (t, done)
    assert steps[-1].final and steps[-1].masked == 0
    if ramp == 0:
        plain = _run(tiny_model, tiny_tokenizer, p, s, cfg.with_(floor_ramp=0))
        assert [x.tokens.tolist() for x in steps] == [x.tokens.tolist() for x in plain]


def test_floor_ramp_skips_a_given_canvas(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> None:
    """A canvas given to the run (repair, rewrite) is not fresh: its first pass commits the full floor."""
    t = tiny_tokenizer
    cfg = SamplerConfig(threshold=2.0, min_commit=4, floor_ramp=1, initial_canvas=8, max_tokens=8, min_tokens=8,
                        pad_threshold=0.0)
    cache = tiny_model.encode_context([[5, 6]], [[7]], capacity=8)
    init = torch.tensor([40] + [t.mask_id] * 7)
    first = next(iter(denoise(tiny_model, cache, cfg, t.pad_id, t.mask_id, init=init)))
    assert first.masked == 3  # 7 masked, the floor of 4 committed in one pass


def test_keyword_tokens_match_whole_words_after_blanks() -> None:
    from edit_engine.decoding.sampler import keyword_tokens

    vocab = [" for", "for", "format", " fo", "\tif", " if(", " else:", " elsewhere", "x", "  while", "#for", ""]
    table = keyword_tokens(lambda ids: vocab[ids[0]], len(vocab), ("for", "if", "else", "while"))
    assert [vocab[i] for i in table.nonzero().flatten().tolist()] == [" for", "for", "\tif", " if(", " else:",
                                                                       "  while"]
    assert not keyword_tokens(lambda ids: vocab[ids[0]], len(vocab), ()).any()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), c=st.integers(1, 12), threshold=st.sampled_from([0.0, 0.5, 2.0]),
       floor=st.integers(1, 4), allowed=st.lists(st.integers(2, 15), min_size=1, max_size=4, unique=True))
def test_commit_pass_keeps_slot_0_inside_first(seed: int, c: int, threshold: float, floor: int,
                                               allowed: list[int]) -> None:
    """``first``: whatever the logits, slot 0 is committed to one of the allowed tokens (or stays masked); every
    other slot committed in both runs holds the token it holds without the constraint (which slots the floor
    takes may differ: slot 0's score changes)."""
    from edit_engine.decoding.sampler import commit_pass

    pad, mask, v = 0, 1, 16
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn((1, c, v), generator=g) * 4
    logits[..., pad] = float("-inf")  # no pads, so nothing is decided by pad propagation
    first = torch.zeros(v, dtype=torch.bool)
    first[allowed] = True
    cfg = SamplerConfig(threshold=threshold, min_commit=floor)
    runs = []
    for f in (first, None):
        canvas = torch.full((1, c), mask)
        masked = torch.ones((1, c), dtype=torch.bool)
        commit_pass(logits.clone(), canvas, masked, cfg, pad, mask, first=f)
        runs.append(canvas)
    got, free = runs
    assert got[0, 0] == mask or bool(first[got[0, 0]])
    others = (got[0, 1:] != mask) & (free[0, 1:] != mask)
    assert torch.equal(got[0, 1:][others], free[0, 1:][others])


def test_denoise_with_first_starts_with_an_allowed_token(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> None:
    tok = tiny_tokenizer
    first = torch.zeros(tiny_model.cfg.vocab_size, dtype=torch.bool)
    first[[7, 11]] = True
    cfg = SamplerConfig(initial_canvas=6, max_tokens=6, min_commit=2)
    cache = tiny_model.encode_context([tok.encode("def f(x):\n")], [tok.encode("\n")], capacity=6)
    steps = list(denoise(tiny_model, cache, cfg, tok.pad_id, tok.mask_id, first=first))
    assert steps[-1].final and int(steps[-1].tokens[0]) in (7, 11)
    cache = tiny_model.encode_context([tok.encode("def f(x):\n")], [tok.encode("\n")], capacity=6)
    free = list(denoise(tiny_model, cache, cfg, tok.pad_id, tok.mask_id))
    assert int(free[-1].tokens[0]) not in (7, 11)  # the constraint, not the model, put it there


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), init=st.sampled_from([1, 3, 8]), mx=st.sampled_from([4, 8, 13]),
       floor=st.integers(1, 4), ramp=st.integers(0, 2), thr=st.sampled_from([0.3, 0.9, 2.0]),
       pad_bias=st.floats(-4.0, 4.0), line=st.booleans())
def test_the_denoise_state_machine_on_any_logits(seed: int, init: int, mx: int, floor: int, ramp: int, thr: float,
                                                  pad_bias: float, line: bool) -> None:
    """``DenoiseState`` alone, stepped on random logits (no model), as the library loop and the batching
    scheduler step it: masks only go away, a committed slot never changes, every pass commits at least one slot
    until it stops, the canvas grows only when full and never past ``max_tokens``, pads stay at the tail, and
    the last Step is final with a stop reason that matches the canvas."""
    from edit_engine.decoding.sampler import DenoiseState

    vocab, pad, mask, nl = 11, 0, 1, 2
    g = torch.Generator().manual_seed(seed)
    cfg = SamplerConfig(threshold=thr, min_commit=floor, floor_ramp=ramp, initial_canvas=min(init, mx),
                        max_tokens=mx, line_stop=line)
    line_end = torch.zeros(vocab, dtype=torch.bool)
    line_end[nl] = True
    st_ = DenoiseState(cfg, pad, mask, line_end=line_end)
    steps = []
    for _ in range(4 * mx + 4):
        before, was_masked = st_.canvas.clone(), st_.masked.clone()
        logits = torch.randn(1, st_.size, vocab, generator=g) * 3
        logits[..., pad] += pad_bias
        st_.step(logits)
        kept = ~was_masked
        assert torch.equal(st_.canvas[kept], before[kept]), "a committed slot changed"
        assert not bool((st_.masked & ~was_masked).any()), "a slot was masked again"
        assert int((was_masked & ~st_.masked).sum()) >= 1, "a pass committed nothing"
        size = st_.size
        step = st_.advance(*st_.stats().tolist())
        steps.append(step)
        toks = step.tokens.tolist()
        if pad in toks:
            first = toks.index(pad)
            assert all(t in (pad, mask) for t in toks[first:]), toks
        if step.final:
            break
        assert st_.size in (size, min(mx, 2 * size)) and st_.size <= mx
    last = steps[-1]
    assert last.final and [s.index for s in steps] == list(range(len(steps)))
    assert [s.nfe for s in steps] == list(range(1, len(steps) + 1))
    toks = last.tokens.tolist()
    if last.stop_reason == "line":
        cut = next(i for i, t in enumerate(toks) if t == nl)
        assert mask not in toks[: cut + 1]
    else:
        assert mask not in toks and last.masked == 0
        assert last.stop_reason == ("complete" if pad in toks else "length")
        assert last.stop_reason == "complete" or len(toks) == mx
