"""Triton kernels of the fused commit step (twin: ``kernels.commit.commit_step_ref``).

Two launches instead of the twin's dozen:

1. ``_row_stats_kernel``: one program per canvas row streams its V logits once, in ``BLOCK_V`` chunks, keeping an
   online log-sum-exp (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax") and the lowest
   index of the top logit. Probabilities are never materialised. Writes the chosen token and its probability
   (the score, fp32) per row.
2. ``_commit_kernel``: one program per batch row ranks its C scores (ties: lower index first, as the twin's
   stable sort), applies the threshold / ``min_commit`` / ``max_commit`` rule and writes tokens, mask, the score
   with -1 at unmasked slots, and the committed mask.

The second half is also reached from ``kernels.head`` (fused linear head), which produces the same (token, score)
pair without materialising the logits. Bytes moved: B*C*V*sizeof(logits) read once; everything else is O(B*C).

Shared ``@triton.jit`` helpers (``block_stats``, ``merge_stats``, ``finish_confidence``) are used by the head kernels.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from edit_engine.kernels.rules import CommitRule, commit_step_of

_INT_BIG = 2**31 - 1


def gpu_sizes(t: torch.Tensor) -> bool:
    """Whether launchers pick the GPU's block sizes (CUDA tensors) or the interpreter's: few, large programs,
    because the interpreter runs programs one after another in Python and costs per program, not per element.
    The tests patch this to run the GPU sizes under the interpreter."""
    return t.is_cuda


def rows_per_program(t: torch.Tensor, n_rows: int, on_gpu: int) -> int:
    """Rows one program handles: ``on_gpu`` with the GPU sizes, else up to 64 at once."""
    if gpu_sizes(t):
        return on_gpu
    return min(64, triton.next_power_of_2(max(1, n_rows)))


@triton.jit
def block_stats(x, cols, BIG: tl.constexpr):
    """Per-row statistics of a (R, N) fp32 tile whose column indices are ``cols`` (R, N) (padding = -inf).

    Returns (max m, sum exp(x - m), lowest index of the max), each (R,).
    """
    m = tl.max(x, axis=1)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    live = x != float("-inf")
    xd = tl.where(live, x - m_safe[:, None], 0.0)  # banned / padding lanes: 0, so exp never sees -inf - -inf
    s = tl.sum(tl.where(live, tl.exp(xd), 0.0), axis=1)
    i1 = tl.min(tl.where(x == m[:, None], cols, BIG), axis=1)
    return m, s, i1


@triton.jit
def merge_stats(ma, sa, ia, mb, sb, ib):
    """Merge two partial statistics; ``a`` covers lower vocabulary indices than ``b`` (ties keep ``a``)."""
    m = tl.maximum(ma, mb)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    ea = tl.where(ma == float("-inf"), 0.0, tl.exp(tl.where(ma == float("-inf"), 0.0, ma - m_safe)))
    eb = tl.where(mb == float("-inf"), 0.0, tl.exp(tl.where(mb == float("-inf"), 0.0, mb - m_safe)))
    s = sa * ea + sb * eb
    i1 = tl.where(mb > ma, ib, ia)
    return m, s, i1


@triton.jit
def finish_confidence(m, s, vc):
    """The probability (in [0, 1]) of the token whose logit is ``vc``, from merged statistics (m, s)."""
    s = tl.where(s > 0.0, s, 1.0)  # only rows past the end (never stored) or wholly banned rows have s = 0
    lse = tl.where(m == float("-inf"), 0.0, m) + tl.log(s)
    return tl.exp(vc - lse)


@triton.jit
def _row_stats_kernel(
    logits_ptr, stride_row, n_rows, V, choice_ptr, idx_ptr, score_ptr,
    HAS_CHOICE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_V: tl.constexpr, BIG: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < n_rows
    base = logits_ptr + rows.to(tl.int64) * stride_row  # (R,)
    lanes = tl.arange(0, BLOCK_V)
    m = tl.full([BLOCK_R], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_R], tl.float32)
    i1 = tl.zeros([BLOCK_R], tl.int32)
    for start in range(0, V, BLOCK_V):
        cols = start + lanes
        ok = row_ok[:, None] & (cols < V)[None, :]
        x = tl.load(base[:, None] + cols[None, :], mask=ok, other=float("-inf")).to(tl.float32)
        cols2 = tl.zeros([BLOCK_R, BLOCK_V], tl.int32) + cols[None, :]
        bm, bs, bi = block_stats(x, cols2, BIG)
        m, s, i1 = merge_stats(m, s, i1, bm, bs, bi)
    if HAS_CHOICE:
        c = tl.load(choice_ptr + rows, mask=row_ok, other=0)
        vc = tl.load(base + c, mask=row_ok, other=0.0).to(tl.float32)
        tok = c
    else:
        vc = m
        tok = i1.to(tl.int64)
    score = finish_confidence(m, s, vc)
    tl.store(idx_ptr + rows, tok, mask=row_ok)
    tl.store(score_ptr + rows, score, mask=row_ok)


@triton.jit
def _masked_score(raw_ptr, masked_ptr, row, pos, C):
    """The score at ``pos`` as the commit rule sees it: -1 where the slot is not masked or outside the row."""
    ok = (pos >= 0) & (pos < C)
    m = tl.load(masked_ptr + row + pos, mask=ok, other=0) != 0
    return tl.where(ok & m, tl.load(raw_ptr + row + pos, mask=ok, other=0.0), -1.0)


@triton.jit
def _commit_kernel(
    idx_ptr, raw_ptr, tokens_ptr, masked_ptr, score_ptr, commit_ptr, C, threshold, min_commit, max_commit,
    BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr, SPREAD: tl.constexpr,
):
    """One program per batch row: rank and decide every slot (phase 1), then write (phase 2). (B, C) contiguous.
    SPREAD = R > 0: the floor takes only the maxima of their +-R masked neighbourhood (``commit.spread_eligible``),
    ranked among themselves, until no more than min_commit slots of the row are masked."""
    row = tl.program_id(0).to(tl.int64) * C
    for i0 in range(0, C, BLOCK_I):
        ii = i0 + tl.arange(0, BLOCK_I)
        ok_i = ii < C
        mi = tl.load(masked_ptr + row + ii, mask=ok_i, other=0) != 0
        si = tl.where(mi, tl.load(raw_ptr + row + ii, mask=ok_i, other=0.0), -1.0)
        rank = tl.zeros([BLOCK_I], tl.int32)
        rank_loc = tl.zeros([BLOCK_I], tl.int32)
        n_masked = tl.zeros([BLOCK_J], tl.int32)
        if SPREAD > 0:
            loc_i = mi
            for d in tl.static_range(1, SPREAD + 1):
                loc_i = loc_i & (si > _masked_score(raw_ptr, masked_ptr, row, ii - d, C)) & (
                    si >= _masked_score(raw_ptr, masked_ptr, row, ii + d, C))
        for j0 in range(0, C, BLOCK_J):
            jj = j0 + tl.arange(0, BLOCK_J)
            ok_j = jj < C
            mj = tl.load(masked_ptr + row + jj, mask=ok_j, other=0) != 0
            sj = tl.where(mj, tl.load(raw_ptr + row + jj, mask=ok_j, other=0.0), -1.0)
            sj = tl.where(ok_j, sj, float("-inf"))
            ahead = (sj[None, :] > si[:, None]) | ((sj[None, :] == si[:, None]) & (jj[None, :] < ii[:, None]))
            rank += tl.sum(ahead.to(tl.int32), axis=1)
            n_masked += (ok_j & mj).to(tl.int32)
            if SPREAD > 0:
                loc_j = ok_j & mj
                for d in tl.static_range(1, SPREAD + 1):
                    loc_j = loc_j & (sj > _masked_score(raw_ptr, masked_ptr, row, jj - d, C)) & (
                        sj >= _masked_score(raw_ptr, masked_ptr, row, jj + d, C))
                rank_loc += tl.sum((ahead & loc_j[None, :]).to(tl.int32), axis=1)
        if SPREAD > 0:
            # The endgame (twin: commit.commit_mask_ref): at most min_commit masked slots left -> the plain floor.
            few = tl.sum(n_masked, axis=0) <= min_commit
            floor = tl.where(few, rank < min_commit, loc_i & (rank_loc < min_commit))
        else:
            floor = rank < min_commit
        commit = mi & ((si >= threshold) | floor)
        commit = commit & ((max_commit <= 0) | (rank < max_commit))
        tl.store(score_ptr + row + ii, si, mask=ok_i)
        tl.store(commit_ptr + row + ii, commit.to(tl.uint8), mask=ok_i)
    # Phase 2: only now write tokens and mask in place (phase 1 reads the whole row's mask for every block).
    tl.debug_barrier()
    for i0 in range(0, C, BLOCK_I):
        ii = i0 + tl.arange(0, BLOCK_I)
        ok_i = ii < C
        commit = tl.load(commit_ptr + row + ii, mask=ok_i, other=0) != 0
        mi = tl.load(masked_ptr + row + ii, mask=ok_i, other=0) != 0
        tok = tl.load(tokens_ptr + row + ii, mask=ok_i, other=0)
        new = tl.load(idx_ptr + row + ii, mask=ok_i, other=0)
        tl.store(tokens_ptr + row + ii, tl.where(commit, new, tok), mask=ok_i)
        tl.store(masked_ptr + row + ii, (mi & ~commit).to(tl.uint8), mask=ok_i)


def token_stats_triton(
    logits: torch.Tensor, choice: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton version of ``token_stats_ref``: (token (...) int64, its probability (...) fp32) from logits
    (..., V)."""
    shape = logits.shape[:-1]
    V = logits.shape[-1]
    flat = logits.reshape(-1, V)
    if flat.stride(-1) != 1:
        flat = flat.contiguous()
    n = flat.shape[0]
    idx = torch.empty(n, dtype=torch.int64, device=logits.device)
    s = torch.empty(n, dtype=torch.float32, device=logits.device)
    if n == 0:
        return idx.reshape(shape), s.reshape(shape)
    ch = idx if choice is None else choice.reshape(-1).to(torch.int64).contiguous()
    # GPU: 1 row x up to 1024 lanes per program: a row is >= 8 KB of logits for V >= 4096, enough to stream at
    # bandwidth; many small programs keep every SM busy for B*C >= 2 * SM count (to be measured: kernels/BENCHMARKS.md).
    block_v = min(1024, triton.next_power_of_2(V))
    block_r = rows_per_program(logits, n, 1)
    _row_stats_kernel[(triton.cdiv(n, block_r),)](
        flat, flat.stride(0), n, V, ch, idx, s,
        HAS_CHOICE=choice is not None, BLOCK_R=block_r, BLOCK_V=block_v, BIG=_INT_BIG,
    )
    return idx.reshape(shape), s.reshape(shape)


