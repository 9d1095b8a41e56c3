"""The attention layout makes the context cache exact: cached passes equal a full recompute."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.model.network import (
    CANVAS,
    PREFIX,
    PRESETS,
    SUFFIX,
    DiffusionLM,
    layout_mask,
    layout_positions,
)


def _full(model: DiffusionLM, prefix: list[int], suffix: list[int], canvas: list[int]) -> torch.Tensor:
    tokens = torch.tensor([prefix + suffix + canvas])
    kind = torch.tensor([[PREFIX] * len(prefix) + [SUFFIX] * len(suffix) + [CANVAS] * len(canvas)],
                        dtype=torch.int8)
    with torch.no_grad():
        h = model(tokens, kind)
        return model.head(h[0, len(prefix) + len(suffix):])


@settings(max_examples=25, deadline=None)
@given(p=st.integers(0, 40), s=st.integers(0, 30), c=st.integers(1, 20), seed=st.integers(0, 1000))
def test_cached_canvas_logits_equal_full_recompute(tiny_model: DiffusionLM, p: int, s: int, c: int,
                                                   seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    v = tiny_model.cfg.vocab_size
    prefix = torch.randint(3, v, (p,), generator=g).tolist()
    suffix = torch.randint(3, v, (s,), generator=g).tolist()
    canvas = torch.randint(0, v, (c,), generator=g).tolist()
    cache = tiny_model.encode_context([prefix], [suffix], capacity=32)
    got = tiny_model.canvas_logits(torch.tensor([canvas]), cache)[0]
    want = _full(tiny_model, prefix, suffix, canvas)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4, msg="canvas logits (cached vs full)")


def test_context_does_not_depend_on_canvas(tiny_model: DiffusionLM) -> None:
    """Changing the canvas (content or length) leaves the context keys untouched."""
    cache = tiny_model.encode_context([[5, 6, 7, 8]], [[9, 10]], capacity=16)
    before = [k[:, :, : cache.ctx_len].clone() for k in cache.k]
    tiny_model.canvas_logits(torch.tensor([[1] * 4]), cache)
    tiny_model.canvas_logits(torch.tensor([[11] * 16]), cache)
    for b, k in zip(before, cache.k, strict=True):
        assert torch.equal(b, k[:, :, : cache.ctx_len])


def test_batched_contexts_match_single(tiny_model: DiffusionLM) -> None:
    pre = [[5, 6, 7, 8, 9], [10, 11]]
    suf = [[12], [13, 14, 15, 16]]
    canvas = torch.tensor([[1, 1, 20], [21, 1, 1]])
    batched = tiny_model.canvas_logits(canvas, tiny_model.encode_context(pre, suf, capacity=4))
    for r in range(2):
        single = tiny_model.canvas_logits(canvas[r : r + 1], tiny_model.encode_context([pre[r]], [suf[r]], 4))
        torch.testing.assert_close(batched[r], single[0], atol=2e-5, rtol=1e-4, msg=f"row {r}")


def test_layout_mask_rules() -> None:
    kind = torch.tensor([[0, PREFIX, PREFIX, SUFFIX, SUFFIX, CANVAS, CANVAS]], dtype=torch.int8)
    m = layout_mask(kind)[0, 0]
    assert not m[1, 2] and m[2, 1]  # prefix is causal
    assert not m[1, 3] and not m[1, 5]  # prefix sees no suffix, no canvas
    assert m[3, 4] and m[4, 3] and not m[3, 1] and not m[3, 5]  # suffix sees only suffix
    assert m[5, 1] and m[5, 4] and m[5, 6] and not m[5, 0]  # canvas sees everything present
    pos = layout_positions(kind, max_canvas=100)[0].tolist()
    assert pos[1:3] == [0, 1] and pos[5:7] == [2, 3] and pos[3:5] == [102, 103]


def test_presets_are_consistent() -> None:
    for name, cfg in PRESETS.items():
        assert cfg.d_model % cfg.n_heads == 0, name
        assert cfg.head_dim % 2 == 0, name


def test_a_config_with_wrong_types_or_sizes_is_a_one_line_error(tiny_checkpoint, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``config.json`` values of the wrong type, or a vocabulary no model has, are refused by the loader with one
    line naming the field (the CLI prints it and exits 2), never a traceback from inside torch."""
    import json
    import shutil

    import pytest

    from edit_engine.cli.main import main
    from edit_engine.model import checkpoint

    for change, field in (({"d_model": "256"}, "d_model"), ({"vocab_size": 10**12}, "vocab_size"),
                          ({"n_layers": True}, "n_layers")):
        d = tmp_path / field
        shutil.copytree(tiny_checkpoint, d)
        raw = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**raw, **change}))
        with pytest.raises(checkpoint.CheckpointError, match=field) as e:
            checkpoint.load(d)
        assert "\n" not in str(e.value)
    sample = tmp_path / "s.py"
    sample.write_text("x = \n")
    assert main(["infill", str(sample), "--line", "1", "--col", "5", "--model", str(tmp_path / "d_model")]) == 2
