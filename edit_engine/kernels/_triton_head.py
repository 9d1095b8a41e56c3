"""Triton fused linear head + commit statistics (twin: ``kernels.head.head_token_stats_ref``).

The canvas logits (B*C rows x V) are computed tile by tile in registers and reduced at once to the statistics of
``kernels._triton_commit`` (online log-sum-exp, index of the top logit); they are never written to memory.
For a large vocabulary that saves writing and re-reading B*C*V logits, against reading the V x D weight.

1. ``_head_split_kernel``: grid (row blocks, vocabulary splits). Each program multiplies BLOCK_M hidden rows by
   its slice of the weight, BLOCK_V columns at a time (K loop over D), applies the bans (one token id for every
   row; the pad id for the rows flagged in ``pad_ban``), and merges the tile's statistics into its running ones.
   Splitting the vocabulary keeps the GPU busy when B*C is small (one row block of 64 slots).
2. ``_head_combine_kernel``: per row, merges the splits in vocabulary order (so ties keep the lowest token id)
   and writes (token int64, its probability fp32).

Sampling (temperature > 0) needs every logit for the Gumbel noise, so it keeps the plain path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from edit_engine.kernels import _triton_commit
from edit_engine.kernels._triton_attention import _dot, f32_dot
from edit_engine.kernels._triton_commit import _INT_BIG, block_stats, finish_confidence, merge_stats
from edit_engine.kernels.rules import NO_BANS, HeadBans


@triton.jit
def _head_split_kernel(
    h_ptr, w_ptr, pad_ban_ptr, bias_ptr, part_f_ptr, part_i_ptr, M, V, D, stride_h, stride_w, v_per_split, ban_id,
    pad_id, rows_per_bias, stride_bias,
    HAS_PAD_BAN: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr, F32: tl.constexpr, BIG: tl.constexpr,
):
    pid_m = tl.program_id(0)
    split = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rm = rows < M
    neg = tl.full([BLOCK_M], float("-inf"), tl.float32)
    zero = tl.zeros([BLOCK_M], tl.float32)
    m, s, i1 = neg, zero, tl.zeros([BLOCK_M], tl.int32)
    if HAS_PAD_BAN:
        pb = tl.load(pad_ban_ptr + rows, mask=rm, other=0) != 0
    v_start = split * v_per_split
    v_end = tl.minimum(v_start + v_per_split, V)
    kk = tl.arange(0, BLOCK_K)
    for v0 in range(v_start, v_end, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        cm = cols < v_end
        acc = tl.zeros([BLOCK_M, BLOCK_V], tl.float32)
        for k0 in range(0, D, BLOCK_K):
            ks = k0 + kk
            km = ks < D
            a = tl.load(h_ptr + rows[:, None].to(tl.int64) * stride_h + ks[None, :],
                        mask=rm[:, None] & km[None, :], other=0.0)
            b = tl.load(w_ptr + cols[:, None].to(tl.int64) * stride_w + ks[None, :],
                        mask=cm[:, None] & km[None, :], other=0.0)
            acc += _dot(a, tl.trans(b), F32)
        if HAS_BIAS:  # row r's bias row is r // rows_per_bias (one per batch row; stride 0: one for all)
            brow = (rows // rows_per_bias).to(tl.int64) * stride_bias
            acc += tl.load(bias_ptr + brow[:, None] + cols[None, :], mask=rm[:, None] & cm[None, :],
                           other=0.0).to(tl.float32)
        cols2 = tl.zeros([BLOCK_M, BLOCK_V], tl.int32) + cols[None, :]
        dead = (cols2 >= v_end) | (cols2 == ban_id)
        if HAS_PAD_BAN:
            dead = dead | (pb[:, None] & (cols2 == pad_id))
        x = tl.where(dead, float("-inf"), acc)
        bm, bs, bi = block_stats(x, cols2, BIG)
        m, s, i1 = merge_stats(m, s, i1, bm, bs, bi)
    # Partials: 2 fp32 planes (m, s) and one int32 plane (i1), each (splits, M).
    base = split * M + rows
    plane = tl.num_programs(1) * M
    tl.store(part_f_ptr + base, m, mask=rm)
    tl.store(part_f_ptr + plane + base, s, mask=rm)
    tl.store(part_i_ptr + base, i1, mask=rm)


@triton.jit
def _head_combine_kernel(
    part_f_ptr, part_i_ptr, idx_ptr, score_ptr, M, n_splits,
    BLOCK_R: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rm = rows < M
    plane = n_splits * M
    neg = tl.full([BLOCK_R], float("-inf"), tl.float32)
    zero = tl.zeros([BLOCK_R], tl.float32)
    m, s, i1 = neg, zero, tl.zeros([BLOCK_R], tl.int32)
    for sp in range(0, n_splits):
        base = sp * M + rows
        bm = tl.load(part_f_ptr + base, mask=rm, other=float("-inf"))
        bs = tl.load(part_f_ptr + plane + base, mask=rm, other=0.0)
        bi = tl.load(part_i_ptr + base, mask=rm, other=0)
        m, s, i1 = merge_stats(m, s, i1, bm, bs, bi)
    score = finish_confidence(m, s, m)
    tl.store(idx_ptr + rows, i1.to(tl.int64), mask=rm)
    tl.store(score_ptr + rows, score, mask=rm)


def head_token_stats_triton(
    h: torch.Tensor, weight: torch.Tensor, bans: HeadBans = NO_BANS, num_splits: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """h (B, C, D), weight (V, D) -> (token (B, C) int64, its probability (B, C) fp32) of h @ weight.T
    (+ ``bans.bias``, (V,) or (B, V)) after ``bans``, fused."""
    ban_id, pad_id, pad_ban, bias = bans.ban_id, bans.pad_id, bans.pad_ban, bans.bias
    V, D = weight.shape
    if h.shape[-1] != D:
        raise ValueError(f"hidden states of width {h.shape[-1]} for a weight of shape {tuple(weight.shape)}")
    if (pad_ban is None) != (pad_id is None):
        raise ValueError("pad_id and pad_ban go together")
    shape = h.shape[:-1]
    rows = h.reshape(-1, D)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    M = rows.shape[0]
    idx = torch.empty(M, dtype=torch.int64, device=h.device)
    s = torch.empty(M, dtype=torch.float32, device=h.device)
    if M == 0:
        return idx.reshape(shape), s.reshape(shape)
    block_m = max(16, min(64, triton.next_power_of_2(M)))  # tl.dot needs >= 16 per dimension
    gpu = _triton_commit.gpu_sizes(h)  # else the interpreter's: fewer, larger tiles
    block_v = 64 if gpu else 128
    block_k = max(16, min(64 if gpu else 128, triton.next_power_of_2(D)))
    row_blocks = triton.cdiv(M, block_m)
    if num_splits is None:
        sms = torch.cuda.get_device_properties(h.device).multi_processor_count if h.is_cuda else 4  # CPU: a few
        num_splits = triton.cdiv(2 * sms, row_blocks)
    num_splits = max(1, min(num_splits, triton.cdiv(V, block_v)))
    v_per_split = triton.cdiv(triton.cdiv(V, num_splits), block_v) * block_v
    num_splits = triton.cdiv(V, v_per_split)
    part_f = torch.empty(2, num_splits, M, dtype=torch.float32, device=h.device)
    part_i = torch.empty(num_splits, M, dtype=torch.int32, device=h.device)
    ban = pad_ban.reshape(-1).to(torch.uint8).contiguous() if pad_ban is not None else idx
    if bias is not None:
        if bias.shape[-1] != V or bias.dim() not in (1, 2) or (bias.dim() == 2 and bias.shape[0] != shape[0]):
            raise ValueError(f"bias of shape {tuple(bias.shape)} for {V} tokens and {shape[0]} rows")
        bias_t = bias.to(device=h.device, dtype=torch.float32).contiguous()
        stride_bias = 0 if bias.dim() == 1 else V
        rows_per_bias = max(1, M // shape[0]) if bias.dim() == 2 else M
    else:
        bias_t, stride_bias, rows_per_bias = s, 0, 1
    _head_split_kernel[(row_blocks, num_splits)](
        rows, w, ban, bias_t, part_f, part_i, M, V, D, rows.stride(0), w.stride(0), v_per_split,
        -1 if ban_id is None else int(ban_id), -1 if pad_id is None else int(pad_id), rows_per_bias, stride_bias,
        HAS_PAD_BAN=pad_ban is not None, HAS_BIAS=bias is not None, BLOCK_M=block_m, BLOCK_V=block_v,
        BLOCK_K=block_k,
        F32=f32_dot(h.dtype), BIG=_INT_BIG,
    )
    block_r = min(128, triton.next_power_of_2(M))
    _head_combine_kernel[(triton.cdiv(M, block_r),)](
        part_f, part_i, idx, s, M, num_splits, BLOCK_R=block_r,
    )
    return idx.reshape(shape), s.reshape(shape)