def commit_from_stats_triton(
    idx: torch.Tensor, s: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor, rule: CommitRule
) -> tuple[torch.Tensor, torch.Tensor]:
    """The threshold commit from per-slot (token, score) (B, C); same rule as ``commit_mask_ref``, in place."""
    if tokens.dtype != torch.int64 or masked.dtype != torch.bool:
        raise TypeError("tokens must be int64 and masked bool")
    B, C = tokens.shape
    score = torch.empty(B, C, dtype=torch.float32, device=tokens.device)
    commit = torch.empty(B, C, dtype=torch.bool, device=tokens.device)
    if B * C == 0:
        return score, commit
    tok = tokens if tokens.is_contiguous() else tokens.contiguous()
    msk = masked if masked.is_contiguous() else masked.contiguous()
    block = min(64 if gpu_sizes(tokens) else 256, triton.next_power_of_2(C))
    _commit_kernel[(B,)](
        idx.reshape(B, C).to(torch.int64).contiguous(), s.reshape(B, C).float().contiguous(), tok,
        msk.view(torch.uint8), score, commit.view(torch.uint8), C, float(rule.threshold), int(rule.min_commit),
        int(rule.max_commit), BLOCK_I=block, BLOCK_J=block, SPREAD=int(rule.spread),
    )
    if tok is not tokens:
        tokens.copy_(tok)
    if msk is not masked:
        masked.copy_(msk)
    return score, commit


# Triton version of ``commit.commit_step_ref`` (same arguments, same in-place writes, same returns).
commit_step_triton = commit_step_of(token_stats_triton, commit_from_stats_triton)
