"""Triton canvas attention over a cached context, split over the keys (twin: ``canvas_attention_ref``).

A denoising pass has few queries (the C canvas slots, tens to hundreds) and many keys (the cached context plus
the canvas, thousands). One program per (batch, head, query block) would leave most SMs idle, so the keys are
split as in flash-decoding (Dao et al. 2023, "Flash-Decoding for long-context inference"):

1. ``_split_kernel``: grid (B*H, splits, query blocks). Each program runs the online-softmax attention of its
   query block over its slice of the keys and writes a partial output (normalised within the slice) and the
   slice's log-sum-exp. With one split it writes the final output directly.
2. ``_combine_kernel``: grid (B*H, query blocks). Weights each slice by exp(lse_slice - lse_total) and sums.

Grouped-query attention: query head h reads key/value head h // (H / Hk); nothing is repeated in memory.
Bytes moved (the floor): K and V once per query block, i.e. 2 * B * Hk * L * hd * sizeof(dtype) per block, plus q
and the output. Masked keys (``key_valid`` False) get score -inf; a slice with no valid key has lse -inf and
weight 0. Scale 1/sqrt(hd), as SDPA's default.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from edit_engine.kernels import _triton_commit


@triton.jit
def _dot(a, b, F32: tl.constexpr):
    """a @ b with an fp32 accumulator. F32: compute in exact fp32 (fp32 inputs, or the CPU interpreter, whose
    numpy matmul reads bf16 operands as raw uint16); else the native 16-bit tensor-core dot."""
    if F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _split_kernel(
    q_ptr, k_ptr, v_ptr, valid_ptr, o_ptr, lse_ptr,
    sq_b, sq_h, sq_c, sk_b, sk_h, sk_l, sv_b, sv_h, sv_l, sval_b,
    so_s, so_b, so_h, so_c,
    H, C, L, GROUP, keys_per_split, scale,
    HD: tl.constexpr, HAS_VALID: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, F32: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    split = tl.program_id(1)
    pid_c = tl.program_id(2)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    hk = h // GROUP
    cs = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    d = tl.arange(0, BLOCK_D)
    dm = d < HD
    cm = cs < C
    q = tl.load(q_ptr + b * sq_b + h * sq_h + cs[:, None] * sq_c + d[None, :],
                mask=cm[:, None] & dm[None, :], other=0.0)
    acc = tl.zeros([BLOCK_C, BLOCK_D], tl.float32)
    m_i = tl.full([BLOCK_C], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_C], tl.float32)
    start = split * keys_per_split
    end = tl.minimum(start + keys_per_split, L)
    k_base = k_ptr + b * sk_b + hk * sk_h
    v_base = v_ptr + b * sv_b + hk * sv_h
    for n0 in range(start, end, BLOCK_N):
        ns = n0 + tl.arange(0, BLOCK_N)
        keep = ns < end
        kv_mask = keep[:, None] & dm[None, :]
        k = tl.load(k_base + ns[:, None] * sk_l + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_base + ns[:, None] * sv_l + d[None, :], mask=kv_mask, other=0.0)
        if HAS_VALID:
            keep = keep & (tl.load(valid_ptr + b * sval_b + ns, mask=keep, other=0) != 0)
        s = _dot(q, tl.trans(k), F32) * scale  # (BLOCK_C, BLOCK_N) fp32
        s = tl.where(keep[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, F32)
        m_i = m_new
    has = l_i > 0.0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    o_rows = o_ptr + split * so_s + b * so_b + h * so_h + cs[:, None] * so_c + d[None, :]
    tl.store(o_rows, out.to(o_ptr.dtype.element_ty), mask=cm[:, None] & dm[None, :])
    lse = tl.where(has, m_i + tl.log(tl.where(has, l_i, 1.0)), float("-inf"))
    tl.store(lse_ptr + (split * tl.num_programs(0) + pid_bh) * C + cs, lse, mask=cm)


@triton.jit
def _combine_kernel(
    part_ptr, lse_ptr, o_ptr, n_splits, H, C,
    sp_s, sp_b, sp_h, sp_c, so_b, so_h, so_c, n_bh,
    HD: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    d = tl.arange(0, BLOCK_D)
    cm = cs < C
    mask2 = cm[:, None] & (d < HD)[None, :]
    top = tl.full([BLOCK_C], float("-inf"), tl.float32)
    for sp in range(0, n_splits):
        top = tl.maximum(top, tl.load(lse_ptr + (sp * n_bh + pid_bh) * C + cs, mask=cm, other=float("-inf")))
    top_safe = tl.where(top == float("-inf"), 0.0, top)
    acc = tl.zeros([BLOCK_C, BLOCK_D], tl.float32)
    den = tl.zeros([BLOCK_C], tl.float32)
    for sp in range(0, n_splits):
        lse = tl.load(lse_ptr + (sp * n_bh + pid_bh) * C + cs, mask=cm, other=float("-inf"))
        w = tl.exp(lse - top_safe)
        part = tl.load(part_ptr + sp * sp_s + b * sp_b + h * sp_h + cs[:, None] * sp_c + d[None, :],
                       mask=mask2, other=0.0)
        acc += w[:, None] * part
        den += w
    out = acc / tl.where(den > 0.0, den, 1.0)[:, None]
    tl.store(o_ptr + b * so_b + h * so_h + cs[:, None] * so_c + d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=mask2)


def f32_dot(dtype: torch.dtype) -> bool:
    """Whether ``_dot`` must compute in fp32: fp32 inputs, or running under the interpreter."""
    return dtype == torch.float32 or os.environ.get("TRITON_INTERPRET") == "1"


def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return 4  # the interpreter: a handful of splits exercises the combine without making tests slow


def canvas_attention_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_valid: torch.Tensor | None = None,
    num_splits: int | None = None,
) -> torch.Tensor:
    """q (B, H, C, hd), k/v (B, Hk, L, hd) (strided views allowed), key_valid (B, L) bool -> (B, H, C, hd)."""
    B, H, C, hd = q.shape
    Hk, L = k.shape[1], k.shape[2]
    if H % Hk or v.shape != k.shape or k.shape[0] != B or k.shape[3] != hd:
        raise ValueError(f"canvas attention shapes: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    if v.stride(-1) != 1:
        v = v.contiguous()
    out = torch.empty(B, H, C, hd, dtype=q.dtype, device=q.device)
    if B * H * C == 0:
        return out
    # tl.dot needs every block dimension >= 16 on the GPU.
    block_d = max(16, triton.next_power_of_2(hd))
    block_c = max(16, min(64, triton.next_power_of_2(C)))
    block_n = (64 if block_d <= 64 else 32) if _triton_commit.gpu_sizes(q) else 128  # interpreter: fewer, larger
    c_blocks = triton.cdiv(C, block_c)
    if num_splits is None:
        # Enough programs to fill the GPU twice over; each split keeps at least two key blocks.
        want = triton.cdiv(2 * _sm_count(q.device), B * H * c_blocks)
        num_splits = max(1, min(want, triton.cdiv(L, 2 * block_n)))
    num_splits = max(1, min(num_splits, max(1, L)))
    keys_per_split = triton.cdiv(triton.cdiv(max(L, 1), num_splits), block_n) * block_n
    num_splits = triton.cdiv(max(L, 1), keys_per_split)
    if key_valid is not None:
        valid = key_valid.view(torch.uint8) if key_valid.dtype == torch.bool else key_valid.to(torch.uint8)
        if valid.stride(-1) != 1:
            valid = valid.contiguous()
        sval_b = valid.stride(0)
    else:
        valid, sval_b = out, 0
    lse = torch.empty(num_splits, B * H, C, dtype=torch.float32, device=q.device)
    if num_splits == 1:
        part = out.unsqueeze(0)
    else:
        part = torch.empty(num_splits, B, H, C, hd, dtype=torch.float32, device=q.device)
    _split_kernel[(B * H, num_splits, c_blocks)](
        q, k, v, valid, part, lse,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), sval_b,
        part.stride(0), part.stride(1), part.stride(2), part.stride(3),
        H, C, L, H // Hk, keys_per_split, 1.0 / math.sqrt(hd),
        HD=hd, HAS_VALID=key_valid is not None, BLOCK_C=block_c, BLOCK_N=block_n, BLOCK_D=block_d,
        F32=f32_dot(q.dtype),
    )
    if num_splits > 1:
        _combine_kernel[(B * H, c_blocks)](
            part, lse, out, num_splits, H, C,
            part.stride(0), part.stride(1), part.stride(2), part.stride(3),
            out.stride(0), out.stride(1), out.stride(2), B * H,
            HD=hd, BLOCK_C=block_c, BLOCK_D=block_d,
        )
    return out
