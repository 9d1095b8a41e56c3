"""Triton rotary embedding of q and k in one launch (twin: ``kernels.rotary.apply_rotary_ref``).

One program per token (b, t) on the GPU (BLOCK_T tokens under the interpreter): it rotates every q head and
every k head of its tokens, reading cos/sin once.
Rotate-half layout: (x1, x2) -> (x1*cos - x2*sin, x2*cos + x1*sin), computed in fp32, rounded once at the store.
q and k may be strided views (the model's are slices of one fused qkv projection); outputs are contiguous,
as the twin's are. Bytes: read q, k, cos, sin; write q, k.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from edit_engine.kernels import _triton_commit


@triton.jit
def _rotate_heads(x_ptr, o_ptr, sx_b, sx_t, sx_h, b, t, tok_ok, T, n_heads, c, s,
                  HALF: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """Rotate every head of the tokens (b, t) (BLOCK_T,): one (BLOCK_T, BLOCK_HALF) tile per head and half."""
    j = tl.arange(0, BLOCK_HALF)
    ok = tok_ok[:, None] & (j < HALF)[None, :]
    ty = o_ptr.dtype.element_ty
    for hh in range(0, n_heads):
        src = x_ptr + (b * sx_b + t * sx_t + hh * sx_h)[:, None] + j[None, :]
        x1 = tl.load(src, mask=ok, other=0.0).to(tl.float32)
        x2 = tl.load(src + HALF, mask=ok, other=0.0).to(tl.float32)
        dst = o_ptr + ((b * T + t) * n_heads + hh)[:, None] * (2 * HALF) + j[None, :]
        tl.store(dst, (x1 * c - x2 * s).to(ty), mask=ok)
        tl.store(dst + HALF, (x2 * c + x1 * s).to(ty), mask=ok)


@triton.jit
def _rotary_kernel(
    q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr, n_tok, T, HQ, HK,
    sq_b, sq_t, sq_h, sk_b, sk_t, sk_h, sc_b, sc_t,
    HALF: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_HALF: tl.constexpr,
):
    tok = (tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)).to(tl.int64)
    tok_ok = tok < n_tok
    b = tok // T
    t = tok % T
    j = tl.arange(0, BLOCK_HALF)
    ok = tok_ok[:, None] & (j < HALF)[None, :]
    cs = (b * sc_b + t * sc_t)[:, None] + j[None, :]
    c = tl.load(cos_ptr + cs, mask=ok, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + cs, mask=ok, other=0.0).to(tl.float32)
    _rotate_heads(q_ptr, qo_ptr, sq_b, sq_t, sq_h, b, t, tok_ok, T, HQ, c, s, HALF, BLOCK_HALF)
    _rotate_heads(k_ptr, ko_ptr, sk_b, sk_t, sk_h, b, t, tok_ok, T, HK, c, s, HALF, BLOCK_HALF)


def _last_dim_unit(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def apply_rotary_triton(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """q (B, T, Hq, hd), k (B, T, Hk, hd), cos/sin (B, T, hd/2) (broadcastable) -> new contiguous (q, k)."""
    B, T, HQ, hd = q.shape
    HK = k.shape[2]
    if hd % 2 or k.shape[:2] != (B, T) or k.shape[3] != hd:
        raise ValueError(f"rotary needs q (B, T, Hq, hd) and k (B, T, Hk, hd) with even hd; got {q.shape}, {k.shape}")
    half = hd // 2
    q, k = _last_dim_unit(q), _last_dim_unit(k)
    cos = _last_dim_unit(cos.expand(B, T, half))
    sin = _last_dim_unit(sin.expand(B, T, half))
    if cos.stride() != sin.stride():
        cos, sin = cos.contiguous(), sin.contiguous()
    qo = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    ko = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if B * T:
        block_t = _triton_commit.rows_per_program(q, B * T, 1)
        _rotary_kernel[(triton.cdiv(B * T, block_t),)](
            q, k, cos, sin, qo, ko, B * T, T, HQ, HK,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            cos.stride(0), cos.stride(1),
            HALF=half, BLOCK_T=block_t, BLOCK_HALF=triton.next_power_of_2(half),
        )
    return qo, ko
