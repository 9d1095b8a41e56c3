"""Several holes per training row (edit_engine/train/windows.py): every hole's canvas sees exactly what a
single-hole row of it would, and the pieces decode back to the text they were cut from."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edit_engine.model.network import CANVAS, PRESETS, DiffusionLM, layout_mask, layout_positions
from edit_engine.model.tokenizer import Tokenizer
from edit_engine.train import data, loop
from edit_engine.train.windows import Window, collate_windows, make_window, window_mask

_chars = st.sampled_from(list("abcxyz_019 ():=+-.,'\"#\t") + ["\n", "\n", "    ", "é", "中", "😀", "ß"])
texts = st.lists(_chars, min_size=1, max_size=600).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts, seed=st.integers(0, 2**32 - 1), holes=st.integers(1, 6), span=st.integers(1, 64),
       max_prefix=st.integers(1, 48), max_suffix=st.integers(1, 24))
def test_window_pieces_decode_back(tiny_tokenizer: Tokenizer, text: str, seed: int, holes: int, span: int,
                                   max_prefix: int, max_suffix: int) -> None:
    w = make_window(tiny_tokenizer, text, random.Random(seed), max_prefix, max_suffix, holes, span,
                    spans=data.syntax_spans(text), max_hole=16)
    assert w is not None and 1 <= len(w.holes) <= holes
    assert len(w.prefix) <= max_prefix + 2 * span
    assert w.holes[-1].cut == len(w.prefix)
    dec = tiny_tokenizer.decode
    for h in w.holes:
        assert 0 <= h.start <= h.end <= len(text) and 0 <= h.cut <= len(w.prefix)
        # Each hole's prefix is the text right before its start, ending on a token boundary; its suffix the
        # text right after its end; its hole tokens the start of the hole (at most 16 + 1 tokens).
        assert text[: h.start].endswith(dec(w.prefix[: h.cut]))
        assert text[h.end :].startswith(dec(h.suffix)) and len(h.suffix) <= max_suffix
        assert len(h.hole) <= 17
        if len(h.hole) <= 16:
            assert dec(h.hole) == text[h.start : h.end]
    assert [h.start for h in w.holes] == sorted(h.start for h in w.holes)


def _window_batch(tok: Tokenizer, seed: int, rows: int, holes: int) -> tuple[list[Window], data.Batch]:
    rng = random.Random(seed)
    src = "\n".join(f"def f{i}(a, b):\n    x = a + {i} * b\n    return g(x, '{i}')\n" for i in range(40))
    ws = [w for w in (make_window(tok, src, rng, 24, 12, holes, 24, max_hole=16) for _ in range(rows)) if w]
    return ws, collate_windows(ws, tok, rng, PRESETS["tiny"].max_canvas, max_canvas=16)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_canvas_sees_what_its_own_row_would(tiny_tokenizer: Tokenizer, seed: int) -> None:
    """The hidden states of each hole's canvas in a window row equal those of a single-hole row holding only
    that hole's prefix, suffix and (identically masked) canvas: no hole reads another's slots or its own text."""
    torch.manual_seed(seed)
    model = DiffusionLM(PRESETS["tiny"]).eval()
    ws, b = _window_batch(tiny_tokenizer, seed, rows=3, holes=4)
    assert b.seg is not None and b.limit is not None and b.pos is not None
    with torch.no_grad():
        h = model(b.tokens, b.kind, window_mask(b.kind, b.seg, b.limit), b.pos)
    checked = 0
    for r, w in enumerate(ws):
        for i, hole in enumerate(w.holes):
            cols = ((b.seg[r] == i + 1) & (b.kind[r] == CANVAS)).nonzero().flatten()
            canvas = b.tokens[r, cols].tolist()
            pre = w.prefix[: hole.cut]
            toks = torch.tensor([pre + hole.suffix + canvas])
            kind = torch.tensor([[1] * len(pre) + [2] * len(hole.suffix) + [3] * len(canvas)], dtype=torch.int8)
            with torch.no_grad():
                single = model(toks, kind)[0, -len(canvas):]
            torch.testing.assert_close(h[r, cols], single, rtol=1e-4, atol=1e-5)
            checked += 1
    assert checked >= 6


def test_one_hole_is_the_single_hole_layout(tiny_tokenizer: Tokenizer) -> None:
    ws, b = _window_batch(tiny_tokenizer, 3, rows=1, holes=1)
    assert b.seg is not None and b.limit is not None and b.pos is not None
    assert torch.equal(window_mask(b.kind, b.seg, b.limit), layout_mask(b.kind))
    assert torch.equal(b.pos, layout_positions(b.kind, PRESETS["tiny"].max_canvas) * (b.kind != 0))


def test_window_config_is_checked() -> None:
    with pytest.raises(ValueError):
        loop.TrainConfig(out="x", holes_per_window=-1)
    with pytest.raises(ValueError, match="window-span"):
        loop.TrainConfig(out="x", window_span=0)
    assert loop.TrainConfig(out="x", holes_per_window=0).holes_per_window == loop.DEFAULT_HOLES  # 0: default
    with pytest.raises(ValueError):
        loop.TrainConfig(out="x", holes_per_window=2, objective="ar")
