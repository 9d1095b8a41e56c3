"""Canvas attention over a cached context.

q: (B, H, C, hd) canvas queries; k, v: (B, Hk, L, hd) where L = context length + C (the cached context keys
followed by the canvas keys); ``key_valid``: optional (B, L) bool, False for padded context slots.
Every canvas query attends to every valid key (the canvas sees the whole context and the whole canvas).
Grouped-query attention when Hk < H.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from edit_engine.kernels.dispatch import use_triton


def canvas_attention_ref(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_valid: torch.Tensor | None = None
) -> torch.Tensor:
    """PyTorch twin (scaled-dot-product attention). Returns (B, H, C, hd)."""
    h, hk = q.shape[1], k.shape[1]
    if hk != h:
        k = k.repeat_interleave(h // hk, dim=1)
        v = v.repeat_interleave(h // hk, dim=1)
    mask = None if key_valid is None else key_valid[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def canvas_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_valid: torch.Tensor | None = None
) -> torch.Tensor:
    # The first GPU run of kernels.bench (H200, 2026-11-30; kernels/BENCHMARKS.md) measured this kernel 2.3-7x
    # faster than the twin's SDPA at every canvas/context shape, within bf16 rounding of it: so under "auto" it
    # runs on CUDA like the other kernels (the twin elsewhere, and wherever autograd needs a gradient).
    if use_triton(q, k, v):
        from edit_engine.kernels._triton_attention import canvas_attention_triton

        return canvas_attention_triton(q, k, v, key_valid)
    return canvas_attention_ref(q, k, v, key_valid)
